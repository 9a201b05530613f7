"""run-job against moto's SSM and S3: the server, the hand-off and venv it reads, the run."""

from __future__ import annotations

import getpass
import hashlib
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import boto3
from moto.server import ThreadedMotoServer

from app import handoff
from tests.ami.helpers import FILES

REGION: Final = "eu-west-1"
BUCKET = "tablecast-t-bucket"
VERSION = "9.9.9"


@contextmanager
def moto_aws() -> Iterator[dict[str, str]]:
    """A fresh moto server on loopback; the environment that points AWS's clients at it."""
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
        handoff.GLUE_DATABASE: "tablecast_t",
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


def run_job(env: dict[str, str], *job: str) -> subprocess.CompletedProcess[str]:
    """run-job, of the environment's one job or (``job``) of a declared one."""
    # Seconds alone; a machine loaded many times over its cores (the suite's lanes beside
    # other work) took over 120 s for one run with a pip install.
    return subprocess.run(
        [str(FILES / "bin" / "run-job"), *job],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


SCHEMA = b'[key]\ncolumns = ["meter"]\n\n[columns]\nmeter = "string"\n'


def declared(
    aws: dict[str, str],
    tmp_path: Path,
    *,
    stored: bytes = SCHEMA,
    recorded: str | None = None,
    jobs: str = "plant,lab",
) -> dict[str, str]:
    """SSM's hand-off of an environment declaring ``jobs``, job lab's own parameters, and
    ``stored`` as lab's schema document in artifacts/schemas/ (named by its SHA-256, or
    ``recorded``, which schema-sha256 holds)."""
    session = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    ssm = session.client("ssm", endpoint_url=aws["AWS_ENDPOINT_URL"])
    s3 = session.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"])
    digest = recorded or sha256(stored)
    s3.put_object(Bucket=BUCKET, Key=f"artifacts/schemas/{digest}.toml", Body=stored)
    ssm.put_parameter(Name=handoff.parameter_name("t", handoff.JOBS), Value=jobs, Type="String")
    values = {
        handoff.TOPIC_PATTERN: "^s-lab-.+",
        handoff.OUTPUT_URI: f"s3://{BUCKET}/output/lab/meters",
        handoff.CHECKPOINT_URI: "hdfs://h/tablecast/checkpoints/jobs/lab",
        handoff.GLUE_TABLE: "lab_meters",
        handoff.SCHEMA_SHA256: digest,
        handoff.CORES: "2",
    }
    for name, value in values.items():
        ssm.put_parameter(
            Name=handoff.job_parameter_name("t", "lab", name), Value=value, Type="String"
        )
    return {}


def job_options(argv: list[str]) -> list[tuple[str, str]]:
    """``tablecast run``'s options as (name, value) pairs, in order."""
    run = argv[argv.index("run") + 1 :]
    pairs = []
    for index, word in enumerate(run):
        if word.startswith("--") and index + 1 < len(run) and not run[index + 1].startswith("--"):
            pairs.append((word, run[index + 1]))
    return pairs
