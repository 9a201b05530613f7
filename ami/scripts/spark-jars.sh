#!/usr/bin/env bash
set -euo pipefail
# The connector jars the job needs on the cluster, into SPARK_HOME/jars (the
# PySpark package's jars directory, on every driver and executor classpath):
#   - spark-sql-kafka-0-10 and spark-token-provider-kafka-0-10, for the Scala
#     binary version and at the Spark version;
#   - kafka-clients and commons-pool2, the versions spark-sql-kafka declares;
#   - hadoop-aws at the Hadoop version, with the AWS SDK v2 bundle and the
#     analytics accelerator it was built against (s3a);
# and aws-msk-iam-auth (the shaded `-all` jar, MSK's IAM SASL mechanism) into
# /opt/tablecast/jars, which SPARK_DIST_CLASSPATH (image.env) appends AFTER
# SPARK_HOME/jars. The `-all` jar carries its own, older, unrelocated copy of
# AWS SDK v2 classes (aws/aws-msk-iam-auth#32, #63): in the same directory as
# the SDK bundle, whichever jar the JVM lists first would win, class by class,
# and S3A could run against the older SDK (NoSuchMethodError). Appended, the
# bundle's SDK always wins and the auth library still finds its own classes.
# Each jar is verified against the checksum file Maven Central publishes next
# to it. Then the pins are checked against what the publishers' own POMs
# declare, so a kafka-clients or SDK that does not match its connector stops
# the build here instead of failing the job with ClassNotFoundException.

SCRIPT_NAME="spark-jars"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"
require_file "${VERSIONS_FILE}"

readonly SPARK_HOME=/opt/spark
readonly APPENDED_JARS=/opt/tablecast/jars
[[ -d "${SPARK_HOME}/jars" ]] || die "no ${SPARK_HOME}/jars: run python-env.sh first"
[[ -d "${APPENDED_JARS}" ]] || die "no ${APPENDED_JARS}: run service-users.sh first"

spark_version="$(version_of spark version)"
scala="$(version_of spark scala_binary)"
hadoop_version="$(version_of hadoop version)"
spark_sql_kafka="$(version_of jars spark_sql_kafka)"
kafka_clients="$(version_of jars kafka_clients)"
commons_pool2="$(version_of jars commons_pool2)"
msk_iam_auth="$(version_of jars aws_msk_iam_auth)"
hadoop_aws="$(version_of jars hadoop_aws)"
sdk_bundle="$(version_of jars aws_sdk_bundle)"
accelerator="$(version_of jars analytics_accelerator_s3)"

# Check: the pins that must agree among themselves, before downloading.
expect_equal "spark-sql-kafka version (must be the Spark version)" "${spark_version}" "${spark_sql_kafka}"
expect_equal "hadoop-aws version (must be the Hadoop version)" "${hadoop_version}" "${hadoop_aws}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# destination group artifact version [classifier]
readonly JARS=(
  "${SPARK_HOME}/jars org.apache.spark spark-sql-kafka-0-10_${scala} ${spark_sql_kafka}"
  "${SPARK_HOME}/jars org.apache.spark spark-token-provider-kafka-0-10_${scala} ${spark_sql_kafka}"
  "${SPARK_HOME}/jars org.apache.kafka kafka-clients ${kafka_clients}"
  "${SPARK_HOME}/jars org.apache.commons commons-pool2 ${commons_pool2}"
  "${SPARK_HOME}/jars org.apache.hadoop hadoop-aws ${hadoop_aws}"
  "${SPARK_HOME}/jars software.amazon.awssdk bundle ${sdk_bundle}"
  "${SPARK_HOME}/jars software.amazon.s3.analyticsaccelerator analyticsaccelerator-s3 ${accelerator}"
  "${APPENDED_JARS} software.amazon.msk aws-msk-iam-auth ${msk_iam_auth} all"
)

# Check: none of these libraries may already be in SPARK_HOME/jars at another
# version (two kafka-clients on one classpath is the classic failure).
for entry in "${JARS[@]}"; do
  read -r _ _ artifact _ _ <<<"${entry}"
  for dir in "${SPARK_HOME}/jars" "${APPENDED_JARS}"; do
    if compgen -G "${dir}/${artifact}-[0-9]*.jar" >/dev/null; then
      die "${dir} already has ${artifact}: $(ls "${dir}/${artifact}"-[0-9]*.jar)"
    fi
  done
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
# like the jars): spark-sql-kafka's kafka-clients and commons-pool2 (resolved
# through spark-parent), hadoop-aws's SDK bundle and analytics accelerator
# (resolved through hadoop-project).
kafka_pom="$(maven_fetch_verified "${work}" org.apache.spark "spark-sql-kafka-0-10_${scala}" "${spark_sql_kafka}" pom)"
spark_parent_pom="$(maven_fetch_verified "${work}" org.apache.spark "spark-parent_${scala}" "${spark_version}" pom)"
expect_equal "kafka-clients declared by spark-sql-kafka ${spark_sql_kafka}" "${kafka_clients}" \
  "$(pom_dependency_version "${kafka_pom}" "${spark_parent_pom}" org.apache.kafka kafka-clients)"
expect_equal "commons-pool2 declared by spark-sql-kafka ${spark_sql_kafka}" "${commons_pool2}" \
  "$(pom_dependency_version "${kafka_pom}" "${spark_parent_pom}" org.apache.commons commons-pool2)"
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

log "connector jars installed in ${SPARK_HOME}/jars and ${APPENDED_JARS}"
