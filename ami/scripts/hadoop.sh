#!/usr/bin/env bash
set -euo pipefail
# Apache Hadoop (for HDFS: NameNode on the driver, DataNodes on the workers)
# from Apache's distribution, verified against the .sha512 and the detached
# OpenPGP signature Apache publishes for that exact release, with the keys
# from Hadoop's KEYS file. Installed at /opt/hadoop-<version>, linked from
# /opt/hadoop; its default configuration is copied to /etc/hadoop, where
# node-bootstrap writes core-site.xml and hdfs-site.xml.

SCRIPT_NAME="hadoop"
: "${TABLECAST_BUILD_DIR:?TABLECAST_BUILD_DIR must be set}"
: "${VERSIONS_FILE:?VERSIONS_FILE must be set}"
# shellcheck source=lib/common.sh
source "${TABLECAST_BUILD_DIR}/lib/common.sh"
require_file "${VERSIONS_FILE}"

# The tarball may come from Apache's CDN; checksums, signatures and KEYS come
# from Apache's own servers (downloads.apache.org, or the archive for releases
# no longer current), never from a mirror.
readonly APACHE_CDN="${APACHE_CDN:-https://dlcdn.apache.org}"
readonly APACHE_DOWNLOADS="https://downloads.apache.org"
readonly APACHE_ARCHIVE="https://archive.apache.org/dist"

hadoop_version="$(version_of hadoop version)"
tarball="hadoop-${hadoop_version}.tar.gz"
release_path="hadoop/common/hadoop-${hadoop_version}/${tarball}"

work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

fetch_first "${work}/${tarball}" \
  "${APACHE_CDN}/${release_path}" "${APACHE_ARCHIVE}/${release_path}"
fetch_first "${work}/${tarball}.sha512" \
  "${APACHE_DOWNLOADS}/${release_path}.sha512" "${APACHE_ARCHIVE}/${release_path}.sha512"
fetch_first "${work}/${tarball}.asc" \
  "${APACHE_DOWNLOADS}/${release_path}.asc" "${APACHE_ARCHIVE}/${release_path}.asc"
fetch_first "${work}/KEYS" \
  "${APACHE_DOWNLOADS}/hadoop/common/KEYS" "${APACHE_ARCHIVE}/hadoop/common/KEYS"

verify_digest "${work}/${tarball}" "${work}/${tarball}.sha512" sha512
verify_signature "${work}/${tarball}" "${work}/${tarball}.asc" "${work}/KEYS"

tar -xzf "${work}/${tarball}" -C /opt --no-same-owner
rm -rf "/opt/hadoop-${hadoop_version}/share/doc"
ln -sfn "/opt/hadoop-${hadoop_version}" /opt/hadoop

# The defaults (log4j.properties, hadoop-env.sh, ...) as the base of
# /etc/hadoop; node-bootstrap adds the node's own site files.
cp -a /opt/hadoop/etc/hadoop/. /etc/hadoop/

java_home="$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")"
installed="$(JAVA_HOME="${java_home}" /opt/hadoop/bin/hadoop version | head -n 1)"
expect_equal "Hadoop" "Hadoop ${hadoop_version}" "${installed}"
