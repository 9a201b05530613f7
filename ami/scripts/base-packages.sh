#!/usr/bin/env bash
set -euo pipefail
# Operating system packages from Debian's own archive: the Java runtime and
# Python interpreter at the major versions pinned in versions.toml, and the
# tools the other scripts and the node bootstrap need. Debian's packages are
# signed by the archive keys apt already trusts. No `apt-get upgrade`: the
# base image is a dated Debian point build chosen by filters.

SCRIPT_NAME="base-packages"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"
require_file "${VERSIONS_FILE}"

java_version="$(version_of java version)"
python_version="$(version_of python version)"

# First boot's own work (cloud-init, apt timers) must not race this script.
if command -v cloud-init >/dev/null 2>&1; then
  cloud-init status --wait >/dev/null || log "cloud-init reported a problem; continuing"
fi

export DEBIAN_FRONTEND=noninteractive
readonly APT_OPTIONS=(-o DPkg::Lock::Timeout=600)
apt-get "${APT_OPTIONS[@]}" update
apt-get "${APT_OPTIONS[@]}" install --yes --no-install-recommends \
  "openjdk-${java_version}-jre-headless" \
  "python${python_version}" \
  "python${python_version}-venv" \
  ca-certificates \
  curl \
  gnupg \
  xfsprogs \
  nvme-cli \
  util-linux \
  rsyslog \
  logrotate \
  procps
apt-get clean
rm -rf /var/lib/apt/lists/*

java_home="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
[[ -x "${java_home}/bin/java" ]] || die "could not locate JAVA_HOME (found ${java_home})"
log "Java ${java_version} at ${java_home}; Python ${python_version} at $(command -v "python${python_version}")"
