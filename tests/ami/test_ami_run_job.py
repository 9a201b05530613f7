"""run-job against moto's SSM and S3: it installs only the wheel whose SHA-256
the deploy tool recorded (root installs it; nodes only read artifacts/)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import boto3
import pytest

from app import handoff
from tests.ami.helpers import FILES
from tests.ami.run_job_harness import (
    BUCKET,
    REGION,
    SCHEMA,
    VERSION,
    declared,
    job_options,
    prepare,
    run_job,
    sha256,
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
    aws: dict[str, str],
    tmp_path: Path,
    options: dict[str, str],
    node: dict[str, str] | None = None,
    *,
    job: str | None = None,
    before: Callable[[], object] = lambda: None,
) -> list[str]:
    """What run-job hands spark-submit when SSM also holds ``options`` (the job's Kafka options).

    pip and the installed version are stand-ins that succeed; spark-submit records its
    arguments.
    """
    env = prepare(aws, tmp_path, recorded_sha256=None)
    before()
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
    done = run_job(env | (node or {}), *([job] if job else []))
    assert done.returncode == 0, done.stderr
    return arguments.read_bytes().decode().split("\0")[:-1]


def test_a_declared_job_runs_with_its_own_topics_output_checkpoint_table_schema_and_cores(
    aws: dict[str, str], tmp_path: Path
) -> None:
    argv = submitted(aws, tmp_path, {}, job="lab", before=lambda: declared(aws, tmp_path))
    options = job_options(argv)
    assert ("--topic-pattern", "^s-lab-.+") in options
    assert ("--output", f"s3://{BUCKET}/output/lab/meters") in options
    assert ("--checkpoint", "hdfs://h/tablecast/checkpoints/jobs/lab") in options
    assert ("--glue-table", "lab_meters") in options
    assert ("--glue-database", "tablecast_t") in options  # the environment's
    # The schema document fetched beside the wheels, its SHA-256 checked.
    schema = Path(dict(options)["--schema"])
    assert schema == tmp_path / "wheels" / "schemas" / f"{sha256(SCHEMA)}.toml"
    assert schema.read_bytes() == SCHEMA
    assert argv[argv.index("--name") + 1] == "tablecast-t-lab"
    conf = [argv[i + 1] for i, word in enumerate(argv[: argv.index("run")]) if word == "--conf"]
    assert "spark.cores.max=2" in conf
    # `tablecast run` takes them as given.
    from app import cli

    args = cli.build_parser().parse_args(argv[argv.index("run") :])
    assert (args.glue_table, args.schema, args.job) == ("lab_meters", str(schema), "lab")


def test_a_declared_job_whose_schema_is_not_the_recorded_one_does_not_run(
    aws: dict[str, str], tmp_path: Path
) -> None:
    env = prepare(aws, tmp_path, recorded_sha256=None)
    declared(aws, tmp_path, recorded="0" * 64)
    done = run_job(env, "lab")
    assert done.returncode == 1
    assert f"schemas/{'0' * 64}.toml has SHA-256 {sha256(SCHEMA)}" in done.stderr
    assert "job lab's schema-sha256 records 0000" in done.stderr
    assert not list((tmp_path / "wheels" / "schemas").iterdir()), "the refused one is not kept"


@pytest.mark.parametrize(
    ("job", "jobs", "complaint"),
    [
        ("lab", "plant", "the settings of t declare no job lab (SSM jobs: 'plant')"),
        ("Lab", "plant,lab", "'Lab' is not a job's name (1-24 of a-z, 0-9, '-', a letter first)"),
    ],
)
def test_run_job_refuses_a_job_the_settings_do_not_declare(
    aws: dict[str, str], tmp_path: Path, job: str, jobs: str, complaint: str
) -> None:
    env = prepare(aws, tmp_path, recorded_sha256=None)
    declared(aws, tmp_path, jobs=jobs)
    done = run_job(env, job)
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (
        1,
        f"run-job: ERROR: {complaint}",
    )


def test_where_the_settings_declare_jobs_the_environments_one_job_does_not_run(
    aws: dict[str, str], tmp_path: Path
) -> None:
    env = prepare(aws, tmp_path, recorded_sha256=None)
    declared(aws, tmp_path)
    done = run_job(env)
    # Exit 0: systemd does not restart it.
    assert done.returncode == 0, done.stderr
    assert "declare jobs (plant,lab): each runs as tablecast-job@<name>.service" in done.stderr
    assert not (tmp_path / "pip.log").exists(), "nothing was installed"


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
        "--retire-grace",
        "--table-history",
    ):
        assert option not in names, option


def test_the_environments_retire_grace_reaches_tablecast_run(
    aws: dict[str, str], tmp_path: Path
) -> None:
    argv = submitted(aws, tmp_path, {handoff.RETIRE_GRACE: "10 minutes"})
    assert ("--retire-grace", "10 minutes") in job_options(argv)
    # `tablecast run` takes it as given: its compactions' inputs stay 10 minutes.
    from app import cli
    from app.cli import options as cli_options

    assert cli_options.retire_grace(cli.build_parser().parse_args(argv[argv.index("run") :])) == 600


def test_the_environments_table_history_reaches_tablecast_run(
    aws: dict[str, str], tmp_path: Path
) -> None:
    argv = submitted(aws, tmp_path, {handoff.TABLE_HISTORY: "30 days"})
    assert ("--table-history", "30 days") in job_options(argv)
    from app import cli
    from app.cli import options as cli_options

    parsed = cli.build_parser().parse_args(argv[argv.index("run") :])
    assert cli_options.table_settings(parsed).history_s == 30 * 86_400


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


def test_one_service_at_a_time_fetches_and_installs(aws: dict[str, str], tmp_path: Path) -> None:
    """The declared jobs' services start together: each waits for the wheels folder's lock
    before it fetches and installs, so no two write one file or the venv at once."""
    env = prepare(aws, tmp_path, recorded_sha256=None)
    with (tmp_path / "wheels" / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = subprocess.Popen(
            [str(FILES / "bin" / "run-job")],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            with pytest.raises(subprocess.TimeoutExpired):
                started.wait(timeout=5)
            assert not (tmp_path / "pip.log").exists(), "it waits for the lock"
            assert not list((tmp_path / "wheels").glob("*.part")), "and fetches nothing"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        try:
            _, stderr = started.communicate(timeout=120)
        finally:
            if started.poll() is None:
                started.kill()
                started.wait()
    # Then it went on to pip (which the stand-in refuses with 7).
    assert started.returncode == 7, stderr
    assert "--no-deps" in (tmp_path / "pip.log").read_text()
