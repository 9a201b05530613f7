#!/usr/bin/env bash
set -euo pipefail
# The AWS Systems Manager Agent, which runs the operator's Run Commands
# (tablecast-ops deploy, start, stop restart the job's service with one) and
# Session Manager's shells. Debian's cloud images ship none, and Debian has
# no package of it. Steps:
#   1. check the committed key (ami/keys/amazon-ssm-agent.asc) is AWS's, by
#      its fingerprint: no key is downloaded;
#   2. download the pinned version's .deb and its detached signature from
#      AWS's download bucket of the build's region (the global one if that
#      does not answer) and verify the signature with that key alone;
#   3. check the package is the pinned version of amazon-ssm-agent, then
#      install it;
#   4. stop the agent the package started on the build instance (cleanup.sh
#      removes what it registered) and leave its unit enabled: every node
#      starts it at boot. validate.sh checks both.

SCRIPT_NAME="ssm-agent"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
: "${AWS_REGION:?AWS_REGION must be set (the build region: its download bucket)}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"
readonly KEY_FILE="${TABLECAST_BUILD_DIR}/keys/amazon-ssm-agent.asc"
require_file "${VERSIONS_FILE}" "${KEY_FILE}"

# The fingerprint of AWS's SSM Agent signing key, as AWS's page and its
# repository (aws/amazon-ssm-agent) publish it.
readonly KEY_FINGERPRINT="DE92C7DA3E56E92331D62A36BC1F495C97DD04ED"
readonly UNIT=amazon-ssm-agent.service

agent_version="$(version_of ssm_agent version)"
[[ "${agent_version}" =~ ^[0-9]+(\.[0-9]+){3}$ ]] ||
  die "[ssm_agent] version '${agent_version}' is not a version like 3.3.987.0"
[[ "${AWS_REGION}" =~ ^[a-z]{2}(-[a-z]+)+-[0-9]+$ ]] || die "AWS_REGION '${AWS_REGION}' is not a region"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

# Step 1.
install -d -m 0700 "${work}/gnupg"
fingerprints="$(gpg --homedir "${work}/gnupg" --batch --with-colons --show-keys "${KEY_FILE}" 2>/dev/null |
  awk -F: '$1 == "fpr" { print $10 }')"
[[ "${fingerprints}" == "${KEY_FINGERPRINT}" ]] ||
  die "${KEY_FILE} is not AWS's SSM Agent key alone (fingerprints: ${fingerprints:-none})"

# Step 2.
path="${agent_version}/debian_amd64/amazon-ssm-agent.deb"
regional="https://s3.${AWS_REGION}.amazonaws.com/amazon-ssm-${AWS_REGION}/${path}"
global="https://s3.amazonaws.com/ec2-downloads-windows/SSMAgent/${path}"
package="${work}/amazon-ssm-agent.deb"
fetch_first "${package}" "${regional}" "${global}"
fetch_first "${package}.sig" "${regional}.sig" "${global}.sig"
verify_signature "${package}" "${package}.sig" "${KEY_FILE}"

# Step 3. AWS's packages are versioned <version>-1.
name="$(dpkg-deb --field "${package}" Package)"
version="$(dpkg-deb --field "${package}" Version)"
[[ "${name}" == amazon-ssm-agent ]] || die "the signed package is ${name}, not amazon-ssm-agent"
[[ "${version%-*}" == "${agent_version}" ]] ||
  die "the signed package is amazon-ssm-agent ${version}, versions.toml pins ${agent_version}"
dpkg --install "${package}"
installed="$(dpkg-query --show --showformat='${Version}' amazon-ssm-agent)"
[[ "${installed%-*}" == "${agent_version}" ]] ||
  die "installed amazon-ssm-agent ${installed}, expected ${agent_version}"

# Step 4. The package's own scripts enable and start it.
systemctl stop "${UNIT}"
systemctl enable "${UNIT}" >/dev/null 2>&1
[[ "$(systemctl is-enabled "${UNIT}")" == enabled ]] || die "${UNIT} is not enabled"
log "SSM Agent ${installed} installed, signature verified, ${UNIT} enabled (started at boot)"
