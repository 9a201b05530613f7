"""The integrity classes ordered, once and none, on captures with gaps, repeats and reorders.

Each class is stated on the seqs a session's messages arrive with: ``ordered``
applies a seq only above the last applied, ``once`` each seq the first time
it arrives, ``none`` everything. A processor that writes one row per message
it is given shows exactly which were applied, against those statements
applied to the capture's own arrival order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import msgspec
import pytest

import tablecast
from app.contract.offsets import TopicPartition
from app.contract.table_processor import TableProcessor
from app.engine.in_process import InProcessOutcome, run_partitions
from app.engine.machine import IntegrityMode, RecordColumns, Rules
from app.tools import generate as gen

GAPPED = gen.CaptureSpec(
    topics=1,
    partitions=1,
    sessions=6,
    updates=12,
    seed=3,
    faults=(gen.Fault.SEQ_GAP, gen.Fault.SEQ_REPEAT, gen.Fault.SEQ_REORDER),
)


class Seen(msgspec.Struct):
    applied: int = 0


class Applied(tablecast.Processor[Seen]):
    """One row per message it is given: the session and the message's seq."""

    output = tablecast.schema(
        '[key]\ncolumns = ["sid", "seq_applied"]\n[columns]\nsid = "string"\n'
        'seq_applied = "int64"\ncount = "int64"'
    )

    def apply(self, state: Seen, message: tablecast.Message) -> tuple[Seen, tablecast.Changes]:
        state.applied += 1
        return state, tablecast.Changes([(message.session, message.seq, state.applied)])

    def end(self, state: Seen, message: tablecast.Message) -> tablecast.Changes:
        return tablecast.Changes([(message.session, message.seq, -1)])


def _capture() -> tuple[gen.Capture, TopicPartition, RecordColumns]:
    capture = gen.generate(GAPPED)
    (tp, messages), *_ = capture.partitions.items()
    records = RecordColumns(
        [m.session.encode() for m in messages],
        [m.value for m in messages],
        list(range(len(messages))),
        [m.ts for m in messages],
    )
    return capture, tp, records


def _run(
    processor: tablecast.Processor[Any],
    mode: IntegrityMode,
    records: RecordColumns,
    tp: TopicPartition,
    slices: int | None = None,
    timeout_ms: int = 3_600_000,
) -> InProcessOutcome:
    def read(_: TopicPartition) -> Iterator[RecordColumns]:
        step = slices or len(records.offsets)
        for lo in range(0, len(records.offsets), step):
            hi = lo + step
            yield RecordColumns(
                records.keys[lo:hi], records.values[lo:hi], records.offsets[lo:hi],
                records.timestamps_ms[lo:hi],
            )  # fmt: skip

    return run_partitions([tp], read, processor, Rules(mode, timeout_ms))


def _arrivals(capture: gen.Capture) -> dict[str, list[tuple[int, str]]]:
    """Each session's (seq, type) in arrival order, as the capture holds them."""
    found: dict[str, list[tuple[int, str]]] = {}
    for messages in capture.partitions.values():
        for m in messages:
            doc = msgspec.json.decode(m.value)
            found.setdefault(m.session, []).append((doc["seq"], doc["type"]))
    return found


def _applied(outcome: InProcessOutcome) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in outcome.rows().to_pylist():
        found.setdefault(row["sid"], []).append(row["seq_applied"])
    return found


def _above_every_earlier(seqs: Iterable[int]) -> list[int]:
    """ordered: a seq is applied only above every seq before it."""
    arrived = list(seqs)
    return [s for i, s in enumerate(arrived) if all(s > t for t in arrived[:i])]


def _first_arrivals(seqs: Iterable[int]) -> list[int]:
    """once: a seq is applied the first time it arrives."""
    arrived = list(seqs)
    return [s for i, s in enumerate(arrived) if s not in arrived[:i]]


# Each class's statement, on one session's arrival order: the seqs applied.
STATEMENTS: dict[IntegrityMode, Callable[[Iterable[int]], list[int]]] = {
    IntegrityMode.ORDERED: _above_every_earlier,
    IntegrityMode.ONCE: _first_arrivals,
    IntegrityMode.NONE: list,
}


@pytest.mark.parametrize("mode", list(STATEMENTS), ids=str)
def test_each_class_applies_exactly_what_it_states(mode: IntegrityMode) -> None:
    capture, tp, records = _capture()
    assert {f.fault for f in capture.faults} == set(GAPPED.faults)
    outcome = _run(Applied(), mode, records, tp)
    arrivals = _arrivals(capture)
    expected = {s: STATEMENTS[mode](seq for seq, _ in a) for s, a in arrivals.items()}
    assert _applied(outcome) == expected
    assert outcome.violations == []
    dropped = sum(len(a) - len(expected[s]) for s, a in arrivals.items())
    assert outcome.repeats == dropped
    if mode is IntegrityMode.NONE:
        assert (outcome.repeats, outcome.gaps) == (0, 0)


def test_ordered_counts_each_seq_it_skips_and_drops_repeats_and_late_ones() -> None:
    capture, tp, records = _capture()
    outcome = _run(Applied(), IntegrityMode.ORDERED, records, tp)
    faults = {f.fault: f.session for f in capture.faults}
    result = outcome.results[tp]
    # The gap skips one seq, and so does the reorder (its late message is then dropped).
    assert result.gaps == 2
    assert result.repeats == 2  # the repeat, and the reordered message that came late
    state = outcome.states[tp].sessions
    assert state[faults[gen.Fault.SEQ_GAP]].gaps == 1
    assert state[faults[gen.Fault.SEQ_REORDER]].gaps == 1
    assert state[faults[gen.Fault.SEQ_REORDER]].repeats == 1
    assert state[faults[gen.Fault.SEQ_REPEAT]].repeats == 1


def test_once_applies_a_reorder_drops_a_repeat_and_reports_a_gap_at_the_end() -> None:
    capture, tp, records = _capture()
    outcome = _run(Applied(), IntegrityMode.ONCE, records, tp)
    faults = {f.fault: f for f in capture.faults}
    result = outcome.results[tp]
    assert result.repeats == 1
    assert result.gaps == 1  # the gap's seq never arrived: reported when its session ended
    (gap,) = result.gap_reports
    session = faults[gen.Fault.SEQ_GAP].session
    ends = [m for m in capture.partitions[tp] if m.session == session]
    end_offset = capture.partitions[tp].index(ends[-1])
    missing = faults[gen.Fault.SEQ_GAP]
    seq = msgspec.json.decode(capture.partitions[tp][missing.offset].value)["seq"] - 1
    assert gap == (session, end_offset, 1, str(seq))
    assert outcome.states[tp].sessions[session].gaps == 1


def test_once_reports_a_gap_where_a_session_times_out() -> None:
    session = [
        {"session": "a", "seq": s, "type": "update", "ts": 1_000 + s, "rows": []} for s in (0, 1, 4)
    ]
    later = {"session": "b", "seq": 0, "type": "snapshot", "ts": 10_000_000, "rows": []}
    outcome = tablecast.process(Applied(), [*session, later], integrity="once")
    assert outcome.missing == 2  # seqs 2 and 3 of a, found when b's message made it idle
    rows = outcome.rows.to_pylist()
    assert [(r["session"], r["seq_applied"]) for r in rows] == [
        ("a", 0),
        ("a", 1),
        ("a", 4),
        ("b", 0),
    ]


def test_strict_stops_at_the_first_fault_and_resync_quarantines_each_session() -> None:
    capture, tp, records = _capture()
    first = min(f.offset for f in capture.faults)
    strict = _run(Applied(), IntegrityMode.STRICT, records, tp)
    assert [v.offset for v in strict.violations] == [first]
    resync = _run(Applied(), IntegrityMode.RESYNC, records, tp)
    assert {v.offset for v in resync.violations} == {f.offset for f in capture.faults}


@pytest.mark.parametrize("mode", list(IntegrityMode), ids=str)
def test_what_a_class_writes_depends_on_the_records_alone_not_on_their_slices(
    mode: IntegrityMode,
) -> None:
    """Timeouts included: a session's timeout rows carry the offset of the record that made
    it idle, whichever slice noticed."""
    capture = gen.generate(
        gen.CaptureSpec(topics=1, partitions=1, sessions=12, updates=20, concurrent=3, seed=5)
    )
    (tp, messages), *_ = capture.partitions.items()
    # Record times with pauses long enough for sessions to go idle (a 20-second timeout).
    stamps = [i * 1_000 + (i // 17) * 30_000 for i in range(len(messages))]
    records = RecordColumns(
        [m.session.encode() for m in messages],
        [m.value for m in messages],
        list(range(len(messages))),
        stamps,
    )

    class Closing(Applied):
        def timeout(self, state: Seen, session: str) -> tablecast.Changes:
            return tablecast.Changes([(session, -2, state.applied)])

    runs = [
        _run(Closing(), mode, records, tp, slices=n, timeout_ms=20_000).rows()
        for n in (None, 1, 7, 50)
    ]
    assert runs[0].filter(_is(runs[0], "timeout")).num_rows > 0, "sessions went idle"
    for other in runs[1:]:
        assert sorted(other.to_pylist(), key=repr) == sorted(runs[0].to_pylist(), key=repr)


def _is(table: Any, kind: str) -> Any:
    import pyarrow.compute as pc

    return pc.equal(table["type"], kind)


def test_the_table_processor_runs_under_every_class() -> None:
    _, tp, records = _capture()
    for mode in IntegrityMode:
        outcome = _run(TableProcessor(), mode, records, tp)
        assert outcome.rows().num_rows > 0, mode
