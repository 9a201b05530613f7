"""Command-line parsing: triggers, durations, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import cli
from app.errors import ConfigurationError
from app.job import Trigger, TriggerKind


def test_triggers_parse_with_or_without_the_processing_time_prefix() -> None:
    assert Trigger.parse("available-now") == Trigger(TriggerKind.AVAILABLE_NOW)
    assert Trigger.parse("processing-time=15 minutes") == Trigger(
        TriggerKind.PROCESSING_TIME, "15 minutes"
    )
    # What SSM's `trigger` parameter holds on the cluster.
    assert Trigger.parse("1 minute") == Trigger(TriggerKind.PROCESSING_TIME, "1 minute")
    with pytest.raises(ConfigurationError, match="--trigger 'soon'"):
        Trigger.parse("soon")


def test_durations() -> None:
    assert cli.parse_duration_ms("1 hour") == 3_600_000
    assert cli.parse_duration_ms("90s") == 90_000
    with pytest.raises(ConfigurationError, match="'a while'"):
        cli.parse_duration_ms("a while")


def test_bad_input_gets_one_line_and_an_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["verify", "--archive", str(tmp_path / "none"), "--output", str(tmp_path / "out")]
    )
    assert code == 0  # an empty archive and an empty output agree
    (tmp_path / "archive" / "sensor-1" / "0").mkdir(parents=True)
    (tmp_path / "archive" / "sensor-1" / "0" / "junk.parquet").write_bytes(b"x")
    code = cli.main(["verify", "--archive", str(tmp_path / "archive"), "--output", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 3
    assert err.startswith("tablecast verify: archive file ") and "junk.parquet" in err
    assert "\n" not in err


def test_an_unexpected_error_is_reported_by_its_innermost_cause() -> None:
    wrapped = RuntimeError(
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_DATA_SOURCE_ERROR] "
        "Failed to plan Python data source: Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "ModuleNotFoundError: No module named 'app'\n"
        "\tat org.apache.spark.sql.errors.QueryCompilationErrors$.pythonDataSourceError(x.scala:1)"
    )
    assert cli.root_cause(wrapped) == "ModuleNotFoundError: No module named 'app'"
    assert cli.root_cause(ValueError("plain\nsecond line")) == "ValueError: plain"
