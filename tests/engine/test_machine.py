"""The partition machine: integrity rules 1 to 7, resync mode, expiry, claims, state."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract.offsets import TopicPartition
from app.contract.table_processor import Table, TableProcessor
from app.engine.machine import (
    Claim,
    IntegrityMode,
    PartitionMachine,
    PartitionResult,
    RecordColumns,
    Rules,
)
from app.engine.state import PartitionState
from app.engine.store import decode, encode
from app.errors import Rule

TP = TopicPartition("sensor-1", 0)
OTHER = TopicPartition("sensor-1", 1)
SESSION = "s1"


class Rec:
    """One record: key, value, offset and Kafka timestamp."""

    def __init__(
        self,
        offset: int,
        key: str | None = SESSION,
        value: bytes | None = None,
        seen: int | None = None,
        **doc: Any,
    ) -> None:
        self.offset = offset
        self.key = None if key is None else key.encode()
        self.seen = 1000 + offset if seen is None else seen
        body = {"session": key, "ts": 1000 + offset, **doc}
        self.value = orjson.dumps(body) if value is None else value


def snap(offset: int, seq: int, rows: dict[str, float], **kw: Any) -> Rec:
    docs = [{"id": k, "value": v, "status": "ok"} for k, v in rows.items()]
    return Rec(offset, seq=seq, type="snapshot", rows=docs, **kw)


def upd(
    offset: int,
    seq: int,
    rows: dict[str, float] | None = None,
    deleted: list[str] | None = None,
    **kw: Any,
) -> Rec:
    docs = [{"id": k, "value": v, "status": "ok"} for k, v in (rows or {}).items()]
    return Rec(offset, seq=seq, type="update", rows=docs, deleted=deleted or [], **kw)


def end(offset: int, seq: int, **kw: Any) -> Rec:
    return Rec(offset, seq=seq, type="end", **kw)


def columns(records: list[Rec]) -> RecordColumns:
    return RecordColumns(
        [r.key for r in records],
        [r.value for r in records],
        [r.offset for r in records],
        [r.seen for r in records],
    )


def run(
    records: list[Rec],
    mode: IntegrityMode = IntegrityMode.STRICT,
    state: PartitionState[Table] | None = None,
    **rules: Any,
) -> tuple[PartitionResult, PartitionState[Table]]:
    machine = PartitionMachine(TableProcessor(), Rules(mode, **rules))
    state = state or PartitionState.empty(TP, 0)
    return machine.run(state, columns(records)), state


def rows_of(result: PartitionResult) -> list[tuple[int, str, float | None, bool]]:
    table = result.rows.to_table()
    names = ("offset", "row_id", "value", "deleted")
    return list(zip(*(table[name].to_pylist() for name in names), strict=True))


def test_a_clean_session_produces_the_contract_rows() -> None:
    result, state = run(
        [snap(0, 0, {"a": 1, "b": 2}), upd(1, 1, {"c": 3}, ["a"]), snap(2, 2, {"c": 4}), end(3, 3)]
    )
    assert result.violations == []
    assert rows_of(result) == [
        (0, "a", 1.0, False),
        (0, "b", 2.0, False),
        (1, "a", None, True),
        (1, "c", 3.0, False),
        (2, "b", None, True),
        (2, "c", 4.0, False),  # the resync drops b
    ]
    session = state.sessions[SESSION]
    assert session.closed and session.user is None and session.last_seq == 3


def test_every_output_row_carries_its_message_and_position() -> None:
    result, _ = run([snap(7, 0, {"a": 1.5})])
    table = result.rows.to_table()
    assert table.to_pylist() == [
        {
            "topic": "sensor-1",
            "partition": 0,
            "offset": 7,
            "session": SESSION,
            "seq": 0,
            "type": "snapshot",
            "ts": table["ts"][0].as_py(),
            "row_id": "a",
            "value": 1.5,
            "status": "ok",
            "deleted": False,
        }
    ]
    assert table["ts"].type == pa.timestamp("us", tz="UTC")
    assert table["ts"].cast(pa.int64()).to_pylist() == [1_007_000]


def _first_violation(records: list[Rec]) -> tuple[Rule, int, str, str]:
    result, _ = run(records)
    assert result.violations, "expected a violation"
    v = result.violations[0]
    return v.rule, v.offset, v.expected, v.got


def test_rule_1_first_message_must_be_seq_0_snapshot() -> None:
    assert _first_violation([upd(4, 0, {"a": 1})])[:2] == (Rule.FIRST_MESSAGE, 4)
    rule, offset, expected, got = _first_violation([snap(4, 3, {"a": 1})])
    assert (rule, offset, got) == (Rule.FIRST_MESSAGE, 4, "snapshot with seq 3")
    assert "seq 0" in expected


def test_rule_2_gap_repeat_and_reorder() -> None:
    base = [snap(0, 0, {"a": 1}), upd(1, 1, {"a": 2})]
    assert _first_violation([*base, upd(2, 3)]) == (Rule.SEQUENCE, 2, "seq 2", "seq 3")
    assert _first_violation([*base, upd(2, 1)]) == (Rule.SEQUENCE, 2, "seq 2", "seq 1")
    assert _first_violation([*base, upd(2, 3), upd(3, 2)])[:2] == (Rule.SEQUENCE, 2)


def test_rule_3_a_resync_snapshot_replaces_the_table() -> None:
    result, state = run([snap(0, 0, {"a": 1, "b": 2}), snap(1, 1, {"b": 5})])
    assert result.violations == []
    assert state.sessions[SESSION].user == {"b": ("b", 5.0, "ok")}


def test_rule_4_delete_of_an_unknown_row() -> None:
    rule, offset, _, got = _first_violation([snap(0, 0, {"a": 1}), upd(1, 1, deleted=["zz"])])
    assert (rule, offset) == (Rule.DELETE_UNKNOWN_ROW, 1) and "'zz'" in got


def test_rule_5_nothing_after_end() -> None:
    rule, offset, _, _ = _first_violation([snap(0, 0, {"a": 1}), end(1, 1), upd(2, 2, {"a": 1})])
    assert (rule, offset) == (Rule.AFTER_END, 2)


def test_rule_6_a_session_that_belongs_elsewhere_violates_here() -> None:
    machine = PartitionMachine(TableProcessor(), Rules(), foreign={SESSION: OTHER})
    result = machine.run(PartitionState.empty(TP, 0), columns([snap(0, 0, {"a": 1})]))
    v = result.violations[0]
    assert (v.rule, v.offset, v.expected, v.got) == (
        Rule.ONE_PARTITION,
        0,
        "topic sensor-1 partition 1",
        "topic sensor-1 partition 0",
    )


def test_rule_7_invalid_values_and_keys_are_located() -> None:
    bad = Rec(1, value=b"{nope")
    rule, offset, _, got = _first_violation([snap(0, 0, {"a": 1}), bad])
    assert (rule, offset) == (Rule.ENVELOPE, 1) and "not valid JSON" in got
    result, _ = run([Rec(7, key=None, value=b"{}")])
    assert (result.violations[0].rule, result.violations[0].offset) == (Rule.ENVELOPE, 7)
    result, _ = run([Rec(8, key=None, value=b"{}")], mode=IntegrityMode.RESYNC)
    assert result.quarantined[0].offset == 8 and "no key" in result.quarantined[0].reason


def test_strict_mode_stops_at_the_first_violation() -> None:
    result, _ = run([snap(0, 0, {"a": 1}), upd(1, 5), upd(2, 6)])
    assert len(result.violations) == 1
    assert result.messages == 2


def test_sessions_of_a_partition_interleave_independently() -> None:
    records = [
        snap(0, 0, {"a": 1}),
        snap(1, 0, {"x": 1}, key="s2"),
        upd(2, 1, {"a": 2}),
        upd(3, 1, {"x": 2}, key="s2"),
    ]
    result, state = run(records)
    assert result.violations == []
    assert set(state.sessions) == {SESSION, "s2"}
    assert [c.session for c in result.claims] == [SESSION, "s2"]


def test_resync_quarantines_until_a_snapshot_re_establishes_the_session() -> None:
    records = [
        snap(0, 0, {"a": 1, "b": 2}),
        upd(1, 1, {"a": 3}),
        upd(2, 5, {"a": 9}),  # gap: quarantined
        upd(3, 6, {"a": 10}),  # awaiting a snapshot: quarantined
        snap(4, 7, {"b": 7}),  # re-establishes; a is dropped
        upd(5, 8, {"b": 8}),
    ]
    result, state = run(records, IntegrityMode.RESYNC)
    assert [q.offset for q in result.quarantined] == [2, 3]
    assert "rule 2" in result.quarantined[0].reason
    assert "awaiting a snapshot" in result.quarantined[1].reason
    assert [(o, r, d) for o, r, _, d in rows_of(result) if o >= 4] == [
        (4, "a", True),
        (4, "b", False),
        (5, "b", False),
    ]
    assert state.sessions[SESSION].quarantine is None
    assert result.claims == [Claim(SESSION, 0, True), Claim(SESSION, 4, True)]


def test_resync_session_that_starts_badly_waits_for_any_snapshot() -> None:
    result, _ = run([upd(0, 3, {"a": 1}), snap(1, 4, {"a": 2})], IntegrityMode.RESYNC)
    assert [q.offset for q in result.quarantined] == [0]
    assert [(o, r) for o, r, _, _ in rows_of(result)] == [(1, "a")]
    assert result.claims == [Claim(SESSION, 0, False), Claim(SESSION, 1, True)]


def test_resync_quarantines_every_message_of_a_foreign_session_snapshots_included() -> None:
    machine = PartitionMachine(
        TableProcessor(), Rules(IntegrityMode.RESYNC), foreign={SESSION: OTHER}
    )
    state: PartitionState[Table] = PartitionState.empty(TP, 0)
    result = machine.run(state, columns([snap(0, 0, {"a": 1}), upd(1, 1), snap(2, 2, {"a": 2})]))
    assert [q.offset for q in result.quarantined] == [0, 1, 2]
    assert "rule 6" in result.quarantined[0].reason and len(result.rows) == 0
    assert result.claims == [] and state.sessions[SESSION].owner == OTHER
    # Later batches need no foreign map: the state remembers the owner.
    later = PartitionMachine(TableProcessor(), Rules(IntegrityMode.RESYNC))
    again = later.run(state, columns([snap(3, 3, {"a": 3})]))
    assert [q.offset for q in again.quarantined] == [3] and again.violations == []


def test_adopted_sessions_may_begin_with_a_resync_snapshot() -> None:
    records = [snap(10, 4, {"a": 1}), upd(11, 5, {"a": 2})]
    assert run(records)[0].violations
    result, state = run(records, adopt={SESSION: 10})
    assert result.violations == []
    # The adopted snapshot's rows were published before the repair: only later rows.
    assert [(o, r) for o, r, _, _ in rows_of(result)] == [(11, "a")]
    assert state.sessions[SESSION].user == {"a": ("a", 2.0, "ok")}
    # An adopted session must still begin with a snapshot.
    assert run([upd(10, 4, {"a": 1})], adopt={SESSION: 10})[0].violations


def test_traced_sessions_report_every_message() -> None:
    result, _ = run([snap(0, 0, {"a": 1, "b": 1}), upd(1, 1, {"a": 2})], trace=frozenset({SESSION}))
    assert [(t.offset, t.seq, t.rows, t.outcome) for t in result.trace] == [
        (0, 0, 2, "applied"),
        (1, 1, 1, "applied"),
    ]


def test_an_idle_session_expires_on_the_partitions_own_clock() -> None:
    # s1 is quiet while s2 moves the partition's clock past s1's timeout.
    s2 = [snap(1, 0, {"x": 1}, key="s2", seen=5_000), upd(2, 1, {"x": 2}, key="s2", seen=9_000)]
    records = [snap(0, 0, {"a": 1}, seen=1_000), *s2, upd(3, 1, {"a": 2}, seen=9_100)]
    result, _ = run(records, timeout_ms=5_000)
    assert [d.session for d in result.dropped] == [SESSION]
    v = result.violations[0]  # its state is gone: its next message opens nothing
    assert (v.rule, v.offset) == (Rule.FIRST_MESSAGE, 3)
    # Within the timeout nothing expires, however the records are cut.
    result, _ = run(records, timeout_ms=10_000)
    assert result.violations == [] and result.dropped == []


def test_expiry_does_not_depend_on_how_the_records_are_cut() -> None:
    records = [snap(i, 0, {"a": 1}, key=f"s{i}", seen=i * 1_000) for i in range(10)]
    whole, state_whole = run(records, timeout_ms=3_500)
    machine = PartitionMachine(TableProcessor(), Rules(timeout_ms=3_500))
    state: PartitionState[Table] = PartitionState.empty(TP, 0)
    dropped: list[str] = []
    for lo, hi in [(0, 3), (3, 4), (4, 10)]:
        dropped += [d.session for d in machine.run(state, columns(records[lo:hi])).dropped]
    expected = [f"s{i}" for i in range(6)]
    assert sorted(dropped) == sorted(d.session for d in whole.dropped) == expected
    assert set(state.sessions) == set(state_whole.sessions) == {"s6", "s7", "s8", "s9"}


# -- property: the machine, fed in arbitrary slices, equals a simple model ------------------


@st.composite
def sessions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A valid session: snapshot, then updates and resync snapshots, maybe an end."""
    ids = st.sampled_from([f"r{i}" for i in range(8)])
    values = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False))
    table: dict[str, float | None] = dict(draw(st.dictionaries(ids, values, max_size=6)))
    docs: list[dict[str, Any]] = [{"type": "snapshot", "rows": dict(table)}]
    for _ in range(draw(st.integers(0, 25))):
        if draw(st.integers(0, 9)) == 0:
            table = dict(draw(st.dictionaries(ids, values, max_size=6)))
            docs.append({"type": "snapshot", "rows": dict(table)})
            continue
        upserts = draw(st.dictionaries(ids, values, max_size=3))
        deletable = sorted(set(table) - set(upserts))
        deleted = (
            draw(st.lists(st.sampled_from(deletable), unique=True, max_size=2)) if deletable else []
        )
        for row_id in deleted:
            del table[row_id]
        table.update(upserts)
        docs.append({"type": "update", "rows": upserts, "deleted": deleted})
    if draw(st.booleans()):
        docs.append({"type": "end", "rows": {}})
    return docs


def model(docs: list[dict[str, Any]], offsets: list[int]) -> list[tuple[int, str, Any, bool]]:
    """The contract's section 3, written as plainly as possible."""
    out: list[tuple[int, str, Any, bool]] = []
    table: dict[str, float | None] = {}
    for offset, doc in zip(offsets, docs, strict=True):
        if doc["type"] == "snapshot":
            out += [(offset, k, None, True) for k in table if k not in doc["rows"]]
            out += [(offset, k, v, False) for k, v in doc["rows"].items()]
            table = dict(doc["rows"])
        elif doc["type"] == "update":
            for k in doc["deleted"]:
                del table[k]
                out.append((offset, k, None, True))
            for k, v in doc["rows"].items():
                table[k] = v
                out.append((offset, k, v, False))
    return out


@settings(max_examples=150, deadline=None)
@given(
    many=st.lists(sessions(), min_size=1, max_size=4),
    cuts=st.lists(st.integers(0, 120), max_size=5),
    seed=st.integers(0, 99),
)
def test_machine_in_slices_equals_the_model(
    many: list[list[dict[str, Any]]], cuts: list[int], seed: int
) -> None:
    """Several sessions interleaved in one partition, cut anywhere, state saved between cuts."""
    import random

    rng = random.Random(seed)
    queues = [[(f"s{i}", seq, doc) for seq, doc in enumerate(docs)] for i, docs in enumerate(many)]
    merged: list[tuple[str, int, dict[str, Any]]] = []
    while any(queues):
        queue = rng.choice([q for q in queues if q])
        merged.append(queue.pop(0))
    records = []
    for offset, (session, seq, doc) in enumerate(merged):
        body = [{"id": k, "value": v, "status": None} for k, v in doc["rows"].items()]
        extra = {"deleted": doc["deleted"]} if doc["type"] == "update" else {}
        record = Rec(offset, key=session, seq=seq, type=doc["type"], rows=body, **extra)
        records.append(record)
    processor = TableProcessor()
    machine = PartitionMachine(processor, Rules())
    state: PartitionState[Table] = PartitionState.empty(TP, 0)
    rows: list[tuple[int, str, Any, bool]] = []
    bounds = sorted({0, len(records), *[c for c in cuts if c < len(records)]})
    for lo, hi in itertools.pairwise(bounds):
        result = machine.run(state, columns(records[lo:hi]))
        assert result.violations == []
        rows += rows_of(result)
        state = decode(encode(state, processor), processor, "test")  # as the store would
    for i, docs in enumerate(many):
        offsets = [o for o, (s, _, _) in enumerate(merged) if s == f"s{i}"]
        assert [r for r in rows if merged[r[0]][0] == f"s{i}"] == model(docs, offsets)


def test_record_columns_from_arrow_are_python_values_with_nulls_as_none() -> None:
    from app.sources.records import SCHEMA as KAFKA_SCHEMA

    batch = pa.RecordBatch.from_pydict(
        {
            "key": [b"s1", None, b"\xff"],
            "value": [b'{"a":1}', b"", None],
            "topic": ["t"] * 3,
            "partition": [0] * 3,
            "offset": [7, 8, 2**40],
            "timestamp": pa.array([1_000, 2_999, 0], pa.timestamp("us", "UTC")),
            "timestampType": [0] * 3,
            "headers": [None] * 3,
        },
        schema=KAFKA_SCHEMA,
    )
    keys, values, offsets, stamps = RecordColumns.from_arrow(batch)
    assert (keys, values) == ([b"s1", None, b"\xff"], [b'{"a":1}', b"", None])
    assert (offsets, stamps) == ([7, 8, 2**40], [1, 2, 0])
    assert all(type(o) is int for o in [*offsets, *stamps])


@pytest.mark.parametrize("mode", list(IntegrityMode))
def test_a_seq_or_ts_the_output_cannot_hold_is_refused_located_never_written_wrapped(
    mode: IntegrityMode,
) -> None:
    """The output holds seq as an int64 and ts as microseconds: a ts beyond years 1 to 9999
    (2**63 - 1 ms, made microseconds, wrapped to 1969) or a seq beyond 2**63 - 1 (written by
    the classes that do not check seqs) violates rule 7 where it is, in every class."""
    last, first = 253_402_300_799_999, -62_135_596_800_000  # 9999-12-31T23:59:59.999Z, year 1
    records = [
        snap(0, 0, {"a": 1}, ts=last, key="s0"),
        snap(1, 0, {"a": 1}, ts=first, key="s1"),
        snap(2, 0, {"a": 1}, ts=last + 1, key="s2"),
        snap(3, 0, {"a": 1}, ts=2**63 - 1, key="s3"),
        snap(4, 0, {"a": 1}, ts=first - 1, key="s4"),
        snap(5, 2**63, {"a": 1}, key="s5"),
    ]
    result, _ = run(records[:2] if mode is IntegrityMode.STRICT else records, mode)
    table = result.rows.to_table()
    assert table["ts"].to_pylist() == [
        datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
    ]
    if mode is IntegrityMode.STRICT:  # the first violation fails the batch: each alone
        for record in records[2:]:
            strict, _ = run([record], mode)
            assert [(v.offset, v.rule) for v in strict.violations] == [(record.offset, Rule(7))]
        return
    assert [(v.offset, v.rule) for v in result.violations] == [(o, Rule(7)) for o in (2, 3, 4, 5)]
    for violation in result.violations:
        assert "must be" in violation.describe() and "\n" not in violation.describe()
    assert [q.offset for q in result.quarantined] == [2, 3, 4, 5]
