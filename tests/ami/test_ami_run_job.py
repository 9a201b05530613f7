"""run-job against moto's SSM and S3: it installs only the wheel whose SHA-256
the deploy tool recorded (root installs it; nodes only read artifacts/)."""

from __future__ import annotations

import getpass
import hashlib
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import boto3
import pytest

from app import handoff
from tests.ami.helpers import FILES

REGION: Final = "eu-west-1"
BUCKET = "tablecast-t-bucket"
VERSION = "9.9.9"


@pytest.fixture
def aws() -> Iterator[dict[str, str]]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
    # Servers in one process share moto's state: start from nothing.
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
    try:
        yield {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
        }
    finally:
        server.stop()


def prepare(aws: dict[str, str], tmp_path: Path, recorded_sha256: str | None) -> dict[str, str]:
    """SSM's hand-off, a wheel in artifacts/, and a venv whose pip records its calls."""
    session = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    s3 = session.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"])
    ssm = session.client("ssm", endpoint_url=aws["AWS_ENDPOINT_URL"])
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    wheel = b"PK\x05\x06" + bytes(18)  # an empty zip: pip is never reached in these tests
    s3.put_object(Bucket=BUCKET, Key=f"artifacts/tablecast-{VERSION}-py3-none-any.whl", Body=wheel)
    values = {
        handoff.BOOTSTRAP_BROKERS_IAM: "b-1:9098",
        handoff.OUTPUT_URI: f"s3://{BUCKET}/output",
        handoff.ARCHIVE_URI: f"s3://{BUCKET}/archive",
        handoff.CHECKPOINT_URI: "hdfs://h/c",
        handoff.TOPIC_PATTERN: "^s-.+",
        handoff.TRIGGER: "1 minute",
        handoff.METRIC_NAMESPACE: "Tablecast",
        handoff.JOB_VERSION: VERSION,
        handoff.ARTIFACTS_URI: f"s3://{BUCKET}/artifacts",
        handoff.REGION: REGION,
        handoff.JOB_WHEEL_SHA256: recorded_sha256 or sha256(wheel),
        handoff.GLUE_DATABASE: "tablecast",
        handoff.COMPACT_EVERY: "1 day",
    }
    for name, value in values.items():
        ssm.put_parameter(Name=handoff.parameter_name("t", name), Value=value, Type="String")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    # The venv's python is this one; "pip install" is recorded and refused.
    python = venv / "bin" / "python"
    python.write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then echo "$@" >> {tmp_path}/pip.log;'
        f' exit 7; fi\nexec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    return {
        **os.environ,
        **aws,
        "TABLECAST_ENV": "t",
        "TABLECAST_DRIVER_HOST": "127.0.0.1",
        "SPARK_HOME": str(tmp_path / "spark"),
        "TABLECAST_ZONE_ID": "euw1-az1",
        "TABLECAST_VENV": str(venv),
        "TABLECAST_WHEEL_DIR": str(wheels),
        "TABLECAST_RUN_AS_USER": getpass.getuser(),
    }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run_job(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FILES / "bin" / "run-job")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_run_job_refuses_a_wheel_whose_hash_is_not_the_recorded_one(
    aws: dict[str, str], tmp_path: Path
) -> None:
    env = prepare(aws, tmp_path, recorded_sha256="0" * 64)
    done = run_job(env)
    assert done.returncode == 1
    assert f"tablecast-{VERSION}-py3-none-any.whl has SHA-256" in done.stderr
    assert "job-wheel-sha256 records 0000000000" in done.stderr
    assert not (tmp_path / "pip.log").exists(), "nothing was installed"
    assert not list((tmp_path / "wheels").glob("*.whl")), "the refused wheel is not kept"


def test_run_job_installs_the_wheel_whose_hash_is_recorded(
    aws: dict[str, str], tmp_path: Path
) -> None:
    env = prepare(aws, tmp_path, recorded_sha256=None)
    done = run_job(env)
    # It went on to pip (which the stand-in refuses with 7): the hash matched.
    assert done.returncode == 7, done.stderr
    assert "--no-deps" in (tmp_path / "pip.log").read_text()


def submitted(
    aws: dict[str, str], tmp_path: Path, options: dict[str, str], node: dict[str, str] | None = None
) -> list[str]:
    """What run-job hands spark-submit when SSM also holds ``options`` (the job's Kafka options).

    pip and the installed version are stand-ins that succeed; spark-submit records its
    arguments.
    """
    env = prepare(aws, tmp_path, recorded_sha256=None)
    ssm = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("ssm", endpoint_url=aws["AWS_ENDPOINT_URL"])
    for name, value in options.items():
        ssm.put_parameter(Name=handoff.parameter_name("t", name), Value=value, Type="String")
    python = Path(env["TABLECAST_VENV"]) / "bin" / "python"
    python.write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then exit 0; fi\n'
        f'if [ "$1" = "-c" ]; then echo {VERSION}; exit 0; fi\nexec {sys.executable} "$@"\n'
    )
    arguments = tmp_path / "spark-submit.args"
    spark_submit = Path(env["SPARK_HOME"]) / "bin" / "spark-submit"
    spark_submit.parent.mkdir(parents=True)
    spark_submit.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {arguments}\n")
    spark_submit.chmod(0o755)
    env.pop("TABLECAST_KAFKA_AUTH", None)  # a node's environment: SSM says
    env.pop("TABLECAST_PRELOAD_DIR", None)
    done = run_job(env | (node or {}))
    assert done.returncode == 0, done.stderr
    return arguments.read_bytes().decode().split("\0")[:-1]


def job_options(argv: list[str]) -> list[tuple[str, str]]:
    """``tablecast run``'s options as (name, value) pairs, in order."""
    run = argv[argv.index("run") + 1 :]
    pairs = []
    for index, word in enumerate(run):
        if word.startswith("--") and index + 1 < len(run) and not run[index + 1].startswith("--"):
            pairs.append((word, run[index + 1]))
    return pairs


def test_the_environments_kafka_options_reach_tablecast_run(
    aws: dict[str, str], tmp_path: Path
) -> None:
    secret = "arn:aws:secretsmanager:eu-west-1:000000000000:secret:AmazonMSK_t-AbCdEf"
    options = {
        handoff.KAFKA_AUTH: "scram",
        handoff.BOOTSTRAP_BROKERS_SASL_SCRAM: "b-1:9096,b-2:9096",
        handoff.KAFKA_SECRET_ARN: secret,
        handoff.KAFKA_ISOLATION_LEVEL: "read_uncommitted",
        handoff.KAFKA_OPTIONS: '["fetch.max.bytes=1048576", "client.id=tablecast, plant 7"]',
        handoff.STARTING_OFFSETS: "2026-11-23T06:00:00",
        handoff.TOPICS: "s-a,s-b",
        handoff.MIN_OFFSETS_PER_TRIGGER: "10000",
        handoff.MAX_TRIGGER_DELAY: "5 minutes",
    }
    argv = submitted(aws, tmp_path, options)
    given = job_options(argv)
    for pair in [
        ("--bootstrap-servers", "b-1:9096,b-2:9096"),
        ("--kafka-auth", "scram"),
        ("--kafka-secret-arn", secret),
        ("--kafka-isolation-level", "read_uncommitted"),
        ("--starting-offsets", "2026-11-23T06:00:00"),
        ("--topics", "s-a,s-b"),
        ("--min-offsets-per-trigger", "10000"),
        ("--max-trigger-delay", "5 minutes"),
    ]:
        assert pair in given, pair
    assert [v for k, v in given if k == "--kafka-option"] == [
        "fetch.max.bytes=1048576",
        "client.id=tablecast, plant 7",
    ]
    assert "--topic-pattern" not in dict(given)  # --topics instead: argparse takes one
    # `tablecast run` takes them as given.
    from app.cli import build_parser

    parsed = build_parser().parse_args(argv[argv.index("run") :])
    assert parsed.kafka_option == ["fetch.max.bytes=1048576", "client.id=tablecast, plant 7"]
    assert (parsed.kafka_auth, parsed.kafka_secret_arn, parsed.topics) == (
        "scram",
        secret,
        "s-a,s-b",
    )


def test_without_kafka_options_run_job_passes_the_iam_brokers_and_the_pattern(
    aws: dict[str, str], tmp_path: Path
) -> None:
    given = job_options(submitted(aws, tmp_path, {}))
    assert ("--bootstrap-servers", "b-1:9098") in given
    assert ("--kafka-auth", "iam") in given
    assert ("--topic-pattern", "^s-.+") in given
    names = {name for name, _ in given}
    for option in (
        "--kafka-secret-arn",
        "--kafka-isolation-level",
        "--kafka-option",
        "--starting-offsets",
        "--topics",
        "--min-offsets-per-trigger",
        "--max-trigger-delay",
    ):
        assert option not in names, option


DAEMON = "spark.python.daemon.module=tablecast_preload"


@pytest.mark.parametrize("installed", [True, False])
def test_run_job_names_the_preloading_python_daemon_only_where_the_image_installed_it(
    installed: bool, aws: dict[str, str], tmp_path: Path
) -> None:
    from app.local.image import stage

    image = stage(tmp_path / "image")
    where = image.path("/opt/tablecast/python") if installed else tmp_path / "none"
    argv = submitted(aws, tmp_path, {}, {"TABLECAST_PRELOAD_DIR": str(where)})
    if installed:
        assert argv[argv.index("--conf") + 1] == DAEMON
        assert argv.index("--conf") < argv.index("run")
    else:
        assert DAEMON not in argv
