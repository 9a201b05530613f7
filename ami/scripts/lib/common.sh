#!/usr/bin/env bash
set -euo pipefail
# Shared functions of the provisioning scripts, sourced (not run) by them:
# logging, input checks, reading versions.toml, and downloads verified
# against the publisher's own checksum (and signature) files.
#
# Nothing here knows a checksum in advance: every expected digest is fetched
# from the publisher at build time, next to the artifact, and any mismatch
# stops the build.

log() {
  printf '[%s] %s\n' "${SCRIPT_NAME:-tablecast-ami}" "$*" >&2
}

die() {
  log "ERROR: $*"
  exit 1
}

# require_env NAME...: fail unless every named variable is set and non-empty.
require_env() {
  local name missing=()
  for name in "$@"; do
    if [[ -z "${!name:-}" ]]; then
      missing+=("${name}")
    fi
  done
  if ((${#missing[@]} > 0)); then
    die "required environment variables are not set: ${missing[*]}"
  fi
}

# require_file PATH...: fail unless every path is a readable regular file.
require_file() {
  local path
  for path in "$@"; do
    [[ -f "${path}" && -r "${path}" ]] || die "required file is missing: ${path}"
  done
}

# version_of TABLE KEY: print a string pin from ${VERSIONS_FILE}.
version_of() {
  local table="$1" key="$2"
  python3 - "${VERSIONS_FILE}" "${table}" "${key}" <<'PY'
import sys
import tomllib

path, table, key = sys.argv[1:4]
with open(path, "rb") as handle:
    data = tomllib.load(handle)
value = data.get(table, {}).get(key)
if not isinstance(value, str) or not value:
    sys.exit(f"versions.toml has no string [{table}] {key}")
print(value)
PY
}

# fetch URL DEST: HTTPS only, fail on HTTP errors, retry transient failures.
fetch() {
  local url="$1" dest="$2"
  log "downloading ${url}"
  curl --fail --silent --show-error --location \
    --proto '=https' --tlsv1.2 \
    --retry 5 --retry-delay 5 --retry-connrefused \
    --connect-timeout 20 \
    --output "${dest}" "${url}"
}

# fetch_first DEST URL...: the first URL that answers wins.
fetch_first() {
  local dest="$1" url
  shift
  for url in "$@"; do
    if fetch "${url}" "${dest}"; then
      return 0
    fi
    log "not available: ${url}"
  done
  die "none of these could be downloaded: $*"
}

# expected_digest CHECKSUM_FILE ALGORITHM: print the lower-case hex digest a
# publisher's checksum file declares. Understands "<hex>", "<hex>  <name>",
# "SHA512 (<name>) = <hex>" and GnuPG's "<name>: AB12 CD34 ..." layouts.
expected_digest() {
  local checksum_file="$1" algorithm="$2"
  python3 - "${checksum_file}" "${algorithm}" <<'PY'
import re
import sys

path, algorithm = sys.argv[1:3]
lengths = {"sha1": 40, "sha256": 64, "sha512": 128}
text = open(path, encoding="utf-8", errors="replace").read().strip()
if "=" in text:
    candidate = text.rsplit("=", 1)[1]
elif ":" in text:
    candidate = text.split(":", 1)[1]
else:
    candidate = text.split()[0] if text.split() else ""
digest = "".join(candidate.split()).lower()
if len(digest) != lengths[algorithm] or not re.fullmatch(r"[0-9a-f]+", digest):
    sys.exit(f"{path}: no {algorithm} digest found in the publisher's checksum file")
print(digest)
PY
}

# verify_digest FILE CHECKSUM_FILE ALGORITHM: compare the file's digest with
# the publisher's; stop the build on any difference.
verify_digest() {
  local file="$1" checksum_file="$2" algorithm="$3" expected actual
  expected="$(expected_digest "${checksum_file}" "${algorithm}")"
  actual="$("${algorithm}sum" "${file}" | cut -d ' ' -f 1)"
  if [[ "${actual}" != "${expected}" ]]; then
    die "${algorithm} mismatch for ${file}: publisher says ${expected}, file has ${actual}"
  fi
  log "${algorithm} verified: $(basename "${file}")"
}

# verify_signature FILE SIGNATURE KEYS: check a detached OpenPGP signature
# with only the keys in KEYS (a project's published KEYS file), in a
# throw-away keyring.
verify_signature() {
  local file="$1" signature="$2" keys="$3" gnupg_home status
  gnupg_home="$(mktemp -d)"
  gpg --homedir "${gnupg_home}" --batch --quiet --import "${keys}" 2>/dev/null ||
    die "could not import keys from ${keys}"
  status="$(gpg --homedir "${gnupg_home}" --batch --status-fd 1 \
    --verify "${signature}" "${file}" 2>/dev/null || true)"
  rm -rf "${gnupg_home}"
  if ! grep -q '^\[GNUPG:\] VALIDSIG ' <<<"${status}"; then
    die "signature check failed for ${file} (signature ${signature})"
  fi
  log "signature verified: $(basename "${file}")"
}

readonly MAVEN_CENTRAL="https://repo1.maven.org/maven2"

# maven_url GROUP ARTIFACT VERSION EXTENSION [CLASSIFIER]
maven_url() {
  local group="$1" artifact="$2" version="$3" extension="$4" classifier="${5:-}"
  local suffix=""
  [[ -n "${classifier}" ]] && suffix="-${classifier}"
  printf '%s/%s/%s/%s/%s-%s%s.%s\n' "${MAVEN_CENTRAL}" "${group//.//}" \
    "${artifact}" "${version}" "${artifact}" "${version}" "${suffix}" "${extension}"
}

# maven_fetch_verified DEST_DIR GROUP ARTIFACT VERSION EXTENSION [CLASSIFIER]:
# download one Maven Central file and check it against the .sha512 published
# next to it, or the .sha1 where Central has no .sha512. Prints the path.
maven_fetch_verified() {
  local dest_dir="$1" group="$2" artifact="$3" version="$4" extension="$5"
  local classifier="${6:-}" url file
  url="$(maven_url "${group}" "${artifact}" "${version}" "${extension}" "${classifier}")"
  file="${dest_dir}/$(basename "${url}")"
  fetch "${url}" "${file}"
  if fetch "${url}.sha512" "${file}.sha512"; then
    verify_digest "${file}" "${file}.sha512" sha512
  else
    log "no .sha512 published for $(basename "${url}"); using the .sha1"
    fetch "${url}.sha1" "${file}.sha1" || die "no checksum published for ${url}"
    verify_digest "${file}" "${file}.sha1" sha1
  fi
  printf '%s\n' "${file}"
}

# pom_dependency_version POM PARENT_POM GROUP ARTIFACT: the version a
# published POM declares for one dependency, with ${properties} resolved from
# the POM and its parent, and managed versions taken from the parent's
# dependencyManagement. Prints nothing when the POM has no such dependency.
pom_dependency_version() {
  local pom="$1" parent_pom="$2" group="$3" artifact="$4"
  python3 - "${pom}" "${parent_pom}" "${group}" "${artifact}" <<'PY'
import re
import sys
import xml.etree.ElementTree as ET

pom_path, parent_path, group, artifact = sys.argv[1:5]
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def load(path):
    return ET.parse(path).getroot()


def properties(root):
    found = {}
    props = root.find("m:properties", NS)
    if props is not None:
        for child in props:
            found[child.tag.split("}", 1)[1]] = (child.text or "").strip()
    version = root.findtext("m:version", default="", namespaces=NS).strip()
    if not version:
        version = root.findtext("m:parent/m:version", default="", namespaces=NS).strip()
    found.setdefault("project.version", version)
    return found


def declared(root, path):
    for dep in root.findall(path, NS):
        if (dep.findtext("m:groupId", default="", namespaces=NS).strip() == group
                and dep.findtext("m:artifactId", default="", namespaces=NS).strip() == artifact):
            return dep.findtext("m:version", default="", namespaces=NS).strip()
    return None


pom = load(pom_path)
parent = load(parent_path)
props = {**properties(parent), **properties(pom)}
version = declared(pom, "m:dependencies/m:dependency")
if version is None:
    sys.exit(0)
if not version:
    version = declared(parent, "m:dependencyManagement/m:dependencies/m:dependency") or ""
for _ in range(10):
    resolved = re.sub(r"\$\{([^}]+)\}", lambda m: props.get(m.group(1), m.group(0)), version)
    if resolved == version:
        break
    version = resolved
print(version)
PY
}

# pom_property POM NAME: a <properties> value of a published POM.
pom_property() {
  local pom="$1" name="$2"
  python3 - "${pom}" "${name}" <<'PY'
import sys
import xml.etree.ElementTree as ET

pom_path, name = sys.argv[1:3]
ns = {"m": "http://maven.apache.org/POM/4.0.0"}
value = ET.parse(pom_path).getroot().findtext(f"m:properties/m:{name}", default="", namespaces=ns)
print(value.strip())
PY
}

# expect_equal WHAT EXPECTED ACTUAL: the agreement check used everywhere.
expect_equal() {
  local what="$1" expected="$2" actual="$3"
  if [[ "${expected}" != "${actual}" ]]; then
    die "${what}: versions.toml pins '${expected}' but found '${actual}'"
  fi
  log "${what}: ${actual} (as pinned)"
}
