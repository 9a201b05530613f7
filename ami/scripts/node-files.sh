#!/usr/bin/env bash
set -euo pipefail
# The node's own files, from ami/files: the bootstrap and job entry points
# (/opt/tablecast/bin), the systemd units (installed, not enabled:
# node-bootstrap enables the role's units), the configuration templates, the
# logging path (journald -> rsyslog -> /var/log/tablecast -> CloudWatch agent),
# the image's environment file, and a copy of versions.toml for validate.sh.

SCRIPT_NAME="node-files"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"

readonly FILES="${TABLECAST_BUILD_DIR}/files"
# shellcheck source=lib/node-files.sh
source "${TABLECAST_BUILD_DIR}/lib/node-files.sh"

require_file "${VERSIONS_FILE}"
[[ -d /opt/spark/jars && -d /opt/hadoop/bin ]] || die "run python-env.sh and hadoop.sh first"

install_node_files "${FILES}" /
# /opt/tablecast/python on the venv's path: Spark's Python daemon,
# tablecast_preload, which imports the workers' libraries before it forks
# them, and its spark_path, which every Python process of the venv runs as it
# starts (PySpark from the package, not Spark's zips). They are the image's,
# not the job's (the wheel tablecast-ops deploy builds holds the app package only).
PYTHONPATH=/opt/tablecast/python /opt/tablecast/venv/bin/python \
  -m tablecast_preload.pth /opt/tablecast/python
install -m 0644 -o root -g root "${VERSIONS_FILE}" /opt/tablecast/versions.toml

# Literal values: systemd's EnvironmentFile does not expand variables.
java_home="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
require_file /opt/hadoop/lib/native/libhdfs.so
hadoop_classpath="$(JAVA_HOME="${java_home}" /opt/hadoop/bin/hadoop classpath --glob)"
cat >/etc/tablecast/image.env <<ENV
# Written at image build time by ami/scripts/node-files.sh.
JAVA_HOME=${java_home}
SPARK_HOME=/opt/spark
SPARK_CONF_DIR=/etc/spark
HADOOP_HOME=/opt/hadoop
HADOOP_CONF_DIR=/etc/hadoop
HADOOP_LOG_DIR=/var/log/hadoop
HADOOP_ROOT_LOGGER=INFO,console
PYSPARK_PYTHON=/opt/tablecast/venv/bin/python
PYSPARK_DRIVER_PYTHON=/opt/tablecast/venv/bin/python
# pyarrow's HDFS client (the job's partition states beside its checkpoint, written
# by the driver and by every executor's Python worker) loads libhdfs from here and
# starts its JVM with Hadoop's jars from CLASSPATH. Spark's own JVMs are started
# with -cp and ignore CLASSPATH.
ARROW_LIBHDFS_DIR=/opt/hadoop/lib/native
CLASSPATH=${hadoop_classpath}
PATH=/opt/tablecast/venv/bin:/opt/spark/bin:/opt/hadoop/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ENV
chmod 0644 /etc/tablecast/image.env

systemctl daemon-reload
# node-bootstrap on every boot; it does nothing until the user data has
# written node.env, and then starts it.
systemctl enable tablecast-bootstrap.service
for unit in "${NODE_UNITS[@]}" tablecast-bootstrap; do
  unit_file="/etc/systemd/system/${unit}.service"
  if [[ "${unit}" == *@ ]]; then
    # A template is verified as one of its instances.
    instance_dir="$(mktemp -d)"
    cp "${unit_file}" "${instance_dir}/${unit}verify.service"
    unit_file="${instance_dir}/${unit}verify.service"
  fi
  systemd-analyze verify "${unit_file}" || die "systemd rejects ${unit}.service"
done
rsyslogd -N1 -f /etc/rsyslog.conf >/dev/null || die "rsyslog rejects its configuration"
log "node files installed; units ${NODE_UNITS[*]} are installed and left disabled"
