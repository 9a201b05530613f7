"""The node's own files: systemd units, the job's entry point and its SSM
contract with app/handoff.py, the configuration templates, the log path to
CloudWatch, and node-bootstrap's checks.
"""

from __future__ import annotations

import json
import re
import string
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from app import handoff
from tests.ami.helpers import FILES, NODE_BOOTSTRAP, bash, shell_env
from tests.ami.node_harness import NODE_SETTINGS, TEMPLATES, render, unit, write_node_env

BIN = FILES / "bin"
RUN_JOB = BIN / "run-job"


def run_job_parameters(array: str = "PARAMETERS") -> list[str]:
    text = RUN_JOB.read_text(encoding="utf-8")
    block = re.search(rf"readonly {array}=\((.*?)\)", text, re.S)
    assert block is not None
    return block.group(1).split()


@pytest.mark.parametrize(
    "name",
    [
        "spark-master",
        "spark-worker",
        "hdfs-namenode",
        "hdfs-datanode",
        "hdfs-secondarynamenode",
        "tablecast-job",
        "tablecast-archiver",
    ],
)
def test_unit_runs_in_the_foreground_with_restart_and_its_identifier(name: str) -> None:
    entries = unit(name)
    assert entries["Restart"] == ["on-failure"]
    assert entries["SyslogIdentifier"] == [name]
    assert "/etc/tablecast/image.env" in entries["EnvironmentFile"]
    assert "/etc/tablecast/node.env" in entries["EnvironmentFile"]
    assert entries["WantedBy"] == ["multi-user.target"]
    assert entries.get("Type", ["simple"]) == ["simple"]


def test_spark_daemons_use_the_driver_address() -> None:
    master = unit("spark-master")["ExecStart"][0]
    assert "org.apache.spark.deploy.master.Master" in master
    assert "--host ${TABLECAST_DRIVER_HOST} --port 7077" in master
    worker = unit("spark-worker")["ExecStart"][0]
    assert "org.apache.spark.deploy.worker.Worker" in worker
    assert worker.endswith("spark://${TABLECAST_DRIVER_HOST}:7077")
    for name in ("spark-master", "spark-worker"):
        assert unit(name)["User"] == ["spark"]


def test_namenode_is_formatted_once_before_it_starts() -> None:
    entries = unit("hdfs-namenode")
    assert entries["ExecStartPre"] == ["/opt/tablecast/bin/hdfs-format-once"]
    assert entries["ExecStart"] == ["/opt/hadoop/bin/hdfs namenode"]
    assert entries["User"] == ["hdfs"]
    script = (BIN / "hdfs-format-once").read_text(encoding="utf-8")
    assert "-nonInteractive" in script, "never format over existing data"
    marker = script.index('if [[ -f "${MARKER}" ]]')
    assert marker < script.index("namenode -format"), "the marker is checked before formatting"
    assert "current/VERSION" in script


def test_job_service_runs_run_job_and_restarts_on_failure() -> None:
    entries = unit("tablecast-job")
    assert entries["ExecStart"] == ["/opt/tablecast/bin/run-job"]
    assert entries["StartLimitIntervalSec"] == ["0"], "keep restarting, never give up"
    assert "spark-master.service" in entries["After"][0]
    assert "hdfs-namenode.service" in entries["After"][0]


def test_a_declared_jobs_service_is_the_job_service_running_run_job_with_its_name() -> None:
    template = unit("tablecast-job@")
    assert template["ExecStart"] == ["/opt/tablecast/bin/run-job %i"]
    assert handoff.job_unit("lab") == "tablecast-job@lab.service"
    # Everything else as the environment's one job's service: restarts, order; its logs
    # by an identifier of its own (its file and log group: test_ami_node_jobs.py).
    one = unit("tablecast-job")
    for key in ("After", "Wants", "Restart", "StartLimitIntervalSec"):
        assert template[key] == one[key], key
    assert template["SyslogIdentifier"] == ["tablecast-job-%i"]
    assert sorted(template) == sorted(one)


def test_run_job_reads_exactly_a_declared_jobs_handoff_names() -> None:
    assert run_job_parameters("JOB_PARAMETERS") == list(handoff.JOB_ALL)
    assert run_job_parameters("JOB_OPTIONAL_PARAMETERS") == list(handoff.JOB_OPTIONAL)


def test_run_job_reads_exactly_handoff_names() -> None:
    parameters = run_job_parameters()
    unknown = set(parameters) - set(handoff.ALL)
    assert not unknown, f"run-job reads SSM names app/handoff.py does not define: {unknown}"
    required = {
        handoff.BOOTSTRAP_BROKERS_IAM,
        handoff.OUTPUT_URI,
        handoff.ARCHIVE_URI,
        handoff.CHECKPOINT_URI,
        handoff.TOPIC_PATTERN,
        handoff.TRIGGER,
        handoff.METRIC_NAMESPACE,
        handoff.JOB_VERSION,
        handoff.ARTIFACTS_URI,
        handoff.REGION,
    }
    assert required <= set(parameters)
    assert f'"{handoff.PREFIX}/${{TABLECAST_ENV}}/"' in RUN_JOB.read_text(encoding="utf-8")


def test_run_job_reads_every_optional_handoff_name() -> None:
    # An optional parameter infra writes but run-job does not read would be lost silently.
    optional = run_job_parameters("OPTIONAL_PARAMETERS")
    assert sorted(optional) == sorted(handoff.OPTIONAL)
    assert not set(optional) & set(handoff.ALL)


def test_run_job_submits_the_cli_in_client_mode() -> None:
    text = RUN_JOB.read_text(encoding="utf-8").replace("\\\n", " ")
    command = " ".join(text[text.index('exec "${as_service_user[@]}"') :].split())
    for part in (
        '--master "spark://${TABLECAST_DRIVER_HOST}:${MASTER_PORT}"',
        "--deploy-mode client",
        '--py-files "${py_files}"',
        '"${DRIVER_PY}" run',
        '--bootstrap-servers "${brokers}"',  # the IAM brokers unless kafka-auth says
        '--archive "${setting[archive-uri]}"',  # a catch-up past Kafka's retention
        '--kafka-auth "${KAFKA_AUTH}"',
        '--kafka-client-rack "${TABLECAST_ZONE_ID}"',
        '--output "${setting[output-uri]}"',
        '--checkpoint "${setting[checkpoint-uri]}"',
        '"${topics[@]}"',  # --topic-pattern, or the environment's --topics
        '--trigger "${setting[trigger]}"',
        "--metrics cloudwatch",
        '--environment "${TABLECAST_ENV}"',
    ):
        assert part in command, part
    assert "setpriv --reuid=" in " ".join(text.split()), "spark-submit must not run as root"
    # On a node none of the overrides is set: the image's own values.
    for default in (
        "TABLECAST_VENV:-/opt/tablecast/venv",
        "TABLECAST_RUN_AS_USER:-spark",
        "TABLECAST_SPARK_MASTER_PORT:-7077",
        "setting[kafka-auth]:-iam",
        "TABLECAST_DRIVER_PY:-/opt/tablecast/bin/tablecast-driver.py",
    ):
        assert default in text, default


def test_run_job_installs_the_recorded_wheel_without_dependencies() -> None:
    text = RUN_JOB.read_text(encoding="utf-8").replace("\\\n", " ")
    assert 'wheel_name="tablecast-${version}-py3-none-any.whl"' in text
    install = " ".join(text[text.index("-m pip install") :].split("\n")[0].split())
    for flag in ("--no-deps", "--no-index"):
        assert flag in install


def placeholders(template: Path) -> set[str]:
    pattern = string.Template.pattern
    found = set()
    for match in pattern.finditer(template.read_text(encoding="utf-8")):
        name = match.group("named") or match.group("braced")
        if name:
            found.add(name)
    return found


@pytest.mark.parametrize("template", sorted(TEMPLATES.glob("*.tmpl")), ids=lambda p: p.name)
def test_template_needs_only_what_node_bootstrap_provides(template: Path) -> None:
    assert placeholders(template) <= set(NODE_SETTINGS), placeholders(template)


def xml_properties(name: str) -> dict[str, str]:
    root = ET.fromstring(render(name))
    return {prop.findtext("name", ""): prop.findtext("value", "") for prop in root.iter("property")}


def test_core_site_points_at_the_namenode_and_s3a_with_the_instance_profile() -> None:
    props = xml_properties("core-site.xml")
    assert props["fs.defaultFS"] == "hdfs://10.0.1.23:8020"
    assert props["fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert props["fs.s3a.aws.credentials.provider"] == (
        "org.apache.hadoop.fs.s3a.auth.IAMInstanceCredentialsProvider"
    )
    assert props["fs.s3a.endpoint.region"] == "eu-west-1"


def test_hdfs_site_keeps_data_on_the_data_volume_and_the_namespace_twice() -> None:
    props = xml_properties("hdfs-site.xml")
    # The data volume and the root volume: two EBS volumes.
    assert props["dfs.namenode.name.dir"] == (
        "file:///data/hdfs/namenode,file:///var/lib/hadoop/namenode-copy"
    )
    assert props["dfs.namenode.name.dir.restore"] == "true"
    assert props["dfs.datanode.data.dir"] == "file:///data/hdfs/datanode"
    assert props["dfs.replication"] == "2"


def test_the_secondary_namenode_checkpoints_the_edit_log_on_the_driver() -> None:
    """Edits merge into a new image at least hourly, not only at the NameNode's start."""
    props = xml_properties("hdfs-site.xml")
    assert props["dfs.namenode.checkpoint.dir"] == "file:///data/hdfs/namesecondary"
    assert int(props["dfs.namenode.checkpoint.period"]) <= 3600
    assert int(props["dfs.namenode.checkpoint.txns"]) == 100000
    assert props["dfs.namenode.http-address"] == "10.0.1.23:9870"
    entries = unit("hdfs-secondarynamenode")
    assert entries["ExecStart"] == ["/opt/hadoop/bin/hdfs secondarynamenode"]
    assert entries["User"] == ["hdfs"]
    assert "hdfs-namenode.service" in entries["Requires"][0]
    text = " ".join(NODE_BOOTSTRAP.read_text(encoding="utf-8").split())
    assert "hdfs-namenode.service hdfs-secondarynamenode.service spark-master.service" in text


def test_spark_defaults_point_at_the_master_and_the_venv() -> None:
    lines = dict(
        line.split(None, 1)
        for line in render("spark-defaults.conf").splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert lines["spark.master"] == "spark://10.0.1.23:7077"
    assert lines["spark.submit.deployMode"] == "client"
    assert lines["spark.pyspark.python"] == "/opt/tablecast/venv/bin/python"
    assert "spark.jars.packages" not in lines, "nothing is resolved at run time"
    # A running application's executor logs are never cleaned up: they roll, bounded.
    assert lines["spark.executor.logs.rolling.strategy"].strip() == "size"
    assert int(lines["spark.executor.logs.rolling.maxSize"]) <= 256 * 1024 * 1024
    assert int(lines["spark.executor.logs.rolling.maxRetainedFiles"]) <= 10


def test_logs_flow_from_units_to_cloudwatch_log_groups() -> None:
    config = json.loads(render("cloudwatch-agent.json"))
    collected = config["logs"]["logs_collected"]["files"]["collect_list"]
    shipped = {entry["file_path"]: entry["log_group_name"] for entry in collected}
    assert shipped == {
        f"/var/log/tablecast/{stream}.log": f"/tablecast/prod/{stream}"
        for stream in ("job", "spark", "hdfs", "bootstrap")
    }
    rules = (FILES / "rsyslog" / "30-tablecast.conf").read_text(encoding="utf-8")
    written = set(re.findall(r'file="([^"]+)"', rules))
    assert written == set(shipped), "rsyslog writes exactly the files the agent ships"
    for name, stream in (
        ("tablecast-job", "job"),
        ("tablecast-archiver", "job"),
        ("spark-master", "spark"),
        ("spark-worker", "spark"),
        ("hdfs-namenode", "hdfs"),
        ("hdfs-datanode", "hdfs"),
        ("hdfs-secondarynamenode", "hdfs"),
    ):
        identifier = unit(name)["SyslogIdentifier"][0]
        matched = f"({re.escape(identifier)}|{identifier.split('-')[0]}-)"
        rule = re.search(
            rf"\$programname (==|startswith) '{matched}'"
            rf" then \{{\s*action\(type=\"omfile\" file=\"/var/log/tablecast/{stream}\.log\"",
            rules,
        )
        assert rule is not None, f"{name} does not reach {stream}.log"
    journald = (FILES / "journald" / "10-tablecast.conf").read_text(encoding="utf-8")
    assert "ForwardToSyslog=yes" in journald


def test_node_bootstrap_accepts_the_agreed_settings(tmp_path: Path) -> None:
    env = write_node_env(tmp_path)
    result = bash(
        f'source "{NODE_BOOTSTRAP}"\nload_settings\necho "$TABLECAST_HDFS_REPLICATION"', env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
    assert "role driver, driver 10.0.1.23" in result.stderr


@pytest.mark.parametrize(
    ("setting", "value", "complaint"),
    [
        ("TABLECAST_ROLE", "master", "expected driver or worker"),
        ("TABLECAST_DRIVER_HOST", "driver.internal", "not an IPv4 address"),
        ("TABLECAST_ENV", "Prod env", "not a lower-case name"),
        ("AWS_REGION", "europe", "not a region name"),
        ("TABLECAST_HDFS_DEVICE", "sdf", "not a device path"),
        ("TABLECAST_ZONE_ID", "eu-west-1a", "not an availability zone id"),
        ("TABLECAST_ZONE_ID", "", "does not set: TABLECAST_ZONE_ID"),
        ("TABLECAST_HDFS_REPLICATION", "5", "is not 1, 2 or 3"),
        ("TABLECAST_ENV", "", "does not set: TABLECAST_ENV"),
    ],
)
def test_node_bootstrap_refuses_bad_settings(
    setting: str, value: str, complaint: str, tmp_path: Path
) -> None:
    env = write_node_env(tmp_path, **{setting: value})
    result = bash(f'source "{NODE_BOOTSTRAP}"\nload_settings', env)
    assert result.returncode == 1
    assert complaint in result.stderr


@pytest.mark.parametrize("reported", ["sdf", "/dev/sdf", "xvdf"])
def test_node_bootstrap_reads_the_ebs_device_name_from_nvme(reported: str, tmp_path: Path) -> None:
    """EBS puts the mapping name in bytes 3072.. of the NVMe controller data."""
    env = shell_env(tmp_path)
    stub = Path(env["PATH"].split(":", 1)[0]) / "nvme"
    stub.write_text(
        "#!/usr/bin/env python3\n"
        "import sys\n"
        "data = bytearray(4096)\n"
        f"name = {reported.encode()!r}\n"
        "data[3072:3072 + len(name)] = name\n"
        "data[3072 + len(name):3104] = b' ' * (32 - len(name))\n"
        "sys.stdout.buffer.write(bytes(data))\n",
        encoding="utf-8",
    )
    stub.chmod(0o755)
    result = bash(f'source "{NODE_BOOTSTRAP}"\nnvme_block_device_name /dev/nvme1n1', env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == reported.removeprefix("/dev/")


def test_node_bootstrap_starts_only_the_roles_units() -> None:
    text = NODE_BOOTSTRAP.read_text(encoding="utf-8")
    # The driver's units, run for real: tests/ami/test_ami_node_jobs.py.
    assert "units=(hdfs-datanode.service spark-worker.service)" in text
    assert "meta-data/local-ipv4" in text and "X-aws-ec2-metadata-token" in text
    assert re.search(r"status == 2\)\); then\s+log .*blank", text), "format only blank volumes"


def test_node_bootstrap_reads_node_env_without_running_it(tmp_path: Path) -> None:
    """node.env is data: a line that would run a command is refused, not run."""
    env = write_node_env(tmp_path)
    node_env = Path(env["TABLECAST_NODE_ENV_FILE"])
    marker = tmp_path / "ran"
    node_env.write_text(
        node_env.read_text(encoding="utf-8") + f"touch {marker}\n", encoding="utf-8"
    )
    result = bash(f'source "{NODE_BOOTSTRAP}"\nload_settings', env)
    assert result.returncode == 1
    assert "not a KEY=VALUE line" in result.stderr
    assert not marker.exists()


def test_node_bootstrap_accepts_quoted_values(tmp_path: Path) -> None:
    env = write_node_env(tmp_path, TABLECAST_ENV='"staging"', AWS_REGION="'us-east-1'")
    result = bash(
        f'source "{NODE_BOOTSTRAP}"\nload_settings\necho "$TABLECAST_ENV $AWS_REGION"', env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "staging us-east-1"


def test_render_template_fills_every_placeholder_or_fails(tmp_path: Path) -> None:
    env = shell_env(tmp_path) | NODE_SETTINGS | {"TABLECAST_TEMPLATES_DIR": str(TEMPLATES)}
    dest = tmp_path / "core-site.xml"
    result = bash(f'source "{NODE_BOOTSTRAP}"\nrender_template core-site.xml "{dest}"', env)
    assert result.returncode == 0, result.stderr
    assert "hdfs://10.0.1.23:8020" in dest.read_text(encoding="utf-8")
    del env["AWS_REGION"]
    dest.unlink()
    result = bash(f'source "{NODE_BOOTSTRAP}"\nrender_template core-site.xml "{dest}"', env)
    assert result.returncode == 1
    assert "no value for ${AWS_REGION}" in result.stderr
    assert not dest.exists(), "a half-filled file must never replace the old one"
    assert not list(tmp_path.glob("core-site.xml.*")), "no temporary file is left behind"


def test_the_image_installs_no_kafka_jar_and_checks_the_python_client() -> None:
    """Kafka is read in Python: no connector jar, the client library in the venv."""
    jars = (FILES.parent / "scripts" / "spark-jars.sh").read_text(encoding="utf-8")
    artifacts = re.findall(r'^  "\$\{SPARK_HOME\}/jars \S+ (\S+) ', jars, flags=re.MULTILINE)
    assert artifacts == ["hadoop-aws", "bundle", "analyticsaccelerator-s3"]
    validate = (FILES.parent / "scripts" / "validate.sh").read_text(encoding="utf-8")
    assert "import confluent_kafka, aws_msk_iam_sasl_signer.MSKAuthTokenProvider" in validate
    node_files = (FILES.parent / "scripts" / "node-files.sh").read_text(encoding="utf-8")
    assert "SPARK_DIST_CLASSPATH" not in node_files


def imds_stub(env: dict[str, str], zone_id: str) -> None:
    """A curl that answers IMDSv2's token and placement requests as EC2 would."""
    stub = Path(env["PATH"].split(":", 1)[0]) / "curl"
    stub.write_text(
        "#!/bin/sh\n"
        'for arg; do last="$arg"; done\n'
        'case "$last" in\n'
        "  */api/token) echo token ;;\n"
        f"  */placement/availability-zone-id) echo {zone_id} ;;\n"
        "  *) exit 22 ;;\n"
        "esac\n",
        encoding="utf-8",
    )
    stub.chmod(0o755)


@pytest.mark.parametrize(("reported", "ok"), [("euw1-az1", True), ("euw1-az3", False)])
def test_node_bootstrap_checks_the_zone_id_against_the_instance(
    reported: str, ok: bool, tmp_path: Path
) -> None:
    env = write_node_env(tmp_path)
    imds_stub(env, reported)
    result = bash(f'source "{NODE_BOOTSTRAP}"\nload_settings\nzone_check', env)
    assert (result.returncode == 0) is ok, result.stderr
    if not ok:
        assert "TABLECAST_ZONE_ID euw1-az1 is not this instance's zone id euw1-az3" in (
            result.stderr
        )


FORMAT_ONCE = BIN / "hdfs-format-once"


def format_once_env(tmp_path: Path) -> dict[str, str]:
    """hdfs-format-once with its directories under tmp_path and an hdfs that logs."""
    env = shell_env(tmp_path)
    hadoop = tmp_path / "hadoop"
    (hadoop / "bin").mkdir(parents=True)
    hdfs = hadoop / "bin" / "hdfs"
    hdfs.write_text(
        '#!/bin/sh\necho "$@" >>"$HDFS_LOG"\n'
        'for d in "$TABLECAST_NAME_DIR" "$TABLECAST_NAME_COPY_DIR"; do\n'
        '  mkdir -p "$d/current"; echo formatted >"$d/current/VERSION"; done\n',
        encoding="utf-8",
    )
    hdfs.chmod(0o755)
    for name in ("hdfs/namenode", "copy"):
        (tmp_path / name).mkdir(parents=True)
    env |= {
        "TABLECAST_ENV": "prod",
        "HADOOP_HOME": str(hadoop),
        "TABLECAST_NAME_DIR": str(tmp_path / "hdfs" / "namenode"),
        "TABLECAST_NAME_COPY_DIR": str(tmp_path / "copy"),
        "HDFS_LOG": str(tmp_path / "hdfs.log"),
    }
    return env


def namespace(directory: Path, text: str) -> None:
    (directory / "current").mkdir(parents=True)
    (directory / "current" / "VERSION").write_text(text, encoding="utf-8")


def test_format_once_formats_both_copies_on_first_boot_only(tmp_path: Path) -> None:
    env = format_once_env(tmp_path)
    for _ in range(2):
        result = bash(f'"{FORMAT_ONCE}"', env)
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "hdfs.log").read_text(encoding="utf-8").count("namenode -format") == 1
    assert (tmp_path / "copy" / "current" / "VERSION").is_file()


def test_format_once_seeds_the_root_copy_of_a_replaced_instance(tmp_path: Path) -> None:
    env = format_once_env(tmp_path)
    namespace(tmp_path / "hdfs" / "namenode", "cluster A")
    (tmp_path / "hdfs" / ".namenode-formatted").write_text("earlier", encoding="utf-8")
    result = bash(f'"{FORMAT_ONCE}"', env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "copy" / "current" / "VERSION").read_text(encoding="utf-8") == "cluster A"
    assert not (tmp_path / "hdfs.log").exists(), "nothing is formatted"


def test_format_once_restores_a_lost_data_volume_from_the_copy(tmp_path: Path) -> None:
    """A blank data volume has no marker: without the copy it would be formatted."""
    env = format_once_env(tmp_path)
    namespace(tmp_path / "copy", "cluster A")
    result = bash(f'"{FORMAT_ONCE}"', env)
    assert result.returncode == 0, result.stderr
    assert "restored the namespace" in result.stdout
    restored = tmp_path / "hdfs" / "namenode" / "current" / "VERSION"
    assert restored.read_text(encoding="utf-8") == "cluster A"
    assert not (tmp_path / "hdfs.log").exists(), "nothing is formatted"


def test_driver_timers_run_health_every_minute_and_the_backup_hourly(tmp_path: Path) -> None:
    env = write_node_env(tmp_path) | {"TABLECAST_UNIT_DIR": str(tmp_path)}
    result = bash(f'source "{NODE_BOOTSTRAP}"\ndriver_timers', env)
    assert result.returncode == 0, result.stderr
    health = (tmp_path / "tablecast-hdfs-health.timer").read_text(encoding="utf-8")
    assert "OnUnitActiveSec=1min" in health.splitlines()
    backup = (tmp_path / "tablecast-hdfs-backup.timer").read_text(encoding="utf-8")
    assert "OnCalendar=hourly" in backup.splitlines()
    service = (tmp_path / "tablecast-hdfs-backup.service").read_text(encoding="utf-8")
    assert "ExecStart=/opt/tablecast/bin/hdfs-checkpoint-backup" in service.splitlines()
    assert "User=hdfs" in service.splitlines()


def test_hdfs_health_reads_the_namenodes_jmx(tmp_path: Path) -> None:
    """Against a NameNode JMX servlet stand-in on loopback."""
    import http.server
    import threading
    import time

    checkpointed_ms = int((time.time() - 125 * 60) * 1000)  # 125 minutes ago
    beans = {
        "FSNamesystem": {
            "MissingBlocks": 0,
            "UnderReplicatedBlocks": 4,
            "CorruptBlocks": 0,
            "TransactionsSinceLastCheckpoint": 4321,
            "LastCheckpointTime": checkpointed_ms,
        },
        "FSNamesystemState": {
            "NumLiveDataNodes": 3,
            "NumDeadDataNodes": 1,
            "CapacityTotal": 200,
            "CapacityUsed": 50,
        },
    }

    class Jmx(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            name = self.path.rsplit("name=", 1)[1]
            body = json.dumps({"beans": [beans[name]]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Jmx)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = shell_env(tmp_path) | {
            "TABLECAST_ENV": "prod",
            "AWS_REGION": "eu-west-1",
            "TABLECAST_PYTHON": sys.executable,
            "TABLECAST_NAMENODE_JMX": f"http://127.0.0.1:{server.server_port}/jmx",
            "TABLECAST_NAME_DIRS": f"{tmp_path} /",
        }
        text = (BIN / "hdfs-health").read_text(encoding="utf-8")
        # Run the script's own Python with --print instead of publishing.
        printing = tmp_path / "hdfs-health"
        printing.write_text(
            text.replace('"${AWS_REGION}" <<', '"${AWS_REGION}" --print <<'), encoding="utf-8"
        )
        result = bash(f'bash "{printing}"', env)
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stderr
    import shutil

    printed = json.loads(result.stdout)
    used = max(
        100.0 * shutil.disk_usage(p).used / shutil.disk_usage(p).total
        for p in (tmp_path, Path("/"))
    )
    assert abs(printed.pop("HdfsNameDirsUsedPercent") - used) < 1.0
    assert 125 <= printed.pop("HdfsMinutesSinceCheckpoint") < 127
    assert printed == {
        "HdfsTransactionsSinceCheckpoint": 4321,
        "HdfsCapacityUsedPercent": 25.0,
        "HdfsCorruptBlocks": 0,
        "HdfsDeadDataNodes": 1,
        "HdfsLiveDataNodes": 3,
        "HdfsMissingBlocks": 0,
        "HdfsUnderReplicatedBlocks": 4,
    }


def test_the_data_volume_is_mounted_by_label_whatever_volume_holds_it(tmp_path: Path) -> None:
    """A replaced volume (new, or from a snapshot) has another UUID: fstab names the label."""
    fstab = tmp_path / "fstab"
    fstab.write_text(
        "UUID=aaa / ext4 defaults 0 1\nUUID=old-volume /data xfs defaults,noatime,nofail 0 2\n"
    )
    env = write_node_env(tmp_path) | {"TABLECAST_FSTAB": str(fstab)}
    for _ in range(2):  # every boot
        result = bash(f'source "{NODE_BOOTSTRAP}"\nensure_fstab', env)
        assert result.returncode == 0, result.stderr
    assert fstab.read_text().splitlines() == [
        "UUID=aaa / ext4 defaults 0 1",
        "LABEL=tablecast-data /data xfs defaults,noatime,nofail 0 2",
    ]


def test_node_bootstrap_runs_on_every_boot_not_only_the_first(tmp_path: Path) -> None:
    from app.local.image import stage
    from infra.constructs.user_data import NodeRole, node_user_data

    image = stage(tmp_path / "image")
    boot = (image.units / "tablecast-bootstrap.service").read_text(encoding="utf-8")
    assert "ExecStart=/opt/tablecast/bin/node-bootstrap" in boot.splitlines()
    assert "ConditionPathExists=/etc/tablecast/node.env" in boot.splitlines()
    assert "WantedBy=multi-user.target" in boot.splitlines()
    user_data = node_user_data(
        environment="prod",
        role=NodeRole.WORKER,
        driver_host="10.0.0.1",
        region="eu-west-1",
        zone_id="euw1-az1",
        hdfs_replication=2,
    )
    # The first boot's user data starts the same unit (after writing node.env).
    assert user_data.rstrip().endswith("systemctl start tablecast-bootstrap.service")
    node_files = (NODE_BOOTSTRAP.parents[2] / "scripts" / "node-files.sh").read_text("utf-8")
    assert "systemctl enable tablecast-bootstrap.service" in node_files
