#!/usr/bin/env bash
set -euo pipefail
# The Amazon CloudWatch agent, which ships the node's logs (journald, written
# to files by rsyslog) to CloudWatch Logs. The versioned .deb from AWS's
# download bucket is verified against AWS's detached signature with AWS's
# CloudWatch agent key, whose fingerprint must be the one AWS documents
# ("Verify the signature of the CloudWatch agent package"). The agent is
# configured and started by node-bootstrap, which knows the environment.

SCRIPT_NAME="cloudwatch-agent"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"
require_file "${VERSIONS_FILE}"

readonly BUCKET_URL="https://amazoncloudwatch-agent.s3.amazonaws.com"
# AWS's published fingerprint of the CloudWatch agent signing key.
readonly KEY_FINGERPRINT="937616F3450B7D806CBD9725D58167303B789C72"

agent_version="$(version_of cloudwatch_agent version)"
package_url="${BUCKET_URL}/debian/amd64/${agent_version}/amazon-cloudwatch-agent.deb"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

fetch "${BUCKET_URL}/assets/amazon-cloudwatch-agent.gpg" "${work}/agent.gpg"
fetch "${package_url}" "${work}/amazon-cloudwatch-agent.deb"
fetch "${package_url}.sig" "${work}/amazon-cloudwatch-agent.deb.sig"

# Check the key is AWS's before trusting a signature made with it.
install -d -m 0700 "${work}/gnupg"
fingerprints="$(gpg --homedir "${work}/gnupg" --batch --with-colons --show-keys "${work}/agent.gpg" 2>/dev/null |
  awk -F: '$1 == "fpr" { print $10 }')"
grep -qx "${KEY_FINGERPRINT}" <<<"${fingerprints}" ||
  die "the downloaded CloudWatch agent key is not AWS's (fingerprints: ${fingerprints})"
verify_signature "${work}/amazon-cloudwatch-agent.deb" \
  "${work}/amazon-cloudwatch-agent.deb.sig" "${work}/agent.gpg"

dpkg --install "${work}/amazon-cloudwatch-agent.deb"
installed="$(dpkg-query --show --showformat='${Version}' amazon-cloudwatch-agent)"
# The package's own version may add a Debian revision ("-1") to the
# directory's version, or drop its build suffix ("b<build>").
[[ "${installed}" == "${agent_version}"* || "${agent_version}" == "${installed%%-*}"* ]] ||
  die "installed CloudWatch agent ${installed}, expected ${agent_version}"
systemctl disable amazon-cloudwatch-agent.service >/dev/null 2>&1 || true
log "CloudWatch agent ${installed} installed (started by node-bootstrap)"
