#!/usr/bin/env bash
set -euo pipefail
# The last step of the build: check the image is what versions.toml says and
# that nothing of the build machine is left. Reads the pins from the copy of
# versions.toml baked into the image; self-contained (cleanup.sh has removed
# the build's uploads). Every failed check is reported, then the build fails.

readonly VERSIONS=/opt/tablecast/versions.toml
readonly SPARK_DIR=/opt/spark
readonly VENV=/opt/tablecast/venv
failures=0

pass() { printf '[validate] ok    %s\n' "$*" >&2; }
fail() {
  printf '[validate] FAIL  %s\n' "$*" >&2
  failures=$((failures + 1))
}
check_equal() {
  local what="$1" expected="$2" actual="$3"
  if [[ "${expected}" == "${actual}" ]]; then
    pass "${what}: ${actual}"
  else
    fail "${what}: expected '${expected}', found '${actual}'"
  fi
}
# check DESCRIPTION COMMAND...: pass when COMMAND succeeds.
check() {
  local what="$1"
  shift
  if "$@"; then
    pass "${what}"
  else
    fail "${what}"
  fi
}
pin() {
  python3 - "${VERSIONS}" "$1" "$2" <<'PY'
import sys
import tomllib

data = tomllib.load(open(sys.argv[1], "rb"))
print(data[sys.argv[2]][sys.argv[3]])
PY
}

[[ -r "${VERSIONS}" ]] || {
  fail "${VERSIONS} is missing"
  exit 1
}

# Versions ------------------------------------------------------------------
# shellcheck source=/dev/null
source /etc/tablecast/image.env
check_equal "Java" "$(pin java version)" \
  "$("${JAVA_HOME}/bin/java" -XshowSettings:properties -version 2>&1 |
    awk -F'= ' '/java.specification.version/ { print $2 }')"
check_equal "Python (venv)" "$(pin python version)" \
  "$("${VENV}/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
check_equal "PySpark" "$(pin spark version)" \
  "$("${VENV}/bin/python" -c 'import pyspark; print(pyspark.__version__)')"
check_equal "SPARK_HOME in image.env" "${SPARK_DIR}" "${SPARK_HOME:-}"
check_equal "SPARK_HOME is PySpark's package directory" "$(readlink -f "${SPARK_DIR}")" \
  "$("${VENV}/bin/python" -c 'import os, pyspark; print(os.path.realpath(os.path.dirname(pyspark.__file__)))')"
check_equal "Hadoop" "Hadoop $(pin hadoop version)" "$(/opt/hadoop/bin/hadoop version 2>/dev/null | head -n 1)"
# The job's partition states beside the checkpoint are written through pyarrow's
# HDFS client (libhdfs over the JVM): it must load with image.env's settings.
check "pyarrow's HDFS client loads libhdfs (ARROW_LIBHDFS_DIR, CLASSPATH)" \
  "${VENV}/bin/python" -c 'import pyarrow.fs as fs; fs.HadoopFileSystem("default", 0).get_file_info("/")'

scala="$(pin spark scala_binary)"
hadoop_version="$(pin hadoop version)"
# artifact=version: exactly one jar of each, at exactly this version.
expected_jars=(
  "hadoop-aws=$(pin jars hadoop_aws)"
  "bundle=$(pin jars aws_sdk_bundle)"
  "analyticsaccelerator-s3=$(pin jars analytics_accelerator_s3)"
  "hadoop-client-api=${hadoop_version}"
  "hadoop-client-runtime=${hadoop_version}"
)
for entry in "${expected_jars[@]}"; do
  artifact="${entry%%=*}"
  version="${entry#*=}"
  mapfile -t found < <(find "${SPARK_DIR}/jars/" -maxdepth 1 -name "${artifact}-[0-9]*.jar" -printf '%f\n')
  check_equal "jar ${artifact}" "${artifact}-${version}.jar" "${found[*]:-none}"
done
# Kafka is read in Python (docs/design.md, "Reading Kafka"): its client and
# MSK's IAM signer come with the venv, and no Kafka jar is on the classpath.
check "the Kafka client and MSK's IAM token signer import" "${VENV}/bin/python" -c \
  'import confluent_kafka, aws_msk_iam_sasl_signer.MSKAuthTokenProvider'
# Spark's Python daemon (run-job names it): the venv imports the image's copy,
# and it preloads every library it lists and none of the job's code.
check "tablecast_preload imports from /opt/tablecast/python and preloads every library" \
  "${VENV}/bin/python" -c 'import sys, tablecast_preload as p
assert p.__file__.startswith("/opt/tablecast/python/"), p.__file__
p.preload()
sys.exit(1 if p.Preloaded.failed or p.Preloaded.app_imported else 0)'
# Spark puts its own zips first on its Python processes' path: the venv's .pth
# takes them off, and PySpark imports from the package, its bytecode cached.
check "a Spark Python process imports PySpark from the package, not ${SPARK_DIR}/python/lib's zips" \
  env PYTHONPATH="$(printf '%s:' "${SPARK_DIR}"/python/lib/*.zip)" "${VENV}/bin/python" -c \
  'import pyspark, py4j; assert ".zip" not in pyspark.__file__ + py4j.__file__'
if find "${SPARK_DIR}/jars/" -maxdepth 1 -name '*kafka*.jar' | grep -q .; then
  fail "Kafka jars in ${SPARK_DIR}/jars: $(find "${SPARK_DIR}/jars/" -maxdepth 1 -name '*kafka*.jar' -printf '%f ')"
else
  pass "no Kafka jar in ${SPARK_DIR}/jars"
fi
if find "${SPARK_DIR}/jars/" -maxdepth 1 -name '*_2.1[0-2]-*.jar' | grep -q .; then
  fail "jars for another Scala binary version than ${scala}: $(find "${SPARK_DIR}/jars/" -maxdepth 1 -name '*_2.1[0-2]-*.jar' -printf '%f ')"
else
  pass "every Scala jar is for Scala ${scala}"
fi

# Services and files ----------------------------------------------------------
for unit in spark-master spark-worker hdfs-namenode hdfs-secondarynamenode hdfs-datanode \
  tablecast-job tablecast-archiver; do
  if [[ -f "/etc/systemd/system/${unit}.service" ]] && systemctl cat "${unit}.service" >/dev/null 2>&1; then
    state="$(systemctl is-enabled "${unit}.service" 2>/dev/null || true)"
    check_equal "${unit}.service installed, enabled by node-bootstrap only" disabled "${state}"
  else
    fail "${unit}.service is not installed"
  fi
done
# A declared job's service (tablecast-job@<name>.service): the template, started by name.
if systemctl cat tablecast-job@verify.service 2>/dev/null | grep -qx 'ExecStart=/opt/tablecast/bin/run-job %i'; then
  pass "tablecast-job@.service installed: run-job <name> for a declared job"
else
  fail "tablecast-job@.service is not installed"
fi
check_equal "tablecast-bootstrap.service runs node-bootstrap on every boot" enabled \
  "$(systemctl is-enabled tablecast-bootstrap.service 2>/dev/null || true)"
# Every program the units and node-bootstrap's timers run (as the bootstrap
# writes them on a driver), and the bootstrap itself (the user data runs it).
timer_units="$(mktemp -d)"
TABLECAST_UNIT_DIR="${timer_units}" bash -c 'source /opt/tablecast/bin/node-bootstrap && driver_timers' ||
  fail "node-bootstrap could not write its timers"
mapfile -t programs < <(sed -n 's/^Exec[A-Za-z]*=[-@+!:]*\([^ ]*\).*/\1/p' \
  /etc/systemd/system/{spark,hdfs,tablecast}-*.service "${timer_units}"/*.service | sort -u)
rm -rf "${timer_units}"
for program in /opt/tablecast/bin/node-bootstrap "${programs[@]}"; do
  check "${program} is executable" test -x "${program}"
done
for template in core-site.xml hdfs-site.xml spark-defaults.conf cloudwatch-agent.json; do
  check "template ${template} is installed" test -f "/opt/tablecast/templates/${template}.tmpl"
done
check "the CloudWatch agent is installed" \
  test -x /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl
# Run Command (tablecast-ops deploy, start, stop) and Session Manager need the
# SSM Agent running on every node from its first boot.
ssm_version="$(dpkg-query --show --showformat='${Version}' amazon-ssm-agent 2>/dev/null || true)"
check_equal "SSM Agent" "$(pin ssm_agent version)" "${ssm_version%-*}"
check_equal "amazon-ssm-agent.service enabled (started at every boot)" enabled \
  "$(systemctl is-enabled amazon-ssm-agent.service 2>/dev/null || true)"
for user in spark hdfs; do
  check_equal "login shell of system user ${user}" /usr/sbin/nologin \
    "$(getent passwd "${user}" | cut -d: -f7)"
done

# Nothing left of the build ----------------------------------------------------
leftovers() {
  local what="$1"
  shift
  local found
  found="$("$@" 2>/dev/null | head -n 20 | tr '\n' ' ')"
  if [[ -n "${found}" ]]; then
    fail "${what} left in the image: ${found}"
  else
    pass "no ${what}"
  fi
}
leftovers "SSH host keys" find /etc/ssh -maxdepth 1 -name 'ssh_host_*'
leftovers "authorized SSH keys" find /root /home -maxdepth 3 -path '*/.ssh/authorized_keys'
leftovers "shell history" find /root /home -maxdepth 2 -name '.*_history'
# cleanup.sh moved journald to /run and stopped rsyslog for the rest of the
# build; only login accounting (this build's own SSH session) may still write.
leftovers "logs" find /var/log -type f -size +0 \
  ! -name wtmp ! -name btmp ! -name lastlog -print
leftovers "build uploads" find /tmp -maxdepth 1 -name 'tablecast-build'
leftovers "cloud-init instance state" find /var/lib/cloud/instances -mindepth 1 -maxdepth 1
leftovers "SSM Agent state of the build instance" find /var/lib/amazon/ssm -mindepth 1 -maxdepth 1

if ((failures > 0)); then
  printf '[validate] %d check(s) failed\n' "${failures}" >&2
  exit 1
fi
printf '[validate] the image matches %s\n' "${VERSIONS}" >&2
