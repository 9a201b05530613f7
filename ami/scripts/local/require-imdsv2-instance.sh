#!/usr/bin/env bash
set -euo pipefail
# Runs on the build host (Packer shell-local provisioner), first thing after
# the build instance answers SSH: require IMDSv2 session tokens on it, with
# one hop, before any provisioning script runs there. Packer 1.6.6 has no
# `metadata_options`, hence the AWS CLI (see ../../sources.pkr.hcl).

: "${AWS_REGION:?AWS_REGION must be set (the build region)}"
: "${INSTANCE_ID:?INSTANCE_ID must be set (the build instance, from build.ID)}"

command -v aws >/dev/null 2>&1 || {
  echo "require-imdsv2-instance: the AWS CLI (aws) is needed on the build host" >&2
  exit 1
}

aws ec2 modify-instance-metadata-options \
  --region "${AWS_REGION}" \
  --instance-id "${INSTANCE_ID}" \
  --http-tokens required \
  --http-endpoint enabled \
  --http-put-response-hop-limit 1 >/dev/null

# The change is asynchronous: wait until EC2 reports it applied.
for _ in $(seq 1 30); do
  state="$(aws ec2 describe-instances --region "${AWS_REGION}" \
    --instance-ids "${INSTANCE_ID}" \
    --query 'Reservations[0].Instances[0].MetadataOptions.[State,HttpTokens]' \
    --output text)"
  if [[ "${state}" == $'applied\trequired' ]]; then
    echo "require-imdsv2-instance: ${INSTANCE_ID} requires IMDSv2 tokens"
    exit 0
  fi
  sleep 2
done
echo "require-imdsv2-instance: ${INSTANCE_ID} did not apply HttpTokens=required (last state: ${state})" >&2
exit 1
