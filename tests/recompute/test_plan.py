"""Which ranges a recompute writes, and where each partition is read from."""

from __future__ import annotations

import pyarrow as pa
import pytest

from app.contract.offsets import TopicPartition
from app.engine.segments import OFFSETS_PER_FILE
from app.errors import ConfigurationError
from app.recompute.correct import matcher
from app.recompute.plan import RangeRows, grid_ranges, published_ranges, select_entries, works
from app.recompute.run import CORRECTION, RecomputeRecord
from app.sink.ledger import BATCH, REPAIR, LedgerEntry, ProcessorRecord
from app.sources.archive import ArchiveFile, ArchiveIndex

A = TopicPartition("sensor-a", 0)
B = TopicPartition("sensor-a", 1)


def _batch(
    number: int, start: dict[TopicPartition, int], end: dict[TopicPartition, int]
) -> LedgerEntry:
    return LedgerEntry(number=number, kind=BATCH, end=end, start=start)


def _index(latest: dict[TopicPartition, int]) -> ArchiveIndex:
    index = ArchiveIndex()
    for tp, end in latest.items():
        index.files[tp] = [ArchiveFile(tp, 0, end, f"/archive/{tp.partition}/0-{end}.parquet")]
    return index


def test_ranges_follow_the_batches_and_a_repair_starts_a_new_epoch() -> None:
    entries = [
        _batch(0, {A: 0, B: 0}, {A: 100, B: 50}),
        _batch(1, {}, {A: 200, B: 50}),  # B had nothing: no range
        LedgerEntry(number=2, kind=REPAIR, end={A: 150, B: 50}),
        _batch(3, {}, {A: 260, B: 90}),
    ]
    found = [(r.tp, r.start, r.end, r.epoch, r.limit) for r in published_ranges(entries)]
    assert found == [
        (A, 0, 100, 0, 150),
        (B, 0, 50, 0, 50),
        (A, 100, 200, 0, 150),  # cut at the repair's restart offset
        (A, 150, 260, 1, None),
        (B, 50, 90, 1, None),
    ]


def test_a_partition_is_read_from_its_epochs_start_up_to_the_last_chosen_range() -> None:
    entries = [
        _batch(0, {A: 0}, {A: 100}),
        _batch(1, {}, {A: 200}),
        LedgerEntry(number=2, kind=REPAIR, end={A: 150}),
        _batch(3, {}, {A: 260}),
        _batch(4, {}, {A: 300}),
    ]
    every = published_ranges(entries)
    second = [r for r in every if r.start == 100]
    (work,) = works(second, every, _index({A: 300}))
    assert (work.begin, work.read_end, work.ranges) == (0, 150, ((100, 200),))
    last = [r for r in every if r.start == 260]
    (work,) = works(last, every, _index({A: 300}))
    assert (work.begin, work.read_end, work.ranges) == (150, 300, ((260, 300),))


def test_ranges_the_archive_does_not_hold_yet_are_refused() -> None:
    every = published_ranges([_batch(0, {A: 0}, {A: 100})])
    with pytest.raises(
        ConfigurationError, match="holds topic sensor-a partition 0 only up to offset 79"
    ):
        works(every, every, _index({A: 80}))


def test_a_range_a_repair_cut_reads_on_to_the_snapshots_it_kept_and_owns_their_rows() -> None:
    entries = [
        _batch(0, {A: 0}, {A: 100}),
        LedgerEntry(number=1, kind=REPAIR, end={A: 60}, adopt={"s1": 70, "s2": 65}),
        _batch(2, {A: 60}, {A: 120}),
    ]
    every = published_ranges(entries)
    old, new = every
    (work,) = works([old], every, _index({A: 120}))
    # The old epoch's state, read on past the cut to the last snapshot the repair kept.
    assert (work.begin, work.read_end, work.ranges) == (0, 71, ((0, 100),))
    assert work.rows == (RangeRows(0, 100, 60, (("s1", 70), ("s2", 65))),)
    rows = pa.table(
        {
            "topic": ["sensor-a"] * 5 + ["sensor-b"],
            "partition": pa.array([0] * 6, pa.int32()),
            "offset": pa.array([10, 59, 60, 65, 70, 10], pa.int64()),
            "session": ["s0", "s0", "s0", "s2", "s1", "s0"],
        }
    )
    # The old range's own rows: before the cut, and the kept snapshots'.
    assert old.rows.mask(rows, A, 0, 100).to_pylist() == [True, True, False, True, True, False]
    # The next epoch's range never owns the kept snapshots' rows.
    assert new.rows.mask(rows, A, 60, 120).to_pylist() == [
        False,
        False,
        True,
        False,
        False,
        False,
    ]


def test_grid_ranges_name_the_same_offsets_the_same_way() -> None:
    grid = grid_ranges(A, 10, OFFSETS_PER_FILE + 5)
    assert [(r.start, r.end) for r in grid] == [
        (0, OFFSETS_PER_FILE),
        (OFFSETS_PER_FILE, 2 * OFFSETS_PER_FILE),
    ]
    (work,) = works(grid[1:], grid, _index({A: OFFSETS_PER_FILE + 5}))
    # Read from the partition's first offset; the grid's end stops at the archive's.
    assert (work.begin, work.read_end) == (0, OFFSETS_PER_FILE + 5)


def test_a_correction_selects_the_ranges_a_release_rewrote_as_well_as_those_it_published() -> None:
    def release(version: str) -> ProcessorRecord:
        return ProcessorRecord("meter_energy.energy:HourlyEnergy", 1, "digest", version)

    def batch(number: int, start: int, end: int, version: str, at: str) -> LedgerEntry:
        return LedgerEntry(
            number=number,
            kind=BATCH,
            end={A: end},
            start={A: start},
            written_at=at,
            processor=release(version),
        )

    entries = [
        batch(0, 0, 100, "0.9.0", "2026-11-20T10:00:00+00:00"),
        batch(1, 100, 200, "0.9.0", "2026-11-20T11:00:00+00:00"),
        batch(2, 200, 300, "1.0.0", "2026-11-21T09:00:00+00:00"),
    ]
    # 1.0.0 corrected what 0.9.0 published: those ranges' rows are 1.0.0's since.
    corrected = RecomputeRecord.from_json(
        RecomputeRecord(
            kind=CORRECTION,
            selector="processor version 0.9.0",
            ranges={A.key(): [(0, 100), (100, 200)]},
            published=(),
            removed=(),
            rows=0,
            messages=0,
            written_at="2026-11-21T10:00:00+00:00",
            processor=release("1.0.0"),
        ).to_json()
    )
    every = published_ranges(entries)

    def chosen(version: str) -> list[tuple[int, int]]:
        _, selected = matcher(None, None, version)
        return [(r.start, r.end) for r in select_entries(every, selected, [corrected])]

    assert chosen("1.0.0") == [(0, 100), (100, 200), (200, 300)]  # 1.0.0 turned out wrong too
    assert chosen("0.9.0") == [(0, 100), (100, 200)]  # corrected again: the same rows
    assert chosen("0.8.0") == []
