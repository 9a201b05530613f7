#!/usr/bin/env bash
set -euo pipefail
# The connector jars the job needs on the cluster, into SPARK_HOME/jars (the
# PySpark package's jars directory, on every driver and executor classpath):
# hadoop-aws at the Hadoop version, with the AWS SDK v2 bundle and the
# analytics accelerator it was built against (s3a). Kafka needs no jar: the
# job reads it in Python with confluent-kafka (docs/design.md, "Reading
# Kafka"), installed with the venv from requirements.lock.
# Each jar is verified against the checksum file Maven Central publishes next
# to it. Then the pins are checked against what the publishers' own POMs
# declare, so an SDK that does not match its connector stops the build here
# instead of failing the job with ClassNotFoundException.

SCRIPT_NAME="spark-jars"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"
require_file "${VERSIONS_FILE}"

readonly SPARK_HOME=/opt/spark
[[ -d "${SPARK_HOME}/jars" ]] || die "no ${SPARK_HOME}/jars: run python-env.sh first"

spark_version="$(version_of spark version)"
scala="$(version_of spark scala_binary)"
hadoop_version="$(version_of hadoop version)"
hadoop_aws="$(version_of jars hadoop_aws)"
sdk_bundle="$(version_of jars aws_sdk_bundle)"
accelerator="$(version_of jars analytics_accelerator_s3)"

# Check: the pins that must agree among themselves, before downloading.
expect_equal "hadoop-aws version (must be the Hadoop version)" "${hadoop_version}" "${hadoop_aws}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# destination group artifact version [classifier]
readonly JARS=(
  "${SPARK_HOME}/jars org.apache.hadoop hadoop-aws ${hadoop_aws}"
  "${SPARK_HOME}/jars software.amazon.awssdk bundle ${sdk_bundle}"
  "${SPARK_HOME}/jars software.amazon.s3.analyticsaccelerator analyticsaccelerator-s3 ${accelerator}"
)

# Check: none of these libraries may already be in SPARK_HOME/jars at another
# version (two versions of one library on a classpath is the classic failure).
for entry in "${JARS[@]}"; do
  read -r _ _ artifact _ _ <<<"${entry}"
  if compgen -G "${SPARK_HOME}/jars/${artifact}-[0-9]*.jar" >/dev/null; then
    die "${SPARK_HOME}/jars already has ${artifact}: $(ls "${SPARK_HOME}/jars/${artifact}"-[0-9]*.jar)"
  fi
done

for entry in "${JARS[@]}"; do
  read -r destination group artifact version classifier <<<"${entry}"
  jar="$(maven_fetch_verified "${work}" "${group}" "${artifact}" "${version}" jar "${classifier}")"
  install -m 0644 -o root -g root "${jar}" "${destination}/"
done

# Check: in SPARK_HOME/jars, only the bundle carries AWS SDK v2 classes.
sdk_copies="$(python3 - "${SPARK_HOME}/jars" <<'PY'
import pathlib
import sys
import zipfile

for jar in sorted(pathlib.Path(sys.argv[1]).glob("*.jar")):
    if jar.name.startswith("bundle-"):
        continue
    with zipfile.ZipFile(jar) as archive:
        if any(name.startswith("software/amazon/awssdk/") for name in archive.namelist()):
            print(jar.name)
PY
)"
[[ -z "${sdk_copies}" ]] || die "AWS SDK v2 classes outside the bundle in SPARK_HOME/jars: ${sdk_copies}"

# The agreements, checked against the publishers' POMs (each POM verified
# like the jars): Spark's Hadoop and Scala (spark-parent), hadoop-aws's SDK
# bundle and analytics accelerator (resolved through hadoop-project).
spark_parent_pom="$(maven_fetch_verified "${work}" org.apache.spark "spark-parent_${scala}" "${spark_version}" pom)"
expect_equal "Hadoop that Spark ${spark_version} is built against" "${hadoop_version}" \
  "$(pom_property "${spark_parent_pom}" hadoop.version)"
expect_equal "Scala binary version of Spark ${spark_version}" "${scala}" \
  "$(pom_property "${spark_parent_pom}" scala.binary.version)"

aws_pom="$(maven_fetch_verified "${work}" org.apache.hadoop hadoop-aws "${hadoop_aws}" pom)"
hadoop_project_pom="$(maven_fetch_verified "${work}" org.apache.hadoop hadoop-project "${hadoop_version}" pom)"
expect_equal "AWS SDK bundle declared by hadoop-aws ${hadoop_aws}" "${sdk_bundle}" \
  "$(pom_dependency_version "${aws_pom}" "${hadoop_project_pom}" software.amazon.awssdk bundle)"
expect_equal "analyticsaccelerator-s3 declared by hadoop-aws ${hadoop_aws}" "${accelerator}" \
  "$(pom_dependency_version "${aws_pom}" "${hadoop_project_pom}" software.amazon.s3.analyticsaccelerator analyticsaccelerator-s3)"

log "connector jars installed in ${SPARK_HOME}/jars"
