"""The output's ledger: entries on disk, their round trip, the ranges they published."""

from __future__ import annotations

import json
from pathlib import Path

from app.code_version import JobVersion
from app.contract.offsets import TopicPartition
from app.engine.machine import IntegrityMode, Rules
from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger, LedgerEntry, LiveRules, Pending
from app.storage import resolve

A = TopicPartition("sensor-a", 0)
B = TopicPartition("sensor-a", 1)
C = TopicPartition("sensor-b", 0)


def _ledger(tmp_path: Path) -> Ledger:
    return Ledger(resolve(str(tmp_path / "out")))


def test_an_entry_survives_the_round_trip_through_its_file(tmp_path: Path) -> None:
    entry = LedgerEntry(
        number=3,
        kind=ledger_mod.BATCH,
        end={B: 40, A: 12},
        files=("date=2026-01-01/part-sensor-a-0-0-12-000.parquet",),
        rows=57,
        checkpoint="/ckpt",
        checkpoint_id="q-1",
        batch_id=9,
        adopt={"s2": 5, "s1": 7},
        written_at="2026-01-02T03:04:05+00:00",
        job=JobVersion("1.4.0", "abc123", "d1g3st"),
        start={A: 0, B: 30},
    )
    ledger = _ledger(tmp_path)
    ledger.append(entry)
    assert ledger.read(3) == entry
    written = tmp_path / "out" / "_tablecast" / "ledger" / "00000000000000000003.json"
    doc = json.loads(written.read_text())
    # The file is the output's own record, readable without our code: offsets as
    # "topic:partition", partitions and sessions sorted.
    assert doc["end"] == {"sensor-a:0": 12, "sensor-a:1": 40}
    assert doc["start"] == {"sensor-a:0": 0, "sensor-a:1": 30}
    assert list(doc["adopt"]) == ["s1", "s2"]
    assert doc["job"] == {"version": "1.4.0", "commit": "abc123", "code": "d1g3st"}


def test_entries_written_before_the_newer_fields_still_read(tmp_path: Path) -> None:
    old = {
        "number": 0,
        "kind": "batch",
        "end": {"sensor-a:0": 5},
        "files": [],
        "rows": 0,
        "checkpoint": None,
        "checkpoint_id": None,
        "batch_id": 0,
        "written_at": "2025-01-01T00:00:00+00:00",
    }
    path = tmp_path / "out" / "_tablecast" / "ledger" / "00000000000000000000.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(old))
    entry = _ledger(tmp_path).read(0)
    assert (entry.end, entry.adopt, entry.job, entry.start) == ({A: 5}, {}, None, {})


def test_numbers_head_and_entries_follow_the_numbers_not_the_listing(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    assert ledger.numbers() == [] and ledger.head() is None and ledger.entries() == []
    for number in (10, 2, 0):
        ledger.append(LedgerEntry(number, ledger_mod.BATCH, {A: number}))
    directory = tmp_path / "out" / "_tablecast" / "ledger"
    (directory / "notes.txt").write_text("ignored")
    (directory / ".00000000000000000011.json.tmp").write_text("{")  # a write in progress
    assert ledger.numbers() == [0, 2, 10]
    head = ledger.head()
    assert head is not None and head.number == 10
    assert [e.end[A] for e in ledger.entries()] == [0, 2, 10]


def test_adopted_sessions_come_from_repair_entries_only_the_later_winning(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    ledger.append(LedgerEntry(0, ledger_mod.REPAIR, {A: 10}, adopt={"s1": 4, "s2": 6}))
    ledger.append(LedgerEntry(1, ledger_mod.BATCH, {A: 20}, adopt={"ignored": 1}))
    ledger.append(LedgerEntry(2, ledger_mod.REPAIR, {A: 15}, adopt={"s1": 12}))
    assert ledger.adopted_sessions() == {"s1": 12, "s2": 6}


def test_pending_lists_are_one_per_writer_written_read_and_cleared(tmp_path: Path) -> None:
    ledger = _ledger(tmp_path)
    assert ledger.pending(3) is None and ledger.pending_lists() == []
    files = ("date=2026-01-01/a.parquet", "date=2026-01-02/b.parquet")
    ledger.set_pending(Pending("k1", files, claim=3))
    ledger.set_pending(Pending("k2", files[:1], claim=7))
    assert ledger.pending(3) == Pending("k1", files, claim=3)
    assert (tmp_path / "out" / "_tablecast" / "pending" / f"{3:020d}.json").is_file()
    # The one list of an output written before claims counts as the oldest writer's.
    (tmp_path / "out" / "_tablecast" / "pending.json").write_bytes(
        b'{"end_key": "k0", "files": []}'
    )
    assert [(p.claim, p.end_key) for p in ledger.pending_lists()] == [
        (ledger_mod.LEGACY_CLAIM, "k0"),
        (3, "k1"),
        (7, "k2"),
    ]
    ledger.clear_pending(3)
    ledger.clear_pending(3)  # clearing nothing is fine
    ledger.clear_pending(ledger_mod.LEGACY_CLAIM)
    assert [p.claim for p in ledger.pending_lists()] == [7]


def test_ranges_are_from_the_recorded_starts() -> None:
    entry = LedgerEntry(4, ledger_mod.BATCH, {A: 30, B: 12, C: 7}, start={A: 20, B: 12, C: 0})
    previous = LedgerEntry(3, ledger_mod.BATCH, {A: 1, B: 1, C: 1})  # not used: starts recorded
    assert entry.ranges(previous) == {A: (20, 30), C: (0, 7)}  # B published nothing


def test_ranges_of_older_entries_begin_at_the_previous_end() -> None:
    previous = LedgerEntry(3, ledger_mod.BATCH, {A: 20, B: 12})
    entry = LedgerEntry(4, ledger_mod.BATCH, {A: 30, B: 12, C: 7})
    # C, new since the previous entry, has no known start in such an entry: left out
    # (that is why entries record their starts now).
    assert entry.ranges(previous) == {A: (20, 30)}
    # The first entry without starts: no previous end to begin at, so nothing is known.
    assert LedgerEntry(0, ledger_mod.BATCH, {A: 5}).ranges(None) == {}


def test_an_entry_records_the_rules_and_the_rule_6_owners_it_was_computed_with(
    tmp_path: Path,
) -> None:
    rules = LiveRules(mode=IntegrityMode.RESYNC, timeout_ms=600_000)
    entry = LedgerEntry(
        number=0, kind=ledger_mod.BATCH, end={A: 12}, rules=rules, foreign={B: {"s7": A}}
    )
    ledger = _ledger(tmp_path)
    ledger.append(entry)
    assert ledger.read(0) == entry
    doc = json.loads((tmp_path / "out/_tablecast/ledger/00000000000000000000.json").read_text())
    assert doc["rules"] == {"integrity": "resync", "session_timeout_ms": 600_000}
    assert doc["foreign"] == {"sensor-a:1": {"s7": "sensor-a:0"}}
    assert LiveRules.of(Rules(IntegrityMode.RESYNC, 600_000, adopt={"x": 1})) == rules
