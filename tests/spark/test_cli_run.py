"""``tablecast run`` on the command line: exit codes and structured errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from app import cli
from app.tools.generate import CaptureSpec, Fault
from tests.spark.helpers import run_argv, write_capture


def test_a_strict_violation_is_one_json_line_naming_its_location(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = CaptureSpec(topics=1, partitions=1, sessions=2, updates=10, faults=(Fault.SEQ_GAP,))
    capture = write_capture(tmp_path / "archive", spec)
    [fault] = capture.faults
    code = cli.main([*run_argv(tmp_path), "--metrics", "none", "--log-format", "json"])
    assert code == 2
    lines = [
        orjson.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    [error] = [line for line in lines if line["level"] == "ERROR"]  # one line, nothing else
    assert (error["topic"], error["partition"], error["offset"], error["session"]) == (
        fault.topic,
        fault.partition,
        fault.offset,
        fault.session,
    )
    assert error["rule"] == 2 and error["expected"].startswith("seq ")
    assert "integrity violation (rule 2)" in error["message"]


def test_data_loss_found_by_the_sources_planner_is_one_json_line_with_its_facts(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = CaptureSpec(
        topics=1,
        partitions=1,
        sessions=2,
        updates=20,
        records_per_file=10,
        faults=(Fault.ARCHIVE_HOLE,),
    )
    [hole] = write_capture(tmp_path / "archive", spec).faults
    argv = run_argv(tmp_path)
    assert cli.main([*argv, "--log-format", "json"]) == 3
    lines = [
        orjson.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")
    ]
    [error] = [line for line in lines if line["level"] == "ERROR"]
    assert error["message"].startswith(
        f"tablecast run: data loss in the archive: topic sensor-0 partition 0 offsets "
        f"{hole.offset} to {error['last_missing']} are missing between "
    )
    assert (error["source"], error["topic"], error["partition"], error["first_missing"]) == (
        "the archive",
        "sensor-0",
        0,
        hole.offset,
    )
    # On a terminal: the same error as one plain line, nothing else.
    assert cli.main(argv) == 3
    assert capsys.readouterr().err.splitlines() == [error["message"]]
