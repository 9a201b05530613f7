"""What the commands say of a damaged output: one line, exit 8, and the command that mends it,
which then mends it; verify's verdict on the Iceberg table and with the live job's rules."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.engine.machine import IntegrityMode
from app.errors import DamagedOutputError
from app.sink.visible import visible_files
from app.storage import resolve
from app.table import catalog as catalog_mod
from app.tools import verify
from app.tools.generate import CaptureSpec, Fault
from tests.spark.helpers import assert_exact, repair_argv, run_job, write_capture
from tests.table.helpers import assert_follows_ledger, table_rows

SPEC = CaptureSpec(topics=1, partitions=2, sessions=4, updates=30, records_per_file=40, seed=11)
PATTERN = "^sensor-.+"

pytestmark = pytest.mark.usefixtures("iceberg_pool_ended")


def _verify(archive: Path, output: Path, *more: str) -> list[str]:
    return ["verify", "--archive", str(archive), "--output", str(output), *more]


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def assert_exact_in_the_table(archive: Path, output: Path) -> None:
    expected = verify.expected_output(str(archive), PATTERN).rows
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_a_truncated_file_is_named_with_the_replay_that_mends_it_which_does(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, SPEC)
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=60)
    damaged = next(
        p for p in visible_files(resolve(str(output))) if not p.startswith("_quarantine/")
    )
    _truncate(output / damaged)
    capsys.readouterr()

    # verify, repair's plan and compact read the file: each names it, none changes anything.
    assert cli.main(_verify(archive, output)) == DamagedOutputError.exit_code
    line = _one_line(capsys.readouterr().err)
    assert f"output file {output / damaged} cannot be read" in line
    command = re.search(r"run `(tablecast replay [^`]+)`", line)
    assert command is not None, line
    day = damaged.split("/")[0].removeprefix("date=")
    assert f"--since {day}T00:00:00Z" in command.group(1)
    assert f"--archive {archive} --output {output}" in command.group(1)
    argv = repair_argv(archive, output, checkpoint, "--dry-run")
    assert cli.main(argv) == DamagedOutputError.exit_code
    assert f"output file {output / damaged} cannot be read" in _one_line(capsys.readouterr().err)
    assert cli.main(["compact", "--output", str(output), "--before", "2100-01-01"]) == 8
    assert f"{output / damaged} cannot be read" in _one_line(capsys.readouterr().err)

    # The command as printed mends it: the damaged name retired, its rows published again.
    assert cli.main(shlex.split(command.group(1))[1:]) == 0
    assert damaged not in visible_files(resolve(str(output)))
    assert cli.main(_verify(archive, output)) == 0
    assert "OK: the output is exactly the expected output" in capsys.readouterr().out
    assert_exact(archive, output)
    assert_follows_ledger(output)


def test_a_table_that_cannot_be_loaded_is_named_and_made_again_by_table_rebuild(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    write_capture(archive, SPEC)
    run_job(spark, archive, output, tmp_path / "ckpt", max_offsets_per_trigger=60)
    table = catalog_mod.catalog(catalog_mod.local_config(resolve(str(output)))).load_table(
        f"{catalog_mod.NAMESPACE}.{catalog_mod.TABLE_NAME}"
    )
    Path(table.metadata_location.removeprefix("file://")).unlink()
    capsys.readouterr()

    # Before: verify said OK while `tablecast table` and every reader failed.
    assert cli.main(_verify(archive, output)) == DamagedOutputError.exit_code
    line = _one_line(capsys.readouterr().err)
    assert "the Iceberg table of" in line and "cannot be loaded" in line
    assert f"run `tablecast table --output {output} --rebuild`" in line
    # Every command that opens the table says the same: `table` itself, `compact`.
    for argv in (["table"], ["compact", "--before", "2100-01-01"]):
        assert cli.main([*argv, "--output", str(output)]) == DamagedOutputError.exit_code
        assert "--rebuild` to make it again" in _one_line(capsys.readouterr().err)

    assert cli.main(["table", "--output", str(output), "--rebuild"]) == 0
    assert cli.main(_verify(archive, output)) == 0
    out = capsys.readouterr().out
    assert "table: tablecast.output: its current snapshot holds the" in out
    assert_exact(archive, output)
    assert_exact_in_the_table(archive, output)  # as any pyiceberg user reads it


def test_a_data_file_gone_from_under_the_table_is_named_with_its_replay(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    write_capture(archive, SPEC)
    run_job(spark, archive, output, tmp_path / "ckpt", max_offsets_per_trigger=60)
    lost = next(p for p in visible_files(resolve(str(output))) if not p.startswith("_quarantine/"))
    (output / lost).unlink()
    capsys.readouterr()

    assert cli.main(_verify(archive, output)) == DamagedOutputError.exit_code
    line = _one_line(capsys.readouterr().err)
    assert f"output file {output / lost} is gone, while the Iceberg table holds it" in line
    command = re.search(r"run `(tablecast replay [^`]+)`", line)
    assert command is not None, line
    assert cli.main(shlex.split(command.group(1))[1:]) == 0
    assert cli.main(_verify(archive, output)) == 0
    assert_exact(archive, output)
    assert_follows_ledger(output)


def test_verify_applies_the_integrity_the_ledger_records_and_shows_rows_readably(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    spec = CaptureSpec(
        topics=2, partitions=2, sessions=4, updates=30, faults=(Fault.SEQ_GAP,), seed=5
    )
    write_capture(archive, spec)
    run_job(spark, archive, output, tmp_path / "ckpt", integrity=IntegrityMode.RESYNC)
    capsys.readouterr()

    # Before: verify expected a strict run's output of a resync output, and said DIFFERENT.
    assert cli.main(_verify(archive, output)) == 0
    out = capsys.readouterr().out
    assert "rules: integrity resync" in out and "OK: the output is exactly" in out
    assert cli.main(_verify(archive, output, "--integrity", "strict")) == 64
    line = _one_line(capsys.readouterr().err)
    assert "--integrity strict differs from the live job's integrity resync" in line

    # Rows it lists read as rows, not as Python's reprs (one topic expected, two there).
    assert cli.main(_verify(archive, output, "--topic-pattern", "^sensor-0$")) == 1
    out = capsys.readouterr().out
    [sample, *_] = [line for line in out.splitlines() if line.startswith("  unexpected: ")]
    assert re.fullmatch(
        r"  unexpected: sensor-1:\d offset \d+ session \S+ seq \d+ \w+ at "
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z: row_id=\S+ value=\S+ status=\S+( \(deleted\))?",
        sample,
    ), sample
    assert "datetime.datetime(" not in out and "DIFFERENT" in out
