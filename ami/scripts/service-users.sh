#!/usr/bin/env bash
set -euo pipefail
# System accounts and directories: `spark` runs the Spark master, workers and
# the job; `hdfs` runs the NameNode and DataNodes (and is HDFS's superuser).
# Neither can log in. The data volume is mounted at /data by node-bootstrap.

SCRIPT_NAME="service-users"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"

groupadd --system hadoop 2>/dev/null || true
for user in spark hdfs; do
  if ! id "${user}" >/dev/null 2>&1; then
    useradd --system --gid hadoop --home-dir "/var/lib/${user}" --create-home \
      --shell /usr/sbin/nologin "${user}"
  fi
done

install -d -m 0755 -o root -g root /opt/tablecast /opt/tablecast/bin /opt/tablecast/templates
install -d -m 0755 -o root -g root /etc/tablecast /etc/hadoop /etc/spark
install -d -m 0755 -o root -g root /var/lib/tablecast /var/lib/tablecast/wheels
install -d -m 0755 -o root -g root /data
install -d -m 0755 -o root -g adm /var/log/tablecast
# Hadoop's scripts want a log directory even in the foreground, where the
# daemons log to the console (journald).
install -d -m 0750 -o hdfs -g hadoop /var/log/hadoop
log "users spark and hdfs (group hadoop) and base directories are in place"
