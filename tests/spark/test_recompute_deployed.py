"""Replay and correct over what the deployed job makes: days its compaction merged, and
ranges a repair cut short; and what they refuse, refused before any work."""

from __future__ import annotations

import re
import time
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from app import cli
from app.cli import rewrites as cli_rewrites
from app.cli import run as cli_run
from app.cli import tools as cli_tools
from app.errors import OutputStateError
from app.recompute import plan as plan_mod
from app.recompute.correct import correct
from app.recompute.replay import replay
from app.sink import rewrite as rewrite_mod
from app.sink import rewriter as rewriter_mod
from app.sink.ledger import Ledger
from app.sink.visible import visible_files
from app.storage import resolve
from app.table import compact as table_compact
from app.tools import verify
from tests.spark.faulty_version import FAULTY, PATTERN, SPEC, run_faulty, run_fixed
from tests.spark.helpers import (
    assert_exact,
    file_digests,
    lose_the_checkpoint,
    repair_argv,
    row_keys,
    run_job,
)
from tests.spark.helpers import write_capture as capture
from tests.table.compaction_history import counting_reads, earlier_days, flatten
from tests.table.helpers import assert_follows_ledger, compaction_step_one, table_rows

EVERYTHING = (0, 4_102_444_800_000)  # 2100-01-01: every record
EVERY_DAY = date(2100, 1, 1)

pytestmark = pytest.mark.usefixtures("iceberg_pool_ended")


def _row_counts(output: Path) -> tuple[int, int]:
    keys = row_keys(verify.read_output(str(output)))
    return len(keys), len(pc.unique(keys))


def _assert_exact_for_every_reader(archive: Path, output: Path) -> None:
    assert_exact(archive, output)
    expected = verify.expected_output(str(archive), PATTERN).rows
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()
    assert_follows_ledger(output)


def test_a_replay_over_compacted_days_keeps_the_merged_files_it_recomputes_identically(
    spark: Any, tmp_path: Path
) -> None:
    archive, output = tmp_path / "archive", tmp_path / "out"
    capture(archive, SPEC)
    run_job(spark, archive, output, tmp_path / "ckpt", max_offsets_per_trigger=150)
    assert table_compact.compact(resolve(str(output)), before=EVERY_DAY).groups > 0
    before = file_digests(output)
    assert all("part-compact-" in p for p in before if not p.startswith("_quarantine/"))

    # Before: "recomputing a compacted day is not supported", after all the work.
    report = replay(spark, str(archive), str(output), *EVERYTHING, topic_pattern=PATTERN)
    assert file_digests(output) == before  # the same rows: the merged files kept as they are
    record = report.record
    assert record.kept and not record.rewritten and not record.removed
    assert {p for p in record.kept if not p.startswith("_quarantine/")} == {
        p for p in before if not p.startswith("_quarantine/")
    }
    _assert_exact_for_every_reader(archive, output)


def test_a_replay_reads_flat_records_and_then_only_the_history_of_its_own_days(
    spark: Any, tmp_path: Path
) -> None:
    """Records as an older tablecast wrote them (flat) keep a replay over compacted days
    exact; once the next compaction moved them, a replay reads none of the records of a
    year of earlier days it does not recompute."""
    archive, output = tmp_path / "archive", tmp_path / "out"
    capture(archive, SPEC)
    run_job(spark, archive, output, tmp_path / "ckpt", max_offsets_per_trigger=150)
    location = resolve(str(output))
    assert table_compact.compact(location, before=EVERY_DAY).groups > 0
    before = file_digests(output)
    flatten(location)
    earlier = earlier_days(location, 365, inputs=100)

    # A name the replay found merged nowhere would be published beside the merged file.
    first = replay(spark, str(archive), str(output), *EVERYTHING, topic_pattern=PATTERN)
    assert file_digests(output) == before
    assert first.record.kept and not first.record.rewritten and not first.record.removed

    compaction_step_one(location)  # the next compaction's step 1 moves them
    with counting_reads(location) as reads:
        again = replay(spark, str(archive), str(output), *EVERYTHING, topic_pattern=PATTERN)
    assert reads.of_days(earlier) == []
    assert reads.records()  # its own days' records were read
    assert file_digests(output) == before
    assert again.record.kept == first.record.kept and not again.record.rewritten
    _assert_exact_for_every_reader(archive, output)


def test_a_correction_over_compacted_days_rewrites_the_merged_files_exactly(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, archive, output = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    ckpt = tmp_path / "ckpt"
    capture(full, SPEC)
    run_faulty(spark, full, archive, output, ckpt, monkeypatch, below=180, max_offsets=150)
    run_fixed(spark, full, archive, output, ckpt, monkeypatch, max_offsets=150)
    location = resolve(str(output))
    assert table_compact.compact(location, before=EVERY_DAY).groups > 0
    merged = {p for p in visible_files(location) if "part-compact-" in p}
    faulty = verify.compare(
        verify.expected_output(str(archive), PATTERN).rows, verify.read_output(str(output))
    )
    assert faulty.missing > 0  # the faulty version's loss, inside merged files

    report = correct(spark, str(archive), str(output), version=FAULTY)
    record = report.record
    # The merged files holding the faulty ranges were written again under new names.
    assert record.rewritten and set(record.removed) <= merged
    assert all(
        "part-compact-" in p and "~" in p
        for p in record.rewritten
        if not p.startswith("_quarantine/")
    )
    assert not set(record.removed) & set(visible_files(location))
    rows, distinct = _row_counts(output)
    assert rows == distinct  # no row twice for a plain reader once the command is done
    _assert_exact_for_every_reader(archive, output)
    # Again: nothing changes.
    again = correct(spark, str(archive), str(output), version=FAULTY)
    assert not again.record.rewritten and not again.record.removed
    _assert_exact_for_every_reader(archive, output)


def test_a_compaction_started_while_a_correction_stages_refuses_naming_it(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before its rewrite's record exists (its tasks have run, nothing is recorded yet), a
    correction holds the rewriter claim: a compaction refuses in one line naming it."""
    full, archive, output = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    ckpt = tmp_path / "ckpt"
    capture(full, SPEC)
    run_faulty(spark, full, archive, output, ckpt, monkeypatch, below=180, max_offsets=150)
    run_fixed(spark, full, archive, output, ckpt, monkeypatch, max_offsets=150)
    monkeypatch.setattr(rewriter_mod, "DEFAULT_LEASE_S", 1.0)
    location = resolve(str(output))
    beside: list[str] = []

    def progress(done: int, total: int) -> None:
        if done == total and not beside:  # the tasks' files staged, no record yet
            assert not rewrite_mod.open_rewrites(location)
            try:
                table_compact.compact(location, before=EVERY_DAY)
            except OutputStateError as exc:
                beside.append(str(exc))
            else:
                beside.append("compacted beside the correction")

    correct(spark, str(archive), str(output), version=FAULTY, progress=progress)
    [refused] = beside
    assert "is being rewritten by `tablecast correct` on host" in refused, refused
    assert "\n" not in refused and "lease runs out 1 s after its last renewal" in refused
    _assert_exact_for_every_reader(archive, output)
    # The correction ended: the compaction runs.
    assert table_compact.compact(location, before=EVERY_DAY).groups > 0
    _assert_exact_for_every_reader(archive, output)


def test_a_replay_after_a_repair_recomputes_the_ranges_it_cut_to_the_rows_it_left(
    spark: Any, tmp_path: Path
) -> None:
    archive, output, checkpoint = lose_the_checkpoint(spark, tmp_path)
    assert cli.main(repair_argv(archive, output, checkpoint, "--yes")) == 0
    run_job(spark, archive, output, checkpoint)
    every = plan_mod.published_ranges(Ledger(resolve(str(output))).entries())
    assert any(r.kept for r in every), "the repair should keep some adopted snapshot's rows"
    before = file_digests(output)

    # Before: "cut short by the repair ... recomputing the range would lose those rows".
    report = replay(spark, str(archive), str(output), *EVERYTHING, topic_pattern="^sensor-.+")
    # The cut ranges recomputed to exactly what the repair left of them: nothing changes.
    assert file_digests(output) == before
    assert report.record.kept and not report.record.rewritten and not report.record.removed
    assert_exact(archive, output)
    assert_follows_ledger(output)


def test_what_a_recompute_must_refuse_is_refused_before_spark_starts(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.engine.machine import IntegrityMode

    archive, output = tmp_path / "archive", tmp_path / "out"
    capture(archive, SPEC)
    run_job(spark, archive, output, tmp_path / "ckpt", integrity=IntegrityMode.RESYNC)
    started: list[str] = []

    def the_session(*_: Any, **__: Any) -> Any:  # the shared session; says when asked for
        started.append("spark")
        return spark

    for module in (cli_rewrites, cli_run, cli_tools):  # every command that starts Spark
        monkeypatch.setattr(module, "spark_session", the_session)
    common = ["--archive", str(archive), "--output", str(output)]
    window = ["--since", "2000-01-01T00:00:00Z", "--until", "2100-01-01T00:00:00Z"]
    capsys.readouterr()

    assert cli.main(["replay", *common, *window, "--integrity", "strict"]) == 64
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "leave --integrity out" in err
    assert cli.main(["correct", *common, "--version", "0.0.1"]) == 64
    assert "no batch of" in capsys.readouterr().err
    # Another process's rewrite under a running lease: refused before anything, and left.
    location = resolve(str(output))
    record = location.child(rewrite_mod.REWRITES_DIR, "elsewhere.json")
    running = rewrite_mod.Rewrite("elsewhere", (), (), owner="other", lease_until=time.time() + 600)
    location.write_bytes_atomic(record, running.to_json())
    assert cli.main(["replay", *common, *window]) == OutputStateError.exit_code
    assert "rewrite elsewhere of" in capsys.readouterr().err
    assert location.exists(record)
    location.delete_file(record)
    assert started == []  # refused before Spark started, and before any rewrite was touched

    before = file_digests(output)
    assert cli.main(["replay", *common, *window, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "sensor-0:0: read offsets 0 to" in out and "dry run: nothing was changed" in out
    assert started == [] and file_digests(output) == before

    assert cli.main(["replay", *common, *window]) == 0
    out = capsys.readouterr().out
    # A recompute that changed nothing says so (it said "N files replaced").
    assert re.search(r"0 files rewritten under new names, \d+ identical \(kept\), 0 old", out)
    assert started == ["spark"]
