"""The deployed job gets the table's settings: run-job passes SSM's glue-database,
compact-every and, where the environment sets it, retire-grace to ``tablecast run``
(against moto's SSM and S3, spark-submit recorded)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from app import cli, handoff
from app.cli import options as cli_options
from app.table.live import TableSettings
from infra.config.layout import glue_database
from infra.config.stand_in import environment_config
from tests.ami.run_job_harness import REGION, VERSION, moto_aws, prepare, run_job
from tests.infra.valid_config import ssm_values


@pytest.fixture
def aws() -> Iterator[dict[str, str]]:
    """run-job's moto (this directory's ``aws`` is the table's: S3 and Glue, bucket lake)."""
    with moto_aws() as env:
        yield env


def deployed_settings(
    aws: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    also: dict[str, str] | None = None,
) -> tuple[list[str], TableSettings]:
    """run-job's ``tablecast run`` options when SSM also holds ``also``, and the table's
    settings the job makes of them (the CLI's own parser, in run-job's environment)."""
    env = prepare(aws, tmp_path, recorded_sha256=None)
    ssm = boto3.session.Session(
        region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    ).client("ssm", endpoint_url=aws["AWS_ENDPOINT_URL"])
    for name, value in (also or {}).items():
        ssm.put_parameter(Name=handoff.parameter_name("t", name), Value=value, Type="String")
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
    monkeypatch.setenv("AWS_REGION", (tmp_path / "region").read_text().strip())
    return command, cli_options.table_settings(cli.build_parser().parse_args(["run", *command]))


def test_run_job_passes_the_glue_database_and_the_compaction_period_to_the_job(
    aws: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    command, settings = deployed_settings(aws, tmp_path, monkeypatch)
    assert command[command.index("--glue-database") + 1] == "tablecast_t"
    assert command[command.index("--compact-every") + 1] == "1 day"
    assert settings.glue_database == "tablecast_t" and settings.compact_every_s == 86_400
    assert settings.region == aws["AWS_REGION"]
    # The environment keeps the job's grace: none is passed, the rewrites' default holds.
    assert "--retire-grace" not in command and settings.retire_grace_s is None


def test_an_environments_retire_grace_reaches_the_jobs_compactions(
    aws: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = dataclasses.replace(environment_config(), retire_grace="10 minutes")
    written = ssm_values(config)
    grace = {name: written[name] for name in handoff.TABLE_OPTIONAL if name in written}
    assert grace == {handoff.RETIRE_GRACE: "10 minutes"}
    command, settings = deployed_settings(aws, tmp_path, monkeypatch, also=grace)
    assert command[command.index("--retire-grace") + 1] == "10 minutes"
    assert settings.retire_grace_s == 600


def test_infra_hands_the_job_its_glue_database_and_a_daily_compaction() -> None:
    config = environment_config()
    values = ssm_values(config)
    assert values[handoff.GLUE_DATABASE] == glue_database(config.name) == "tablecast_sandbox"
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
    assert cli_options.table_settings(parsed) == TableSettings(
        region="eu-west-1", compact_every_s=86_400.0
    )
