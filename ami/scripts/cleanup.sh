#!/usr/bin/env bash
set -euo pipefail
# Leave nothing of the build machine in the image: the build's uploads and
# caches, the package lists, SSH host keys and authorized keys (cloud-init
# creates fresh ones on each instance), shell history, logs, cloud-init's
# per-instance state, what the SSM Agent kept of the build instance and the
# machine id. validate.sh checks the result.

SCRIPT_NAME="cleanup"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"

[[ "${TABLECAST_BUILD_DIR}" == /tmp/* ]] || die "refusing to remove ${TABLECAST_BUILD_DIR}"

apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb
rm -rf /root/.cache /var/lib/spark/.cache /var/lib/hdfs/.cache /var/tmp/*

# SSH: host keys and every authorized key (Packer's temporary key included).
rm -f /etc/ssh/ssh_host_*
find /root /home -maxdepth 3 -path '*/.ssh/authorized_keys' -type f -delete

# Shell history.
unset HISTFILE
find /root /home -maxdepth 2 -name '.*_history' -type f -delete

# cloud-init runs again, as on a new instance, on first boot of every node.
if command -v cloud-init >/dev/null 2>&1; then
  cloud-init clean --logs
fi
truncate -s 0 /etc/machine-id

# The SSM Agent ran on the build instance (its package starts it): its state
# names that instance. Each node's agent registers itself from its own
# instance identity at boot.
systemctl stop amazon-ssm-agent.service
find /var/lib/amazon/ssm -mindepth 1 -delete

# Logs. Stop rsyslog (socket too, or the next line would start it again) and
# move journald to /run for the rest of this session, so nothing the build
# does from here on lands on the image's disk; both are back on first boot.
systemctl stop syslog.socket rsyslog.service
journalctl --relinquish-var
find /var/log/journal -type f -name '*.journal*' -delete 2>/dev/null || true
find /var/log -type f \( -name '*.gz' -o -name '*.xz' -o -name '*.[0-9]' -o -name '*.old' \) -delete
find /var/log -type f -exec truncate -s 0 {} +

# Last: the build's own uploads (versions.toml, requirements.lock, files).
rm -rf "${TABLECAST_BUILD_DIR}"
echo "[cleanup] done" >&2
