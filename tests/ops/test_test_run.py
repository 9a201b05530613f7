"""``tablecast-ops test-run``: its refusals (tests/local/test_pipeline.py runs its loop)."""

from __future__ import annotations

import pytest

from app.ops.cli import main


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
