#!/usr/bin/env bash
set -euo pipefail
# The node's own files, installed from ami/files into an image root: sourced
# by scripts/node-files.sh (root "/" on the build instance) and by what must
# hold exactly what the image holds (tests/ami stage it into a directory; the
# local pipeline, app/local, runs its services from such a staged root).
# Downloads nothing and runs nothing of the image; as root it also sets the
# owner, otherwise the files belong to the caller.

readonly NODE_UNITS=(spark-master spark-worker hdfs-namenode hdfs-secondarynamenode hdfs-datanode
  tablecast-job tablecast-job@ tablecast-archiver)
readonly NODE_TEMPLATES=(core-site.xml hdfs-site.xml spark-defaults.conf cloudwatch-agent.json)

# install_node_files FILES ROOT: ami/files (FILES) into the image root ROOT.
# Every program of files/bin is installed, not a list of them: what the units,
# the bootstrap's timers and the programs themselves run cannot be left out.
install_node_files() {
  local files="$1" root="${2%/}" program template unit
  local owner=() programs=()
  [[ "$(id -u)" == 0 ]] && owner=(-o root -g root)
  for unit in "${NODE_UNITS[@]}" tablecast-bootstrap; do require_file "${files}/systemd/${unit}.service"; done
  for program in "${files}"/bin/*; do
    [[ -f "${program}" ]] && programs+=("${program}")
  done
  ((${#programs[@]} > 0)) || die "no programs in ${files}/bin"
  for template in "${NODE_TEMPLATES[@]}"; do require_file "${files}/templates/${template}.tmpl"; done
  require_file "${files}/rsyslog/30-tablecast.conf" "${files}/journald/10-tablecast.conf" \
    "${files}/logrotate/tablecast" "${files}/aws/archiver.config"

  install -d -m 0755 "${owner[@]}" "${root}/opt/tablecast/bin" "${root}/opt/tablecast/templates" \
    "${root}/etc/systemd/system" "${root}/etc/rsyslog.d" "${root}/etc/systemd/journald.conf.d" \
    "${root}/etc/logrotate.d" "${root}/etc/tablecast"
  install -m 0755 "${owner[@]}" "${programs[@]}" "${root}/opt/tablecast/bin/"
  for template in "${NODE_TEMPLATES[@]}"; do
    install -m 0644 "${owner[@]}" "${files}/templates/${template}.tmpl" "${root}/opt/tablecast/templates/"
  done
  for unit in "${NODE_UNITS[@]}" tablecast-bootstrap; do
    install -m 0644 "${owner[@]}" "${files}/systemd/${unit}.service" "${root}/etc/systemd/system/"
  done
  install -m 0644 "${owner[@]}" "${files}/rsyslog/30-tablecast.conf" "${root}/etc/rsyslog.d/"
  install -m 0644 "${owner[@]}" "${files}/journald/10-tablecast.conf" "${root}/etc/systemd/journald.conf.d/"
  install -m 0644 "${owner[@]}" "${files}/logrotate/tablecast" "${root}/etc/logrotate.d/"
  install -m 0644 "${owner[@]}" "${files}/aws/archiver.config" "${root}/etc/tablecast/archiver-aws.config"
  # Spark's Python daemon with the workers' libraries imported; the venv finds
  # it through python-env.sh's .pth, and run-job names it when it is here.
  require_file "${files}/python/tablecast_preload/__init__.py" "${files}/python/tablecast_preload/__main__.py"
  install -d -m 0755 "${owner[@]}" "${root}/opt/tablecast/python/tablecast_preload"
  install -m 0644 "${owner[@]}" "${files}"/python/tablecast_preload/*.py "${root}/opt/tablecast/python/tablecast_preload/"
}
