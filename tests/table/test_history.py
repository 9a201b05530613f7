"""The table's bounded history: which snapshots stay, that every one offered reads, and
that the files no snapshot references go after the grace, never before.

Without Spark: batches published as the sink publishes them
(:func:`tests.table.helpers.publish_batches`), committed by the live job's
:class:`~app.table.live.LiveTable`, rewritten by a compaction.
"""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.contract.offsets import TopicPartition
from app.sink import fencing
from app.sink.fold import LedgerFold
from app.sink.ledger import Ledger
from app.storage import resolve
from app.table import catalog as catalog_mod
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.table.history import (
    ENTRY_KEY,
    PLANNING_GRACE_S,
    MetadataFiles,
    TableHistory,
    metadata_grace,
)
from app.table.live import LiveTable, TableSettings
from app.tools import verify
from tests.spark.helpers import write_capture
from tests.table.helpers import (
    assert_every_snapshot_reads,
    assert_follows_ledger,
    cuts,
    load_table,
    publish_batches,
    table_rows,
)

HOUR_MS = 3_600_000
ENTRY = ENTRY_KEY


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    from tests.sink.commit_steps_harness import SPEC

    archive = tmp_path_factory.mktemp("history") / "archive"
    write_capture(archive, SPEC)
    return verify.expected_output(str(archive), "^sensor-.+").rows


def _metadata(stamps: list[int], current: int | None = None, tags: dict[str, int] | None = None):  # type: ignore[no-untyped-def]
    """Table metadata with one snapshot per timestamp (ms), each naming a ledger entry."""
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
    from pyiceberg.types import LongType, NestedField

    base = new_table_metadata(
        Schema(NestedField(1, "a", LongType())),
        UNPARTITIONED_PARTITION_SPEC,
        UNSORTED_SORT_ORDER,
        "file:///t",
        {},
    )
    snapshots = [
        Snapshot.model_validate(  # by Iceberg's field names, as pyiceberg's models take them
            {
                "snapshot-id": n + 1,
                "parent-snapshot-id": n or None,
                "sequence-number": n + 1,
                "timestamp-ms": stamp,
                "manifest-list": f"/t/snap-{n}.avro",
                "summary": Summary(Operation.APPEND, **{ENTRY: str(n)}),
            }
        )
        for n, stamp in enumerate(stamps)
    ]
    head = current if current is not None else len(stamps)
    refs = {
        "main": SnapshotRef.model_validate({"snapshot-id": head, "type": SnapshotRefType.BRANCH})
    }
    for name, snapshot in (tags or {}).items():
        refs[name] = SnapshotRef.model_validate(
            {"snapshot-id": snapshot, "type": SnapshotRefType.TAG}
        )
    return base.model_copy(
        update={"snapshots": snapshots, "current_snapshot_id": head, "refs": refs}
    )


def test_the_newest_then_one_a_minute_for_an_hour_then_one_an_hour_back_to_the_history() -> None:
    now = 1000 * HOUR_MS
    # A snapshot every 15 seconds for a day and a half (a fast trigger), the newest now.
    stamps = [now - k * 15_000 for k in range(4 * 60 * 36, -1, -1)]
    metadata = _metadata(stamps)
    history = TableHistory(keep_s=24 * 3600)
    expired = set(history.expiring(metadata, now_ms=now))
    kept = sorted(
        (s for s in metadata.snapshots if s.snapshot_id not in expired),
        key=lambda s: s.timestamp_ms,
    )
    assert [s.snapshot_id for s in kept[-60:]] == [s.snapshot_id for s in metadata.snapshots[-60:]]
    older = [s.timestamp_ms for s in kept[:-60]]
    minute = [t for t in older if now - t <= HOUR_MS]
    hourly = [t for t in older if now - t > HOUR_MS]
    assert len({t // 60_000 for t in minute}) == len(minute) >= 44  # one a minute
    assert len({t // HOUR_MS for t in hourly}) == len(hourly) == 23  # one an hour
    assert all(now - t <= 24 * HOUR_MS for t in hourly)  # back to the history, no further
    assert len(kept) <= 60 + 60 + 24
    # Expired, they leave nothing more to expire at once: the choice is stable.
    reduced = metadata.model_copy(update={"snapshots": kept})
    assert history.expiring(reduced, now_ms=now) == []


def test_at_a_minutes_trigger_every_batch_of_the_last_hour_stays() -> None:
    now = 1000 * HOUR_MS
    stamps = [now - k * 60_000 for k in range(60 * 48, -1, -1)]  # two days, one a minute
    metadata = _metadata(stamps)
    expired = set(TableHistory(keep_s=5 * 24 * 3600).expiring(metadata, now_ms=now))
    ages = sorted(now - s.timestamp_ms for s in metadata.snapshots if s.snapshot_id not in expired)
    assert ages[:61] == [k * 60_000 for k in range(61)]
    assert len(ages) == 61 + 47


def test_fewer_snapshots_than_the_newest_kept_are_all_kept() -> None:
    now = 1000 * HOUR_MS
    for count in (1, 30, 59, 60):  # within one minute
        metadata = _metadata([now - k * 100 for k in range(count, 0, -1)])
        assert TableHistory().expiring(metadata, now_ms=now) == []
    metadata = _metadata([now - k * 100 for k in range(61, 0, -1)])
    assert TableHistory().expiring(metadata, now_ms=now) == [1]  # the oldest of the minute


def test_the_current_snapshot_its_position_and_tags_never_expire() -> None:
    now = 1000 * HOUR_MS
    stamps = [now - 50 * HOUR_MS, now - 49 * HOUR_MS, now - 48 * HOUR_MS]
    metadata = _metadata(stamps, tags={"t": 1})
    assert TableHistory(keep_s=3600, newest=1).expiring(metadata, now_ms=now) == [2]
    # A current snapshot that names no entry (a rewrite before such snapshots did): the
    # newest one that does stays with it.
    from pyiceberg.table.snapshots import Operation, Summary

    rewrite = metadata.snapshots[2].model_copy(update={"summary": Summary(Operation.OVERWRITE)})
    metadata = metadata.model_copy(update={"snapshots": [*metadata.snapshots[:2], rewrite]})
    assert TableHistory(keep_s=0, newest=1).expiring(metadata, now_ms=now) == []


def _live(settings: TableSettings | None = None) -> LiveTable:
    return LiveTable(settings or TableSettings())


def test_each_batch_commit_expires_what_it_makes_old_in_the_same_commit(
    expected: pa.Table, tmp_path: Path
) -> None:
    output = str(tmp_path / "out")
    location = resolve(output)
    table = _live(TableSettings(history_s=0.0))
    publish_batches(output, expected, cuts(expected, 12))
    for number in range(12):
        table_commit.catch_up(location, below=number + 1, history=table.history)
    current = load_table(output)
    assert [s.snapshot_id for s in current.snapshots()] == [current.current_snapshot().snapshot_id]
    # One metadata file per commit, of which the table keeps the last ten besides its own.
    metadata = list((tmp_path / "out/_iceberg/table/metadata").glob("*.metadata.json"))
    assert len(metadata) == 11
    assert_follows_ledger(output)
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_files_of_expired_snapshots_go_after_the_grace_never_before(
    expected: pa.Table, tmp_path: Path
) -> None:
    output = str(tmp_path / "out")
    location = resolve(output)
    folder = tmp_path / "out/_iceberg/table/metadata"
    table = _live(TableSettings(history_s=0.0, retire_grace_s=120.0))
    clock = table.files.clock = Clock()
    publish_batches(output, expected, cuts(expected, 12))
    fences: list[str] = []
    for number in range(12):
        # What a query planned on the snapshot current before this commit opens: its
        # manifest list and manifests, which must stay through the grace.
        planned = [] if number == 0 else _files_of(load_table(output), None)
        table.catch_up(location, below=number + 1)
        clock.now += 10  # ten seconds a batch
        table.tidy(location, lambda: fences.append("checked"), lambda n: None)
        assert all(os.path.exists(p) for p in planned)  # within the grace: still there
    avro = {p.name for p in folder.glob("*.avro")}
    clock.now += 120
    deleted = table.tidy(location, lambda: fences.append("checked"), lambda n: None)
    assert deleted > 0 and fences  # the fence checked before any delete
    left = {p.name for p in folder.glob("*.avro")}
    assert left < avro
    # What is left is what the table references: nothing more, nothing less.
    current = load_table(output)
    assert {os.path.basename(p) for p in _files_of(current, None)} == left
    assert_every_snapshot_reads(output)
    assert table.files.waiting == 0


def test_a_query_planned_on_an_expiring_snapshot_plans_in_the_metadata_grace_and_reads_after_it(
    expected: pa.Table, tmp_path: Path
) -> None:
    """A query needs a snapshot's manifest list and manifests to plan, its data files to
    read: the first stay 30 seconds after the snapshot expires (however long the retire
    grace), the data files stay (no expiry deletes them)."""
    assert metadata_grace(120.0) == PLANNING_GRACE_S == 30.0
    assert metadata_grace(10.0) == 10.0  # a shorter retire grace: queries are that short
    output = str(tmp_path / "out")
    location = resolve(output)
    table = _live(TableSettings(history_s=0.0, retire_grace_s=120.0))
    clock = table.files.clock = Clock()
    publish_batches(output, expected, cuts(expected, 12))
    table.catch_up(location, below=6)
    loaded = load_table(output)  # a query loads the table: six batches' snapshot
    planned = list(loaded.scan().plan_files())  # another one has planned on it too
    its_metadata = _files_of(loaded, None)
    table.catch_up(location)  # six more batches: that snapshot expires
    assert [s.snapshot_id for s in load_table(output).snapshots()] != [
        loaded.current_snapshot().snapshot_id
    ]
    clock.now += PLANNING_GRACE_S - 1
    assert table.tidy(location, lambda: None, lambda n: None) == 0
    late = list(loaded.scan().plan_files())  # within the grace, the first query plans
    assert sorted(t.file.file_path for t in late) == sorted(t.file.file_path for t in planned)
    clock.now += 2
    assert table.tidy(location, lambda: None, lambda n: None) > 0
    # Gone at the metadata's grace, not the retire grace's 120 s: its manifest list, and
    # each of its manifests that no later snapshot carries.
    still = set(_files_of(load_table(output), None))
    assert not os.path.exists(its_metadata[0])
    assert [p for p in its_metadata if os.path.exists(p)] == [p for p in its_metadata if p in still]
    # Both queries read what they planned: six batches' rows, whole.
    read = pa.concat_tables(
        pq.read_table(t.file.file_path.removeprefix("file://")) for t in planned
    )
    six = cuts(expected, 12)[5]
    keys = ("topic", "partition", "offset")
    wanted = sorted(
        k
        for k in zip(*(expected[c].to_pylist() for c in keys), strict=True)
        if k[2] < six[TopicPartition(k[0], k[1])]
    )
    assert sorted(zip(*(read[c].to_pylist() for c in keys), strict=True)) == wanted != []
    assert_every_snapshot_reads(output)


def _files_of(table: object, snapshot: object | None) -> list[str]:
    """A snapshot's manifest list and manifests (the current one's by default)."""
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    assert isinstance(table, Table)
    snapshot = table.current_snapshot() if snapshot is None else snapshot
    assert isinstance(snapshot, Snapshot)
    return [snapshot.manifest_list, *(m.manifest_path for m in snapshot.manifests(table.io))]


def test_files_an_earlier_run_left_unreferenced_are_found_by_the_folders_listing(
    expected: pa.Table, tmp_path: Path
) -> None:
    output = str(tmp_path / "out")
    location = resolve(output)
    publish_batches(output, expected, cuts(expected, 6))
    table_commit.catch_up(location)
    folder = tmp_path / "out/_iceberg/table/metadata"
    current = load_table(output).current_snapshot()
    for number in range(3):  # a crashed run's leftovers, from before the current snapshot
        stray = folder / f"snap-{number}-0-stray.avro"
        stray.write_bytes(b"x")
        old = current.timestamp_ms / 1000 - 61
        os.utime(stray, (old, old))
    young = folder / "snap-9-0-young.avro"  # a commit still under way elsewhere
    young.write_bytes(b"x")
    files = MetadataFiles(grace_s=60.0)
    clock = files.clock = Clock()
    files.note(location, load_table(output))
    clock.now += 61
    assert files.delete(location, load_table(output), lambda: None) == 3
    assert not list(folder.glob("*stray*")) and young.exists()
    assert_every_snapshot_reads(output)


def test_a_compaction_expires_the_snapshots_that_hold_its_inputs(
    expected: pa.Table, tmp_path: Path
) -> None:
    """The snapshots before a rewrite that hold a file it replaces are expired with its
    commit (their files go after the grace): no offered snapshot names a gone file."""
    output = str(tmp_path / "out")
    location = resolve(output)
    publish_batches(output, expected, cuts(expected, 12))
    table_commit.catch_up(location)
    assert len(load_table(output).snapshots()) == 12
    table_compact.compact(location, before=date(2100, 1, 1))  # the grace: 0 in tests
    table = load_table(output)
    [current] = table.snapshots()  # every batch's snapshot held an input
    props = current.summary.additional_properties
    assert props[table_commit.KIND_KEY] == "compaction" and props[ENTRY] == "11"
    assert_follows_ledger(output)
    assert table_commit.catch_up(location) == 0  # nothing lost: the position is carried
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()


def test_a_table_behind_the_fold_takes_the_visible_files_at_the_head(
    expected: pa.Table, tmp_path: Path
) -> None:
    """A table made after the ledger was folded, or left behind it, cannot commit the
    folded entries one by one: it takes what is visible in one snapshot at the head."""
    output = str(tmp_path / "out")
    location = resolve(output)
    fence = fencing.claim(location, fencing.new_writer("run", "/ckpt", 1.0))
    publish_batches(output, expected, cuts(expected, 40), fence)
    LedgerFold(Ledger(location)).fold(fence, 0.0)
    assert Ledger(location).fold_head() is not None
    assert table_commit.catch_up(location) == 1
    table = load_table(output)
    [snapshot] = table.snapshots()
    assert snapshot.summary.additional_properties[table_commit.KIND_KEY] == "adopt"
    assert_follows_ledger(output)
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()


def test_a_table_made_before_the_history_properties_takes_them_once(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    config = catalog_mod.local_config(location)
    table = catalog_mod.open_table(location, config)
    with table.transaction() as transaction:  # as an older table was made
        transaction.remove_properties(*catalog_mod.HISTORY_PROPERTIES)
    assert not set(catalog_mod.HISTORY_PROPERTIES) & set(load_table(location.path).properties)
    reopened = catalog_mod.open_table(location, config)
    for key, value in catalog_mod.HISTORY_PROPERTIES.items():
        assert reopened.properties[key] == value
    again = catalog_mod.open_table(location, config)
    assert again.metadata_location == reopened.metadata_location  # no commit more


def test_a_commits_manifest_list_does_not_grow_with_the_batches(tmp_path: Path) -> None:
    """Each batch adds a manifest; once a hundred accumulate they are merged, so however many
    batches ran, a snapshot's manifest list (what a reader and the next commit read) stays
    under a hundred and one manifests."""
    from app.tools.generate import CaptureSpec

    archive = tmp_path / "archive"
    write_capture(
        archive,
        CaptureSpec(topics=1, partitions=1, sessions=4, updates=80, resync_every=20, seed=3),
    )
    rows = verify.expected_output(str(archive), "^sensor-.+").rows
    output = str(tmp_path / "out")
    location = resolve(output)
    batches = 130
    publish_batches(output, rows, cuts(rows, batches))
    table = _live()
    counts = []
    for number in range(batches):
        table.catch_up(location, below=number + 1)
        current = load_table(output)
        counts.append(len(current.current_snapshot().manifests(current.io)))
    assert counts[:99] == list(range(1, 100))  # a manifest a batch, then merged
    # The hundredth batch's commit merges them into one; the next batches add theirs to it.
    assert counts[99:] == list(range(1, batches - 98)), counts[95:]
    assert_follows_ledger(output)
    comparison = verify.compare(rows, table_rows(output))
    assert comparison.ok, comparison.report()
