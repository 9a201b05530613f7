#!/usr/bin/env bash
set -euo pipefail
# Check, from inside the build instance, that the instance metadata service
# answers only with IMDSv2 session tokens: a tokenless (IMDSv1) request must be
# refused with 401 and a token request must work. Fails the build otherwise.

readonly IMDS="http://169.254.169.254"

v1_status="$(curl --silent --output /dev/null --write-out '%{http_code}' \
  --max-time 5 "${IMDS}/latest/meta-data/instance-id" || true)"
if [[ "${v1_status}" != "401" ]]; then
  echo "imdsv2-check: a request without a session token got HTTP ${v1_status}; IMDSv1 must be off" >&2
  exit 1
fi

token="$(curl --silent --fail --max-time 5 --request PUT \
  --header 'X-aws-ec2-metadata-token-ttl-seconds: 60' "${IMDS}/latest/api/token")"
instance_id="$(curl --silent --fail --max-time 5 \
  --header "X-aws-ec2-metadata-token: ${token}" "${IMDS}/latest/meta-data/instance-id")"
echo "imdsv2-check: ${instance_id} answers IMDSv2 only"
