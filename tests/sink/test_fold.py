"""The ledger's fold: old data entries in a few parts, claims in place, one ledger to read.

Without Spark, on the real storages (the local disk, S3 as a moto server
speaks it, HDFS's rename over local files): entries appended by the fence
as the sink appends them, folded by :class:`~app.sink.fold.LedgerFold`, read
back by every reader's :meth:`~app.sink.ledger.Ledger.entries`. A crash at
each step of a fold is a :class:`Crash` raised from its hook, then the next
fold (``tests/sink/test_upkeep_steps.py`` SIGKILLs ``tablecast run`` there).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from app.contract.offsets import Offsets, TopicPartition
from app.engine.machine import IntegrityMode
from app.errors import OwnershipLostError
from app.recompute import plan as plan_mod
from app.sink import fencing
from app.sink import fold as fold_mod
from app.sink import ledger as ledger_mod
from app.sink.fencing import Fence
from app.sink.fold import LedgerFold
from app.sink.ledger import Ledger, LedgerEntry, LiveRules
from app.storage import Location, resolve
from tests.hdfs_semantics import RecordingHandler
from tests.s3_server import S3Server

A = TopicPartition("sensor-a", 0)
B = TopicPartition("sensor-a", 1)
C = TopicPartition("sensor-b", 0)
RULES = LiveRules(IntegrityMode.RESYNC, 60_000)
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)
NOW = LONG_AGO + timedelta(days=30)


@pytest.fixture(params=["local", "s3", "hdfs"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Location]:
    if request.param == "local":
        yield resolve(str(tmp_path / "out"))
    elif request.param == "hdfs":
        root = tmp_path / "out"
        fs = pafs.PyFileSystem(RecordingHandler(hdfs_rename=True))
        yield Location(f"hdfs://test{root}", fs, str(root), is_local=False, atomic_rename=True)
    else:
        with S3Server() as server:
            server.create_bucket("lake")
            yield resolve("s3://lake/out")


def _claim(location: Location) -> Fence:
    return fencing.claim(location, fencing.new_writer("run", "/ckpt", 1.0))


class Batches:
    """Batch entries as the sink appends them: three partitions, one quiet in turns."""

    def __init__(self, fence: Fence) -> None:
        self.fence = fence
        self.end: Offsets = {A: 0, B: 0, C: 0}
        self.count = 0

    def append(self, n: int, at: datetime = LONG_AGO) -> None:
        for _ in range(n):
            start = dict(self.end)
            moved = [A, B, C][self.count % 3]  # the others publish nothing this batch
            self.end = {**self.end, moved: self.end[moved] + 5, A: self.end[A] + 2}
            self.fence.append(
                LedgerEntry(
                    number=-1,
                    kind=ledger_mod.BATCH,
                    end=dict(self.end),
                    start=start,
                    files=tuple(
                        f"date=2026-01-01/part-{self.count}-{tp.key()}.parquet" for tp in (A, moved)
                    ),
                    rows=7,
                    batch_id=self.count,
                    written_at=(at + timedelta(seconds=self.count)).isoformat(),
                    rules=RULES,
                    foreign={moved: {"s9": A}} if self.count % 4 == 0 else {},
                )
            )
            self.count += 1

    def repair(self, adopt: dict[str, int], at: datetime = LONG_AGO) -> None:
        self.fence.append(
            LedgerEntry(
                number=-1,
                kind=ledger_mod.REPAIR,
                end=dict(self.end),
                adopt=adopt,
                written_at=at.isoformat(),
            )
        )


def _published(entries: list[LedgerEntry]) -> list[tuple[object, ...]]:
    """What replay and correct take from the entries: every range with its entry's facts."""
    return [
        (r.tp, r.start, r.end, r.epoch, r.limit, r.kept, r.earlier, *_facts(r.entry))
        for r in plan_mod.published_ranges(entries)
        if r.entry is not None
    ]


def _facts(entry: LedgerEntry) -> tuple[object, ...]:
    return (entry.number, entry.files, entry.rules, entry.foreign, entry.batch_id, entry.job)


def _numbered(location: Location) -> list[int]:
    return Ledger(location).numbers()


def _fold(location: Location, fence: Fence, history_s: float = 3600.0) -> None:
    LedgerFold(Ledger(location)).fold(fence, history_s, now=NOW)


def test_folding_keeps_every_range_rule_owner_and_adopted_session(location: Location) -> None:
    fence = _claim(location)
    batches = Batches(fence)
    batches.append(30)
    batches.repair({"s1": 40, "s2": 44})
    batches.append(50)
    second = _claim(location)  # a restart: a claim in the middle
    batches.fence = second
    batches.append(60)
    ledger = Ledger(location)
    before = ledger.entries()
    claims = [e.number for e in ledger.all_entries() if e.kind is ledger_mod.WRITER]
    adopted, head = ledger.adopted_sessions(), ledger.head()

    report = LedgerFold(ledger).fold(second, history_s=3600.0, now=NOW)

    assert report is not None and report.folded == len(before) - fold_mod.LIVE_MIN
    after = ledger.entries()
    assert _published(after) == _published(before)
    assert [e.number for e in after] == [e.number for e in before]
    assert ledger.adopted_sessions() == adopted == {"s1": 40, "s2": 44}
    assert ledger.head() == head
    # Numbered files: every claim, and the newest data entries; no more.
    numbered = _numbered(location)
    assert [n for n in numbered if n in claims] == claims
    data = [n for n in numbered if n not in claims]
    assert data == [e.number for e in before[-fold_mod.LIVE_MIN :]]
    fold_head = ledger.fold_head()
    assert fold_head is not None and fold_head.adopt == adopted
    assert fold_head.end == before[-fold_mod.LIVE_MIN - 1].end


def test_only_entries_older_than_the_history_fold_and_at_most_a_hundred_stay(
    tmp_path: Path,
) -> None:
    location = resolve(str(tmp_path / "out"))
    fence = _claim(location)
    batches = Batches(fence)
    batches.append(40, at=NOW - timedelta(hours=2))  # older than an hour's history
    batches.append(30, at=NOW - timedelta(minutes=10))
    _fold(location, fence, history_s=3600.0)
    ledger = Ledger(location)
    head = ledger.fold_head()
    assert head is not None and head.entries == 40  # the recent ones stay numbered
    assert len(_numbered(location)) == 1 + 30

    batches.append(200, at=NOW - timedelta(minutes=5))  # recent, but too many to list
    for _ in range(30):
        _fold(location, fence, history_s=3600.0)
    data = [n for n in _numbered(location) if n > 0]
    assert fold_mod.LIVE_MAX - fold_mod.FOLD_MIN < len(data) <= fold_mod.LIVE_MAX
    assert len(ledger.entries()) == 270


def test_parts_merge_by_tens_so_a_long_ledger_is_a_few_files(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    fence = _claim(location)
    batches = Batches(fence)
    ledger = Ledger(location)
    for _ in range(130):
        batches.append(fold_mod.FOLD_MIN)
        _fold(location, fence, history_s=0.0)
    parts = ledger.folded_parts()
    levels = [p.level for p in parts]
    assert max(levels) == 2 and all(levels.count(n) < fold_mod.FANOUT for n in set(levels))
    assert len(parts) <= 3 * (fold_mod.FANOUT - 1)
    entries = ledger.entries()
    assert [e.batch_id for e in entries] == list(range(1300))
    assert len(ledger.fold_heads()) == fold_mod.HEADS_KEPT
    folded = ledger.folded_entries(ledger.fold_head())  # type: ignore[arg-type]
    assert all(e.states is None for e in folded)  # only the newest versions are ever loaded


class Crash(Exception):
    pass


@pytest.mark.parametrize(
    ("step", "done"),
    [
        (fold_mod.PART_WRITTEN, None),
        (fold_mod.HEAD_WRITTEN, None),
        (fold_mod.ENTRIES_DELETED, 1),
        (fold_mod.ENTRIES_DELETED, None),
        (fold_mod.MERGED, None),
    ],
)
def test_a_fold_that_crashed_at_each_step_reads_whole_and_the_next_fold_finishes_it(
    location: Location, step: int, done: int | None
) -> None:
    fence = _claim(location)
    batches = Batches(fence)
    ledger = Ledger(location)
    while [p.level for p in ledger.folded_parts()].count(0) < fold_mod.FANOUT - 1:
        batches.append(fold_mod.FOLD_MIN)  # nine parts: the next fold merges them
        _fold(location, fence, history_s=0.0)
    batches.append(fold_mod.FOLD_MIN)
    expected = _published(ledger.entries())

    def crash(at: int, count: int | None) -> None:
        if (at, count) == (step, done):
            raise Crash(f"{at}.{count}")

    with pytest.raises(Crash):
        LedgerFold(ledger).fold(fence, 0.0, crash, now=NOW)
    assert _published(ledger.entries()) == expected  # whole at the crash

    batches.append(1)
    expected = _published(ledger.entries())
    _fold(location, fence, history_s=0.0)
    assert _published(ledger.entries()) == expected
    parts = ledger.folded_parts()
    assert [p.level for p in parts].count(0) < fold_mod.FANOUT
    assert not any(o.covers(p) for o in parts for p in parts)
    head = ledger.fold_head()
    assert head is not None
    left = [n for n in _numbered(location) if n <= head.through and n != fence.claim]
    assert left == []  # every folded data entry's numbered file went


def test_a_writer_frozen_before_a_fold_is_fenced_after_it(location: Location) -> None:
    """The writer frozen with its next number free wakes after another took over and folded
    the entries around that number: its check and its append still fail, its own fold
    deletes nothing, and every file is as it was."""
    frozen = _claim(location)
    mine = Batches(frozen)
    mine.append(25)
    next_number = frozen.last + 1
    # Frozen here. Another writer takes the output over and runs long enough to fold.
    taker = _claim(location)
    assert taker.claim == next_number
    theirs = Batches(taker)
    theirs.end = dict(mine.end)
    theirs.count = mine.count
    theirs.append(60)
    _fold(location, taker, history_s=0.0)
    _fold(location, taker, history_s=0.0)
    numbered = _numbered(location)
    assert frozen.last not in numbered and next_number + 1 not in numbered  # folded around it
    assert next_number in numbered  # the claim stays: the fence post
    theirs.append(30)  # due for the next fold, which the frozen writer would do
    files = _snapshot(location)

    with pytest.raises(OwnershipLostError, match=f"ledger entry {next_number} was claimed by"):
        frozen.check("publishing batch 25")
    with pytest.raises(OwnershipLostError):
        frozen.append(LedgerEntry(-1, ledger_mod.BATCH, dict(mine.end), batch_id=25))
    with pytest.raises(OwnershipLostError):
        LedgerFold(Ledger(location)).fold(frozen, 0.0, now=NOW)
    assert not frozen.holds() and taker.holds()
    assert _snapshot(location) == files  # nothing changed
    assert [e.batch_id for e in Ledger(location).entries()] == list(range(115))


def _snapshot(location: Location) -> dict[str, bytes]:
    return {info.path: location.read_bytes(info.path) for info in location.list_tree(location.path)}
