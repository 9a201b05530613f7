"""``tablecast-ops test-run``: its refusals (tests/local/test_pipeline.py runs its loop)."""

from __future__ import annotations

import pytest

from app import handoff
from app.ops.aws import AwsClients
from app.ops.cli import main
from app.ops.environment import write_handoff
from tests.ops.conftest import REGION


@pytest.mark.parametrize("environment", ["dev", "staging", "prod"])
def test_a_shared_environment_is_refused_before_anything_is_touched(
    environment: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No AWS at all: a read of the hand-off would fail on these.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert main(["test-run", "-e", environment]) == 64
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert f"{environment} is a shared environment: test-run publishes generated load" in error


def test_the_environment_must_be_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test-run", "--sessions", "2"]) == 64
    assert "name the test pipeline with --environment" in capsys.readouterr().err


def test_no_deploy_needs_a_deployed_job_and_says_so_before_touching_kafka(
    aws: AwsClients, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a test pipeline's driver (which may not deploy) test-run runs what is deployed."""
    write_handoff(
        aws.ssm,
        "exp",
        {
            handoff.JOB_VERSION: "none",
            handoff.REGION: REGION,
            # No broker answers here: the refusal comes first.
            handoff.BOOTSTRAP_BROKERS_IAM: "127.0.0.1:9",
        },
    )
    assert main(["--region", REGION, "test-run", "-e", "exp", "--no-deploy"]) == 64
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "exp runs no job yet: deploy one first (tablecast-ops deploy -e exp)" in error


def test_no_deploy_excludes_a_wheel_or_a_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["test-run", "-e", "exp", "--no-deploy", "--version", "1.0"])
    assert "not allowed with argument" in capsys.readouterr().err
