"""The deployed job gets the table's settings: run-job passes SSM's glue-database and
compact-every to ``tablecast run`` (against moto's SSM and S3, spark-submit recorded)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import cli, handoff
from app.table.live import TableSettings
from infra.config.handoff import handoff_values
from infra.config.layout import GLUE_DATABASE
from infra.config.stand_in import environment_config
from tests.ami.run_job_harness import VERSION, moto_aws, prepare, run_job


@pytest.fixture
def aws() -> Iterator[dict[str, str]]:
    """run-job's moto (this directory's ``aws`` is the table's: S3 and Glue, bucket lake)."""
    with moto_aws() as env:
        yield env


def test_run_job_passes_the_glue_database_and_the_compaction_period_to_the_job(
    aws: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = prepare(aws, tmp_path, recorded_sha256=None)
    # pip installs (here: nothing) and reports the recorded version; spark-submit records
    # the command it was given.
    python = Path(env["TABLECAST_VENV"]) / "bin" / "python"
    python.write_text(
        f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then exit 0; fi\n'
        f'if [ "$1" = "-c" ]; then echo {VERSION}; exit 0; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    submit = Path(env["SPARK_HOME"]) / "bin" / "spark-submit"
    submit.parent.mkdir(parents=True)
    submit.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/submitted\n'
        f'echo "$AWS_REGION" > {tmp_path}/region\n'
    )  # Glue's, for the job
    submit.chmod(0o755)

    done = run_job(env)
    assert done.returncode == 0, done.stderr
    argv = (tmp_path / "submitted").read_text().splitlines()
    command = argv[argv.index("run") + 1 :]
    assert command[command.index("--glue-database") + 1] == "tablecast"
    assert command[command.index("--compact-every") + 1] == "1 day"
    # What the job makes of them (the CLI's own parser, in run-job's environment).
    monkeypatch.setenv("AWS_REGION", (tmp_path / "region").read_text().strip())
    parsed = cli.build_parser().parse_args(["run", *command])
    settings = cli._table_settings(parsed)
    assert settings.glue_database == "tablecast" and settings.compact_every_s == 86_400
    assert settings.region == aws["AWS_REGION"]


def test_infra_hands_the_job_its_glue_database_and_a_daily_compaction() -> None:
    config = environment_config()
    values = handoff_values(
        config=config,
        bootstrap_brokers_iam="b:9098",
        bucket_name="b",
        driver_private_ip="10.0.0.1",
        driver_instance_id="i-1",
    )
    assert values[handoff.GLUE_DATABASE] == GLUE_DATABASE
    assert values[handoff.COMPACT_EVERY] == "1 day"
    parsed = cli.build_parser().parse_args(
        [
            "run",
            "--archive",
            "a",
            "--output",
            "o",
            "--checkpoint",
            "c",
            "--compact-every",
            values[handoff.COMPACT_EVERY],
            "--region",
            "eu-west-1",
        ]
    )
    assert cli._table_settings(parsed) == TableSettings(
        region="eu-west-1", compact_every_s=86_400.0
    )
