"""The compaction history: found by day, read by what a compaction or a recompute touches,
never by the days the job has run; records an older tablecast wrote flat read and moved."""

from __future__ import annotations

import posixpath
from datetime import date
from pathlib import Path

import pyarrow as pa
import pytest

from app.recompute.plan import group_blocks
from app.sink import rewrite as rewrite_mod
from app.sink.ledger import Ledger
from app.sink.visible import visible_files
from app.storage import Location, resolve
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.tools.generate import CaptureSpec
from tests.table.compaction_history import counting_reads, earlier_days, flat_path, flatten
from tests.table.helpers import (
    assert_exact,
    capture_rows,
    compaction_step_one,
    cuts,
    load_table,
    publish_batches,
)

SPEC = CaptureSpec(
    topics=1, partitions=2, sessions=6, updates=20, records_per_file=40, resync_every=8, seed=11
)
EVERY_DAY = date(2100, 1, 1)


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    return capture_rows(tmp_path_factory.mktemp("records"), SPEC)


def _published(expected: pa.Table, tmp_path: Path) -> Location:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 6))
    location = resolve(output)
    table_commit.catch_up(location)
    return location


def _flat_files(location: Location) -> list[str]:
    return sorted(
        i.base_name
        for i in location.list_dir(location.child(table_compact.RECORDS_DIR))
        if i.base_name.endswith(".json")
    )


def _pending(location: Location) -> list[str]:
    return [i.base_name for i in location.list_dir(location.child(table_compact.PENDING_DIR))]


def test_what_a_compaction_and_a_recompute_read_of_the_history_does_not_grow_with_the_days(
    expected: pa.Table, tmp_path: Path
) -> None:
    """With 120 earlier days merged (records of 200 inputs each), a compaction reads none
    of their records and asks after none of their files; the blocks a recompute of the
    output's own days looks up read only those days' records."""
    location = _published(expected, tmp_path)
    earlier = earlier_days(location, 120, inputs=200)
    compaction_step_one(location)  # moves the flat records into their days

    with counting_reads(location) as reads:
        report = table_compact.compact(location, before=EVERY_DAY)
    assert report.groups > 0
    assert reads.of_days(earlier) == []
    assert reads.records() == []  # nothing was pending: no record read at all
    history = table_compact.records(location)
    assert len(history) == len(earlier) + report.groups  # every earlier day's still kept
    assert_exact(expected, location.uri)

    days = {d for p in visible_files(location) if (d := _day(p)) is not None}
    grouped = group_blocks(Ledger(location).entries())
    with counting_reads(location) as reads:
        merged = table_compact.merged_blocks(location, grouped, days)
    assert reads.of_days(earlier) == []
    assert len(reads.records()) == report.groups  # the records of the recomputed days
    own = {r.output for r in history if r.day not in earlier}
    assert {m for m in merged if m.startswith("compact-")} == {
        posixpath.basename(o).removeprefix("part-").removesuffix(".parquet") for o in own
    }
    # Every day asked for: the whole history, as before.
    assert len(table_compact.merged_blocks(location)) == len(history) + len(grouped)


def _day(relative: str) -> date | None:
    from app.engine.writer import file_day

    return file_day(relative)


def test_records_an_older_tablecast_wrote_flat_are_read_and_moved_by_the_next_compaction(
    expected: pa.Table, tmp_path: Path
) -> None:
    location = _published(expected, tmp_path)
    assert table_compact.compact(location, before=EVERY_DAY).groups > 0
    history = table_compact.records(location)
    blocks = table_compact.merged_blocks(location)
    days = {date.fromisoformat(r.day) for r in history}
    flat = flatten(location)
    bytes_before = {p: location.read_bytes(p) for p in flat}
    # An older compaction that crashed before its rewrite record: its output never
    # appeared, every input is still there (here: a merged file).
    [first, *_] = history
    orphan = table_compact.CompactionRecord(
        first.day,
        (first.output,),
        posixpath.join(posixpath.dirname(first.output), "part-compact-never.parquet"),
        1,
        first.written_at,
    )
    location.write_bytes_atomic(flat_path(location, orphan), orphan.to_json())

    # Read as they are, by replay and correct, before any compaction moved them.
    assert table_compact.merged_blocks(location, days=days) == {
        **blocks,
        "compact-never": blocks[rewrite_mod.block_of(first.output)],  # through the merge
    }
    assert table_compact.compact(location, before=EVERY_DAY).groups == 0
    assert _flat_files(location) == []
    assert sorted(table_compact.records(location), key=lambda r: r.output) == sorted(
        history, key=lambda r: r.output
    )  # the orphan forgotten, every other one kept
    for path, data in bytes_before.items():
        record = table_compact.CompactionRecord.from_json(data)
        moved = location.child(table_compact.DAYS_DIR, record.day, posixpath.basename(path))
        assert location.read_bytes(moved) == data
    assert table_compact.merged_blocks(location, days=days) == blocks
    assert_exact(expected, location.uri)


class Crashed(Exception):
    pass


class CrashAt(table_compact.CompactionSteps):
    def __init__(self, step: str) -> None:
        self.step = step

    def moved(self) -> None:
        if self.step == "moved":
            raise Crashed("moved")

    def planned(self) -> None:
        if self.step == "planned":
            raise Crashed("planned")


def test_a_crash_while_moving_flat_records_is_finished_by_the_next_compaction(
    expected: pa.Table, tmp_path: Path
) -> None:
    location = _published(expected, tmp_path)
    sizes = [f.file_size_in_bytes for f in table_commit.data_files(load_table(location.uri))]
    table_compact.compact(location, before=EVERY_DAY, target_bytes=3 * max(sizes))
    blocks = table_compact.merged_blocks(location)
    flat = flatten(location)
    assert len(flat) > 1

    with pytest.raises(Crashed):
        table_compact.compact(location, before=EVERY_DAY, steps=CrashAt("moved"))
    # One record copied, not yet deleted: read twice, the same blocks.
    assert len(_flat_files(location)) == len(flat)
    assert len(table_compact.records(location)) == len(flat) + 1
    assert table_compact.merged_blocks(location) == blocks

    compaction_step_one(location)  # the next compaction's step 1
    assert _flat_files(location) == []
    assert len(table_compact.records(location)) == len(flat)
    assert table_compact.merged_blocks(location) == blocks
    assert_exact(expected, location.uri)


def test_a_compaction_that_crashed_before_its_rewrite_record_leaves_no_history(
    expected: pa.Table, tmp_path: Path
) -> None:
    """Its records are listed as pending first; the next compaction reads only those, and
    forgets them: nothing was merged."""
    location = _published(expected, tmp_path)
    with pytest.raises(Crashed):
        table_compact.compact(location, before=EVERY_DAY, steps=CrashAt("planned"))
    [pending] = _pending(location)
    named = location.read_bytes(location.child(table_compact.PENDING_DIR, pending))
    assert table_compact.records(location) and b"days/" in named

    compaction_step_one(location)
    assert table_compact.records(location) == [] and _pending(location) == []
    report = table_compact.compact(location, before=EVERY_DAY)
    assert len(table_compact.records(location)) == report.groups > 0
    assert _pending(location) == []  # carried out: nothing left pending
    assert_exact(expected, location.uri)
