"""``--job`` on retire-topic and test-run (a declared job's topics, output and schema, checked
as status, start and stop check it), and archive's refusal of one: against a moto server on
loopback (SSM, and S3 for boto3 and pyarrow alike)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from app import handoff
from app.contract.schema import DEFAULT_SCHEMA
from app.ops import test_run
from app.ops.aws import AwsClients
from app.ops.cli import main
from app.ops.environment import read_handoff, read_job_handoff, write_handoff
from app.ops.errors import HandoffError
from app.sources.kafka_client import KafkaAuth, KafkaEndpoint
from app.sources.retired import EndsFrom, RetiredTopic, retired_uri, write
from app.tools.generate import CaptureSpec, generate, write_archive
from tests.processor_wheel import PROCESSOR, example_wheel
from tests.s3_server import S3Server
from tests.spark.helpers import run_job

REGION = "us-east-1"  # the S3 server's
BUCKET = "tablecast-dev-jobs"
LAB_SCHEMA = b'[key]\ncolumns = ["meter"]\n\n[columns]\nmeter = "string"\nvalue = "float64"\n'


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[AwsClients]:
    """A moto server: boto3 reaches it through AWS_ENDPOINT_URL, pyarrow through
    TABLECAST_S3_ENDPOINT (S3Server)."""
    with S3Server() as server:
        monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
        monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        server.create_bucket(BUCKET)
        yield AwsClients.create(REGION)


def environment(aws: AwsClients, *, jobs: str = "plant,lab") -> None:
    """dev's hand-off with two declared jobs, as infra writes it."""
    write_handoff(
        aws.ssm,
        "dev",
        {
            handoff.BOOTSTRAP_BROKERS_IAM: "127.0.0.1:9",
            handoff.OUTPUT_URI: f"s3://{BUCKET}/output",
            handoff.ARCHIVE_URI: f"s3://{BUCKET}/archive",
            handoff.ARTIFACTS_URI: f"s3://{BUCKET}/artifacts",
            handoff.TOPIC_PATTERN: "^sensor-.+",
            handoff.TOPICS: "sensor-1,sensor-2",
            handoff.JOB_VERSION: "0.1.0",
            handoff.RETENTION_HOURS: "96",
            handoff.REPLICATION_FACTOR: "1",
            handoff.REGION: REGION,
            **({handoff.JOBS: jobs} if jobs else {}),
        },
    )
    for job, prefix in (("plant", "plant"), ("lab", "lab/meters")):
        for name, value in {
            handoff.TOPIC_PATTERN: f"^sensor-{job}-.+",
            handoff.OUTPUT_URI: f"s3://{BUCKET}/output/{prefix}",
            handoff.CHECKPOINT_URI: f"hdfs://10.0.1.23:8020/tablecast/checkpoints/jobs/{job}",
            handoff.GLUE_TABLE: job,
            handoff.SCHEMA_SHA256: handoff.NO_SCHEMA,
        }.items():
            aws.ssm.put_parameter(
                Name=handoff.job_parameter_name("dev", job, name), Value=value, Type="String"
            )


def ops(*argv: str) -> int:
    return main(["--region", REGION, *argv])


def test_a_jobs_handoff_is_its_own_over_the_environments(aws: AwsClients) -> None:
    environment(aws)
    found = read_handoff(aws.ssm, "dev")
    lab = read_job_handoff(aws.ssm, found, "lab")
    assert lab.topic_pattern == "^sensor-lab-.+"
    assert lab.s3_uri(handoff.OUTPUT_URI) == f"s3://{BUCKET}/output/lab/meters"
    assert lab.archive_uri == found.archive_uri  # every job's
    assert lab.job_kafka() == found.job_kafka()
    assert handoff.TOPICS not in lab.values, "explicit topics are the one job's"
    aws.ssm.delete_parameter(Name=handoff.job_parameter_name("dev", "lab", handoff.GLUE_TABLE))
    with pytest.raises(HandoffError) as missing:
        read_job_handoff(aws.ssm, found, "lab")
    assert str(missing.value).startswith("SSM parameter /tablecast/dev/jobs/lab/glue-table: ")


def test_retire_topic_of_a_declared_job_reads_the_jobs_output_and_topics(
    aws: AwsClients, capsys: pytest.CaptureFixture[str]
) -> None:
    environment(aws)
    lab_output = f"s3://{BUCKET}/output/lab/meters"
    record = RetiredTopic(
        topic="sensor-lab-3", identity="id", ends={0: 7}, ends_from=EndsFrom.KAFKA
    )
    uri = write(retired_uri(lab_output), record)
    # Recorded in lab's output: found there, Kafka (nothing listens) never asked.
    assert ops("retire-topic", "-e", "dev", "--job", "lab", "--topic", "sensor-lab-3") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"topic sensor-lab-3 was retired before ({record.retired_at}) at ")
    assert uri.startswith(lab_output + "/")
    # plant's topics are not lab's.
    assert ops("retire-topic", "-e", "dev", "--job", "lab", "--topic", "sensor-plant-3") == 64
    assert capsys.readouterr().err.strip() == (
        "tablecast-ops retire-topic: topic sensor-plant-3 does not match the job's topics "
        "(^sensor-lab-.+): the job never reads it, there is nothing to retire"
    )


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (
            ["retire-topic", "-e", "dev", "--topic", "sensor-lab-3"],
            "tablecast-ops retire-topic: environment dev declares jobs (plant, lab): name one "
            "with --job",
        ),
        (
            ["retire-topic", "-e", "dev", "--job", "lob", "--topic", "sensor-lab-3"],
            "tablecast-ops retire-topic: --job lob: environment dev declares jobs plant, lab only",
        ),
        (
            ["test-run", "-e", "sandbox-x", "--no-deploy"],
            "tablecast-ops test-run: environment sandbox-x declares jobs (plant, lab): name one "
            "with --job",
        ),
        (
            ["test-run", "-e", "sandbox-x", "--job", "lob", "--no-deploy"],
            "tablecast-ops test-run: --job lob: environment sandbox-x declares jobs plant, lab "
            "only",
        ),
    ],
)
def test_the_job_is_checked_as_status_checks_it_before_anything_runs(
    aws: AwsClients, capsys: pytest.CaptureFixture[str], argv: list[str], complaint: str
) -> None:
    environment(aws)
    values = read_handoff(aws.ssm, "dev").values
    write_handoff(aws.ssm, "sandbox-x", dict(values))
    assert ops(*argv) == 64
    assert capsys.readouterr().err.strip() == complaint


def test_a_job_in_an_environment_without_jobs_is_refused(
    aws: AwsClients, capsys: pytest.CaptureFixture[str]
) -> None:
    environment(aws, jobs="")
    assert ops("retire-topic", "-e", "dev", "--job", "lab", "--topic", "sensor-lab-3") == 64
    assert capsys.readouterr().err.strip() == (
        "tablecast-ops retire-topic: --job lab: environment dev declares no jobs (it runs its "
        "one job)"
    )
    assert ops("retire-topic", "--job", "lab", "--topic", "x", "--output", "/tmp/o") == 64
    assert "--job lab: name its --environment" in capsys.readouterr().err


def test_archive_takes_no_job_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    # Refused before anything is read: no AWS, no broker.
    assert ops("archive", "-e", "dev", "--job", "lab") == 64
    assert capsys.readouterr().err.strip() == (
        "tablecast-ops archive: --job lab: archive takes no job: one archiver copies every "
        "job's topics (within the environment's topic-pattern) into the environment's one "
        "archive; run it without --job"
    )


def test_a_test_run_of_a_job_takes_its_deployed_schema_topics_and_output(
    aws: AwsClients,
) -> None:
    environment(aws)
    lab = read_job_handoff(aws.ssm, read_handoff(aws.ssm, "dev"), "lab")
    with pytest.raises(Exception) as none:
        test_run.job_schema(aws.s3, lab, "lab")
    assert str(none.value) == (
        "job lab of dev has no table schema deployed (schema-sha256 none): deploy one first "
        "(tablecast-ops deploy -e dev --schema lab=FILE)"
    )
    digest = hashlib.sha256(LAB_SCHEMA).hexdigest()
    aws.s3.put_object(Bucket=BUCKET, Key=f"artifacts/schemas/{digest}.toml", Body=LAB_SCHEMA)
    aws.ssm.put_parameter(
        Name=handoff.job_parameter_name("dev", "lab", handoff.SCHEMA_SHA256),
        Value=digest,
        Type="String",
        Overwrite=True,
    )
    lab = read_job_handoff(aws.ssm, read_handoff(aws.ssm, "dev"), "lab")
    schema = test_run.job_schema(aws.s3, lab, "lab")
    assert schema != DEFAULT_SCHEMA
    assert [column.name for column in schema.columns] == ["meter", "value"]
    # Bytes that are not the recorded document are refused.
    aws.s3.put_object(Bucket=BUCKET, Key=f"artifacts/schemas/{digest}.toml", Body=b"x")
    with pytest.raises(Exception) as changed:
        test_run.job_schema(aws.s3, lab, "lab")
    assert f"its SHA-256 is not job lab's schema-sha256 {digest}" in str(changed.value)
    target = test_run.Target.of(lab, KafkaEndpoint("127.0.0.1:9", KafkaAuth.NONE), job="lab")
    assert (target.topic_pattern, target.output_uri, target.archive_uri) == (
        "^sensor-lab-.+",
        f"s3://{BUCKET}/output/lab/meters",
        f"s3://{BUCKET}/archive",
    )


def test_a_test_run_of_a_job_verifies_its_output_against_its_topics_of_the_shared_archive(
    spark: Any, tmp_path: Path
) -> None:
    """The archive holds every job's topics; lab's output, lab's only: exact for lab's run,
    and what the one job's run would call missing rows."""
    archive = tmp_path / "archive"
    for prefix, seed in (("sensor-lab-", 3), ("sensor-plant-", 4)):
        spec = CaptureSpec(topics=1, partitions=1, sessions=3, updates=5, prefix=prefix, seed=seed)
        write_archive(generate(spec), str(archive), spec)
    output = tmp_path / "output"
    run_job(spark, archive, output, tmp_path / "checkpoint", topic_pattern="^sensor-lab-.+")
    lab = test_run.Target(
        environment="dev",
        endpoint=KafkaEndpoint("127.0.0.1:9", KafkaAuth.NONE),
        topic_pattern="^sensor-lab-.+",
        output_uri=str(output),
        archive_uri=str(archive),
        job="lab",
    )
    exact, said = test_run.verify(lab)
    assert exact, said
    exact, said = test_run.verify(dataclasses.replace(lab, job=None))
    assert not exact, said


def _processor_job(aws: AwsClients, environment: str, wheel: bytes, **recorded: str) -> str:
    """Lab of ``environment`` running the example processor from ``wheel`` (stored under the
    SHA-256 of its bytes, recorded as ``recorded`` says otherwise); the wheel's key."""
    digest = hashlib.sha256(wheel).hexdigest()
    key = f"processors/{digest}/meter_energy-1.0.0-py3-none-any.whl"
    aws.s3.put_object(Bucket=BUCKET, Key=f"artifacts/{key}", Body=wheel)
    values = {
        handoff.TOPIC_PATTERN: "^sensor-lab-.+",
        handoff.OUTPUT_URI: f"s3://{BUCKET}/output/lab/meters",
        handoff.CHECKPOINT_URI: "hdfs://10.0.1.23:8020/tablecast/checkpoints/jobs/lab",
        handoff.GLUE_TABLE: "lab",
        handoff.SCHEMA_SHA256: handoff.PROCESSOR_INPUT,
        handoff.PROCESSOR: PROCESSOR,
        handoff.PROCESSOR_WHEEL: key,
        handoff.PROCESSOR_WHEEL_SHA256: digest,
        handoff.INTEGRITY: "ordered",
    } | recorded
    for name, value in values.items():
        aws.ssm.put_parameter(
            Name=handoff.job_parameter_name(environment, "lab", name),
            Value=value,
            Type="String",
            Overwrite=True,
        )
    return key


def test_a_test_run_of_a_processor_job_loads_its_input_and_verifies_with_its_wheel(
    aws: AwsClients, tmp_path: Path, user_wheel: Path
) -> None:
    environment(aws)
    _processor_job(aws, "dev", user_wheel.read_bytes())
    lab = read_job_handoff(aws.ssm, read_handoff(aws.ssm, "dev"), "lab")
    code = test_run.job_processor(aws.s3, lab, "lab", tmp_path)
    assert code is not None and code.processor == PROCESSOR
    assert code.wheel.read_bytes() == user_wheel.read_bytes()
    # The load follows the processor's own input (the job has no schema of its own).
    schema = test_run.job_load_schema(aws.s3, lab, "lab", code)
    assert [column.name for column in schema.columns] == ["meter", "kwh", "read_at"]
    # verify runs in an environment that imports the processor the output's ledger names.
    target = test_run.Target.of(
        lab, KafkaEndpoint("127.0.0.1:9", KafkaAuth.NONE), job="lab", processor=code
    )
    load = (
        "from app.contract import loader; from app.contract.schema import DEFAULT_SCHEMA; "
        f"print(loader.load({PROCESSOR!r}, DEFAULT_SCHEMA).name)"
    )
    loaded = _python(load, target.env)
    assert loaded.stdout.strip() == PROCESSOR, loaded.stderr
    without = _python(load, os.environ)
    assert "no module named 'meter_energy'" in without.stderr


def _python(code: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("recorded", "stored", "complaint"),
    [
        (
            {handoff.PROCESSOR_WHEEL: "none", handoff.PROCESSOR_WHEEL_SHA256: "none"},
            None,
            f"job lab of sandbox-x runs processor {PROCESSOR}, whose wheel no deploy has shipped "
            "(processor-wheel none): deploy it first (tablecast-ops deploy -e sandbox-x "
            "--settings FILE)",
        ),
        (
            {},
            b"not the wheel",
            "its SHA-256 is {actual}, not job lab's processor-wheel-sha256 {recorded}: ship the "
            "processor again (tablecast-ops deploy)",
        ),
    ],
)
def test_a_test_run_of_a_processor_job_without_its_deployed_wheel_is_refused(
    aws: AwsClients,
    capsys: pytest.CaptureFixture[str],
    user_wheel: Path,
    recorded: dict[str, str],
    stored: bytes | None,
    complaint: str,
) -> None:
    """Before any topic is created or any message published (no broker answers here)."""
    environment(aws)
    write_handoff(aws.ssm, "sandbox-x", dict(read_handoff(aws.ssm, "dev").values))
    key = _processor_job(aws, "sandbox-x", user_wheel.read_bytes(), **recorded)
    if stored is not None:
        aws.s3.put_object(Bucket=BUCKET, Key=f"artifacts/{key}", Body=stored)
    assert ops("test-run", "-e", "sandbox-x", "--job", "lab", "--no-deploy") == 64
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert error.startswith("tablecast-ops test-run: ")
    assert error.endswith(
        complaint.format(
            actual=hashlib.sha256(stored or b"").hexdigest(),
            recorded=hashlib.sha256(user_wheel.read_bytes()).hexdigest(),
        )
    )


@pytest.fixture(scope="module")
def user_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return example_wheel(tmp_path_factory)
