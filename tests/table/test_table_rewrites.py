"""Replay, correct and repair change the table in one overwrite snapshot each (none when
nothing changed); an Iceberg reader polling snapshots during a correction sees the old rows
or the new, never both or neither."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

from app import cli
from app.recompute.correct import correct
from app.recompute.replay import replay
from app.sink.ledger import Ledger
from app.sink.rewrite import Retirement
from app.storage import resolve
from app.table import commit as table_commit
from app.table.catalog import threads_released
from app.tools import verify
from tests.spark.faulty_version import FAULTY, PATTERN, SPEC, run_faulty, run_fixed
from tests.spark.helpers import (
    assert_exact,
    lose_the_checkpoint,
    repair_argv,
    run_job,
    write_capture,
)
from tests.table.helpers import (
    assert_follows_ledger,
    assert_no_snapshot_holds_a_replaced_file,
    load_table,
    table_files,
    table_rows,
)
from tests.table.planned_reader import PlannedReader, ReadPlannedAfterCommit


def _assert_table_is_the_output(output: Path) -> None:
    comparison = verify.compare(verify.read_output(str(output)), table_rows(output))
    assert comparison.ok, comparison.report()


def _new_snapshots(output: Path, before: set[int]) -> list[Any]:
    return [s for s in load_table(output).snapshots() if s.snapshot_id not in before]


def _data_changes(snapshots: list[Any]) -> list[Any]:
    """The snapshots that added or removed a data file."""
    return [
        s
        for s in snapshots
        if int(s.summary.get("added-data-files") or 0)
        + int(s.summary.get("deleted-data-files") or 0)
    ]


def _snapshot_ids(output: Path) -> set[int]:
    return {s.snapshot_id for s in load_table(output).snapshots()}


def _keys(rows: Any) -> set[str]:
    keys = pc.binary_join_element_wise(
        rows["topic"],
        pc.cast(rows["partition"], "string"),
        pc.cast(rows["offset"], "string"),
        rows["row_id"],
        ":",
    )
    return set(keys.to_pylist())


class SnapshotPoller(threading.Thread):
    """An Iceberg reader during a correction: each scan of the newest snapshot, whole."""

    def __init__(self, output: Path) -> None:
        super().__init__(daemon=True)
        self.output = output
        self.stop = threading.Event()
        self.reads: list[tuple[int, int, int]] = []  # (snapshot, rows, duplicated rows)
        self.keys: list[set[str]] = []  # each read's rows
        self.errors: list[BaseException] = []  # the test asserts there are none

    def run(self) -> None:
        try:
            self._poll()
        except BaseException as exc:
            self.errors.append(exc)

    def _poll(self) -> None:
        with threads_released():
            table = load_table(self.output)
            while not self.stop.is_set():
                table = table.refresh()
                snapshot = table.current_snapshot()
                rows = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
                keys = pc.binary_join_element_wise(
                    rows["topic"],
                    pc.cast(rows["partition"], "string"),
                    pc.cast(rows["offset"], "string"),
                    rows["row_id"],
                    ":",
                )
                self.reads.append(
                    (snapshot.snapshot_id, len(rows), len(rows) - len(pc.unique(keys)))
                )
                self.keys.append(set(keys.to_pylist()))


@pytest.mark.spark
def test_a_correction_is_one_overwrite_snapshot_and_a_polling_reader_sees_old_or_new(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, archive, out = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    write_capture(full, SPEC)
    ckpt = tmp_path / "ckpt"
    run_faulty(spark, full, archive, out, ckpt, monkeypatch, below=180, max_offsets=150)
    run_fixed(spark, full, archive, out, ckpt, monkeypatch, max_offsets=150)
    faulty = _keys(table_rows(out))
    before = _snapshot_ids(out)

    poller = SnapshotPoller(out)
    planned = PlannedReader(out)
    poller.start()
    try:
        correct(
            spark,
            str(archive),
            str(out),
            version=FAULTY,
            steps=ReadPlannedAfterCommit(planned),
            retirement=Retirement(grace_s=2.0),  # beside a scan of a few small files
        )
    finally:
        poller.stop.set()
        poller.join()
        planned.join()

    assert_exact(archive, out)
    comparison = verify.compare(verify.expected_output(str(archive), PATTERN).rows, table_rows(out))
    assert comparison.ok, comparison.report()
    [snapshot] = _data_changes(_new_snapshots(out, before))
    assert snapshot.summary.operation.value == "overwrite"
    assert snapshot.summary.additional_properties[table_commit.KIND_KEY] == "correction"
    corrected = _keys(table_rows(out))
    assert corrected > faulty  # the correction restores the rows the faulty version dropped
    assert poller.errors == [] and planned.errors == []
    assert poller.reads and all(dupes == 0 for _, _, dupes in poller.reads)
    # The query planned on the snapshot before the correction reads it whole after the
    # commit: its files are retired only once the grace has run out.
    assert planned.rows is not None and _keys(planned.rows) == faulty
    # Every read is the old snapshot's rows or the new one's, whole: the correction
    # publishes new names, commits, and only then retires the old files.
    assert all(keys in (faulty, corrected) for keys in poller.keys)
    assert_follows_ledger(out)
    assert_no_snapshot_holds_a_replaced_file(out)


@pytest.mark.spark
def test_a_replay_of_the_same_rows_commits_nothing(spark: Any, tmp_path: Path) -> None:
    archive, live = tmp_path / "archive", tmp_path / "live"
    write_capture(archive, SPEC)
    run_job(spark, archive, live, tmp_path / "ckpt", max_offsets_per_trigger=150)
    before = _snapshot_ids(live)
    files = table_files(live)
    report = replay(spark, str(archive), str(live), 0, 4_102_444_800_000, topic_pattern=PATTERN)
    assert report.record.published and not report.record.removed
    # The same code recomputed the same bytes: every file kept, nothing for the table.
    assert _new_snapshots(live, before) == []
    assert table_files(live) == files
    _assert_table_is_the_output(live)
    assert_exact(archive, live)
    assert_follows_ledger(live)


@pytest.mark.spark
def test_a_repair_changes_the_table_in_one_snapshot_and_holds_its_ledger_entry(
    spark: Any, tmp_path: Path
) -> None:
    archive, output, checkpoint = lose_the_checkpoint(spark, tmp_path)
    before = _snapshot_ids(output)

    assert cli.main(repair_argv(archive, output, checkpoint, "--yes")) == 0
    [snapshot] = _data_changes(_new_snapshots(output, before))
    head = Ledger(resolve(str(output))).head()
    assert head is not None and head.kind == "repair"
    assert snapshot.summary.additional_properties[table_commit.KIND_KEY] == "repair"
    # The rewrite's overwrite, then the repair's entry as the table's position.
    held = table_commit.position(load_table(output))
    assert held is not None and held.entry == head.number
    _assert_table_is_the_output(output)
    # The batches' snapshots held the files the repair replaced: none is offered any more,
    # so time travel never meets a file the grace's end deletes.
    assert_no_snapshot_holds_a_replaced_file(output)
    assert snapshot.snapshot_id in _snapshot_ids(output)

    run_job(spark, archive, output, checkpoint)
    assert_exact(archive, output)
    _assert_table_is_the_output(output)
    assert table_commit.position(load_table(output)) is not None
