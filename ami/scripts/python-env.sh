#!/usr/bin/env bash
set -euo pipefail
# The Python environment at /opt/tablecast/venv: PySpark and every other
# dependency of the job, exactly as locked in requirements.lock (the same set
# the tests run against), installed with --require-hashes so pip refuses any
# file whose hash is not in the lock. PySpark's package directory is
# SPARK_HOME: its bin/ and sbin/ run the standalone master and workers.
# /opt/spark points at it.

SCRIPT_NAME="python-env"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"

readonly VENV=/opt/tablecast/venv
readonly LOCK="${TABLECAST_BUILD_DIR}/requirements.lock"
require_file "${VERSIONS_FILE}" "${LOCK}"

python_version="$(version_of python version)"
spark_version="$(version_of spark version)"
scala_binary="$(version_of spark scala_binary)"
hadoop_version="$(version_of hadoop version)"

# Check: the lock must pin the same PySpark as versions.toml.
grep -Eq "^pyspark==${spark_version//./\\.}([[:space:]\\]|$)" "${LOCK}" ||
  die "requirements.lock does not pin pyspark==${spark_version}"

"python${python_version}" -m venv "${VENV}"
"${VENV}/bin/python" -m pip install --no-cache-dir --disable-pip-version-check \
  --require-hashes --requirement "${LOCK}"

expect_equal "Python in the venv" "${python_version}" \
  "$("${VENV}/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
expect_equal "PySpark" "${spark_version}" \
  "$("${VENV}/bin/python" -c 'import pyspark; print(pyspark.__version__)')"

spark_home="$("${VENV}/bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
[[ -x "${spark_home}/bin/spark-class" && -x "${spark_home}/bin/spark-submit" ]] ||
  die "PySpark at ${spark_home} has no bin/spark-class or bin/spark-submit"
ln -sfn "${spark_home}" /opt/spark

# The Hadoop client inside PySpark must be the Hadoop the image runs for HDFS
# and the hadoop-aws it adds; Scala must be the pinned binary version.
[[ -f "${spark_home}/jars/hadoop-client-api-${hadoop_version}.jar" ]] ||
  die "PySpark bundles $(basename "$(ls "${spark_home}"/jars/hadoop-client-api-*.jar)"), not hadoop-client-api-${hadoop_version}.jar"
compgen -G "${spark_home}/jars/scala-library-${scala_binary}.*.jar" >/dev/null ||
  die "PySpark does not bundle scala-library ${scala_binary}.x"
log "SPARK_HOME=${spark_home} (/opt/spark): PySpark ${spark_version}, Hadoop client ${hadoop_version}, Scala ${scala_binary}"
