#!/usr/bin/env bash
set -euo pipefail
# Runs on the build host (Packer shell-local post-processor, after the
# manifest): register the image just built as IMDSv2-only (ImdsSupport=v2.0),
# so every instance launched from it requires session tokens by default, then
# read the attribute back. Packer 1.6.6 has no `imds_support`, hence the CLI.
# EC2 does not allow undoing v2.0 on an image, which is what we want.

: "${AWS_REGION:?AWS_REGION must be set (the build region)}"
: "${MANIFEST_FILE:?MANIFEST_FILE must be set (the manifest post-processor output)}"

for tool in aws python3; do
  command -v "${tool}" >/dev/null 2>&1 || {
    echo "require-imdsv2-image: ${tool} is needed on the build host" >&2
    exit 1
  }
done
[[ -f "${MANIFEST_FILE}" ]] || {
  echo "require-imdsv2-image: no manifest at ${MANIFEST_FILE}" >&2
  exit 1
}

# The artifact of this run: "region:ami-id[,region:ami-id...]".
image_ids="$(python3 - "${MANIFEST_FILE}" <<'PY'
import json
import sys

manifest = json.load(open(sys.argv[1], encoding="utf-8"))
run = manifest["last_run_uuid"]
builds = [b for b in manifest["builds"] if b.get("packer_run_uuid") == run]
if not builds:
    sys.exit("the manifest has no build of the last run")
for entry in builds[-1]["artifact_id"].split(","):
    region, image_id = entry.split(":", 1)
    print(f"{region} {image_id}")
PY
)"

while read -r region image_id; do
  [[ -n "${image_id}" ]] || continue
  aws ec2 modify-image-attribute --region "${region}" \
    --image-id "${image_id}" --imds-support '{"Value": "v2.0"}'
  support="$(aws ec2 describe-images --region "${region}" --image-ids "${image_id}" \
    --query 'Images[0].ImdsSupport' --output text)"
  if [[ "${support}" != "v2.0" ]]; then
    echo "require-imdsv2-image: ${image_id} reports ImdsSupport=${support}, expected v2.0" >&2
    exit 1
  fi
  echo "require-imdsv2-image: ${region} ${image_id} is IMDSv2-only"
done <<<"${image_ids}"
