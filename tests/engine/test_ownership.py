"""Rule 6 across partitions: the registry of owners, trespasses, and settling a batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from app.contract.offsets import TopicPartition
from app.contract.table_processor import TableProcessor
from app.engine.in_process import run_partitions
from app.engine.machine import Claim, Drop, IntegrityMode, PartitionMachine, RecordColumns, Rules
from app.engine.ownership import Foreign, Registry, settle
from app.engine.state import PartitionState
from app.errors import Rule, Violation

A = TopicPartition("sensor-1", 0)
B = TopicPartition("sensor-1", 1)
C = TopicPartition("sensor-2", 0)


def test_a_session_owned_elsewhere_is_a_trespass_at_its_first_message_here() -> None:
    registry = Registry({"s": A})
    found = registry.trespasses({B: [Claim("s", 40, True), Claim("s", 41, True)]})
    assert [(t.session, t.tp, t.offset, t.owner) for t in found] == [("s", B, 40, A)]
    v = found[0].violation()
    assert (v.rule, v.topic, v.partition, v.offset, v.expected, v.got) == (
        Rule.ONE_PARTITION,
        "sensor-1",
        1,
        40,
        "topic sensor-1 partition 0",
        "topic sensor-1 partition 1",
    )


def test_the_owner_itself_may_claim_its_session_again() -> None:
    assert Registry({"s": A}).trespasses({A: [Claim("s", 9, True)]}) == []


def test_in_one_batch_the_first_partition_in_order_owns_a_new_session() -> None:
    found = Registry().trespasses({C: [Claim("s", 1, True)], A: [Claim("s", 50, True)]})
    assert [(t.tp, t.owner) for t in found] == [(C, A)]


def test_a_rejected_first_message_of_a_session_owned_elsewhere_is_rule_6() -> None:
    # The owner opens the session in this batch; the other partition only saw a stray message.
    found = Registry().trespasses({A: [Claim("s", 3, False)], B: [Claim("s", 0, True)]})
    assert [(t.tp, t.offset, t.owner) for t in found] == [(A, 3, B)]
    # Unknown everywhere: not rule 6 (the partition's own rule 1 stands).
    assert Registry().trespasses({A: [Claim("x", 3, False)]}) == []


def test_published_claims_and_expiries_update_the_owners() -> None:
    registry = Registry({"old": A, "gone": A})
    registry.apply(
        {B: [Claim("new", 1, True), Claim("bad", 2, False)]},
        {A: [Drop("gone", 3)], B: [Drop("old", 3)]},
    )
    assert registry.owners == {"old": A, "new": B}


@dataclass
class Pass:
    claims: dict[TopicPartition, list[Claim]]
    dropped: dict[TopicPartition, list[Drop]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    foreign: Foreign = field(default_factory=dict)


def test_strict_settling_reports_rule_6_in_place_of_the_partitions_own_view() -> None:
    own = Violation("sensor-1", 1, 7, "s", Rule.FIRST_MESSAGE, "a snapshot", "end with seq 9")
    passes: list[Foreign] = []

    def run_pass(foreign: Foreign) -> Pass:
        passes.append(foreign)
        return Pass({A: [Claim("s", 0, True)], B: [Claim("s", 7, False)]}, violations=[own])

    outcome = settle(run_pass, Registry(), strict=True)
    assert len(passes) == 1
    assert [(v.rule, v.partition, v.offset) for v in outcome.violations] == [
        (Rule.ONE_PARTITION, 1, 7)
    ]


def test_resync_settling_runs_again_with_the_trespassers_foreign() -> None:
    passes: list[Foreign] = []

    def run_pass(foreign: Foreign) -> Pass:
        passes.append(foreign)
        b_claims = [] if foreign.get(B) else [Claim("s", 7, True)]
        return Pass({A: [Claim("s", 0, True)], B: b_claims})

    outcome = settle(run_pass, Registry(), strict=False)
    assert passes == [{}, {B: {"s": A}}]
    assert outcome.foreign == {B: {"s": A}}  # what the ledger entry records
    assert outcome.claims == {A: [Claim("s", 0, True)], B: []}


def _expiring_in_one_range(tp: TopicPartition) -> tuple[list[Claim], list[Any]]:
    """Run the real machine: session "s" opens, then idles out in the same range."""
    records = [
        (
            b"s",
            orjson.dumps(
                {
                    "session": "s",
                    "seq": 0,
                    "type": "snapshot",
                    "ts": 0,
                    "rows": [{"id": "a", "value": 1, "status": "ok"}],
                }
            ),
            0,
            1_000,
        ),
        (
            b"t",
            orjson.dumps(
                {
                    "session": "t",
                    "seq": 0,
                    "type": "snapshot",
                    "ts": 0,
                    "rows": [{"id": "a", "value": 1, "status": "ok"}],
                }
            ),
            1,
            90_000,
        ),
    ]
    keys, values, offsets, stamps = (list(c) for c in zip(*records, strict=True))
    machine = PartitionMachine(TableProcessor(), Rules(timeout_ms=10_000))
    result = machine.run(PartitionState.empty(tp, 0), RecordColumns(keys, values, offsets, stamps))
    assert [c.session for c in result.claims] == ["s", "t"]
    assert [d.session for d in result.dropped] == ["s"]
    return result.claims, list(result.dropped)


def test_a_session_opened_and_expired_in_one_batch_is_owned_by_nobody_after_it() -> None:
    claims, dropped = _expiring_in_one_range(A)
    registry = Registry()
    registry.apply({A: claims}, {A: dropped})
    assert registry.owners == {"t": A}
    # So another partition may open it in a later batch, as after a restart.
    assert registry.trespasses({B: [Claim("s", 7, True)]}) == []


def test_claims_and_drops_apply_in_offset_order() -> None:
    # Dropped at 5 (idle), opened again at 5: the partition owns it after the batch.
    registry = Registry({"s": A})
    registry.apply({A: [Claim("s", 5, True)]}, {A: [Drop("s", 5)]})
    assert registry.owners == {"s": A}
    # Opened at 1, dropped at 5: owned by nobody.
    registry.apply({A: [Claim("s", 1, True)]}, {A: [Drop("s", 5)]})
    assert registry.owners == {}


def test_the_reference_releases_a_session_that_expired_before_another_partition_opened_it() -> None:
    # verify's single pass over whole partitions: A opens "s" and it expires there;
    # B opens a session of the same id afterwards: no rule 6 violation.
    def snapshot(session: str, offset: int, seen: int) -> tuple[bytes, bytes, int, int]:
        doc = {
            "session": session,
            "seq": 0,
            "type": "snapshot",
            "ts": seen,
            "rows": [{"id": "a", "value": 1, "status": "ok"}],
        }
        return session.encode(), orjson.dumps(doc), offset, seen

    data = {
        A: [snapshot("s", 0, 1_000), snapshot("t", 1, 90_000)],
        B: [snapshot("u", 0, 95_000), snapshot("s", 1, 96_000)],
    }

    def read(tp: TopicPartition) -> list[RecordColumns]:
        keys, values, offsets, stamps = (list(c) for c in zip(*data[tp], strict=True))
        return [RecordColumns(keys, values, offsets, stamps)]

    rules = Rules(IntegrityMode.STRICT, timeout_ms=10_000)
    outcome = run_partitions([A, B], read, TableProcessor(), rules)
    assert outcome.violations == []
    assert set(outcome.rows()["session"].to_pylist()) == {"s", "t", "u"}
