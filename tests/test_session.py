"""The session machine: integrity rules 1 to 6, resync mode, ordering, state."""

from __future__ import annotations

import itertools
import random
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract import Position, Record
from app.errors import Rule
from app.processor import OutputRow, Table, TableProcessor
from app.session import IntegrityMode, SessionMachine, SessionState

SESSION = "s1"


def record(offset: int, partition: int = 0, topic: str = "sensor-1", key: str = SESSION,
           **doc: Any) -> Record:  # fmt: skip
    body = {"session": key, "ts": 1000 + offset, **doc}
    return Record(
        Position(topic, partition, offset), key.encode(), orjson.dumps(body), 1000 + offset
    )


def snap(offset: int, seq: int, rows: dict[str, float], **kw: Any) -> Record:
    docs = [{"id": k, "value": v, "status": "ok"} for k, v in rows.items()]
    return record(offset, seq=seq, type="snapshot", rows=docs, **kw)


def upd(offset: int, seq: int, rows: dict[str, float] | None = None,
        deleted: list[str] | None = None, **kw: Any) -> Record:  # fmt: skip
    docs = [{"id": k, "value": v, "status": "ok"} for k, v in (rows or {}).items()]
    return record(offset, seq=seq, type="update", rows=docs, deleted=deleted or [], **kw)


def end(offset: int, seq: int, **kw: Any) -> Record:
    return record(offset, seq=seq, type="end", **kw)


def strict() -> SessionMachine[Table]:
    return SessionMachine(TableProcessor(), IntegrityMode.STRICT)


def test_a_clean_session_produces_the_contract_rows() -> None:
    result = strict().apply(
        SESSION.encode(),
        None,
        [snap(0, 0, {"a": 1, "b": 2}), upd(1, 1, {"c": 3}, ["a"]), snap(2, 2, {"c": 4}), end(3, 3)],
    )
    assert result.violations == []
    assert [(r.offset, r.row_id, r.value, r.deleted) for r in result.rows] == [
        (0, "a", 1.0, False), (0, "b", 2.0, False),
        (1, "a", None, True), (1, "c", 3.0, False),
        (2, "c", 4.0, False), (2, "b", None, True),  # the resync drops b
    ]  # fmt: skip
    assert result.state is not None and result.state.closed and result.state.user is None


def test_records_are_applied_in_offset_order_whatever_order_they_arrive_in() -> None:
    records = [snap(0, 0, {"a": 1})] + [upd(i, i, {"a": float(i)}) for i in range(1, 30)]
    shuffled = records[:]
    random.Random(3).shuffle(shuffled)
    assert (
        strict().apply(SESSION.encode(), None, shuffled).rows
        == strict().apply(SESSION.encode(), None, records).rows
    )


def _first_violation(records: list[Record]) -> tuple[Rule, int, str, str]:
    result = strict().apply(SESSION.encode(), None, records)
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
    result = strict().apply(
        SESSION.encode(), None, [snap(0, 0, {"a": 1, "b": 2}), snap(1, 1, {"b": 5})]
    )
    assert result.violations == []
    assert result.state is not None and result.state.user == {"b": (5.0, "ok")}


def test_rule_4_delete_of_an_unknown_row() -> None:
    rule, offset, _, got = _first_violation([snap(0, 0, {"a": 1}), upd(1, 1, deleted=["zz"])])
    assert (rule, offset) == (Rule.DELETE_UNKNOWN_ROW, 1) and "'zz'" in got


def test_rule_5_nothing_after_end() -> None:
    rule, offset, _, _ = _first_violation([snap(0, 0, {"a": 1}), end(1, 1), upd(2, 2, {"a": 1})])
    assert (rule, offset) == (Rule.AFTER_END, 2)


def test_rule_6_a_session_stays_in_one_partition() -> None:
    rule, _offset, expected, got = _first_violation(
        [snap(0, 0, {"a": 1}), upd(0, 1, {"a": 2}, partition=1)]
    )
    assert (rule, expected, got) == (
        Rule.ONE_PARTITION,
        "topic sensor-1 partition 0",
        "topic sensor-1 partition 1",
    )


def test_rule_7_invalid_values_and_keys_are_located() -> None:
    bad = Record(Position("sensor-1", 0, 1), SESSION.encode(), b"{nope", 0)
    rule, offset, _, got = _first_violation([snap(0, 0, {"a": 1}), bad])
    assert (rule, offset) == (Rule.ENVELOPE, 1) and "not valid JSON" in got
    result = strict().apply(None, None, [Record(Position("t", 0, 7), None, b"{}", 0)])
    assert result.violations[0].rule is Rule.ENVELOPE and result.violations[0].offset == 7


def test_strict_mode_stops_at_the_first_violation() -> None:
    result = strict().apply(SESSION.encode(), None, [snap(0, 0, {"a": 1}), upd(1, 5), upd(2, 6)])
    assert len(result.violations) == 1
    assert result.messages == 2


def test_resync_quarantines_until_a_snapshot_re_establishes_the_session() -> None:
    machine = SessionMachine(TableProcessor(), IntegrityMode.RESYNC)
    records = [
        snap(0, 0, {"a": 1, "b": 2}), upd(1, 1, {"a": 3}),
        upd(2, 5, {"a": 9}),  # gap: quarantined
        upd(3, 6, {"a": 10}),  # awaiting a snapshot: quarantined
        snap(4, 7, {"b": 7}),  # re-establishes; a is dropped
        upd(5, 8, {"b": 8}),
    ]  # fmt: skip
    result = machine.apply(SESSION.encode(), None, records)
    assert [q.offset for q in result.quarantined] == [2, 3]
    assert "rule 2" in result.quarantined[0].reason
    assert "awaiting a snapshot" in result.quarantined[1].reason
    assert [(r.offset, r.row_id, r.deleted) for r in result.rows if r.offset >= 4] == [
        (4, "b", False), (4, "a", True), (5, "b", False)
    ]  # fmt: skip
    assert result.state is not None and result.state.quarantine is None


def test_resync_session_that_starts_badly_waits_for_any_snapshot() -> None:
    machine = SessionMachine(TableProcessor(), IntegrityMode.RESYNC)
    result = machine.apply(SESSION.encode(), None, [upd(0, 3, {"a": 1}), snap(1, 4, {"a": 2})])
    assert [q.offset for q in result.quarantined] == [0]
    assert [(r.offset, r.row_id) for r in result.rows] == [(1, "a")]


def test_adopted_sessions_may_begin_with_a_resync_snapshot() -> None:
    records = [snap(10, 4, {"a": 1}), upd(11, 5, {"a": 2})]
    assert strict().apply(SESSION.encode(), None, records).violations
    adopted = SessionMachine(TableProcessor(), IntegrityMode.STRICT, adopt={SESSION: 10})
    result = adopted.apply(SESSION.encode(), None, records)
    assert result.violations == []
    # The adopted snapshot's rows were published before the repair: only later rows.
    assert [(r.offset, r.row_id) for r in result.rows] == [(11, "a")]
    assert result.state is not None and result.state.user == {"a": (2.0, "ok")}
    # An adopted session must still begin with a snapshot.
    assert adopted.apply(SESSION.encode(), None, [upd(10, 4, {"a": 1})]).violations


def test_traced_sessions_report_every_message() -> None:
    machine = SessionMachine(TableProcessor(), trace=frozenset({SESSION}))
    result = machine.apply(
        SESSION.encode(), None, [snap(0, 0, {"a": 1, "b": 1}), upd(1, 1, {"a": 2})]
    )
    assert [(t.position.offset, t.seq, t.rows, t.outcome) for t in result.trace] == [
        (0, 0, 2, "applied"), (1, 1, 1, "applied")
    ]  # fmt: skip


# -- property: the machine, fed in arbitrary batches, equals a simple model ----------------


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


def model(docs: list[dict[str, Any]]) -> list[tuple[int, str, float | None, bool]]:
    """The contract's section 3, written as plainly as possible."""
    out: list[tuple[int, str, float | None, bool]] = []
    table: dict[str, float | None] = {}
    for offset, doc in enumerate(docs):
        if doc["type"] == "snapshot":
            out += [(offset, k, v, False) for k, v in doc["rows"].items()]
            out += [(offset, k, None, True) for k in table if k not in doc["rows"]]
            table = dict(doc["rows"])
        elif doc["type"] == "update":
            for k in doc["deleted"]:
                del table[k]
                out.append((offset, k, None, True))
            for k, v in doc["rows"].items():
                table[k] = v
                out.append((offset, k, v, False))
    return out


@settings(max_examples=200, deadline=None)
@given(docs=sessions(), cuts=st.lists(st.integers(0, 30), max_size=4), seed=st.integers(0, 99))
def test_machine_in_batches_equals_the_model(
    docs: list[dict[str, Any]], cuts: list[int], seed: int
) -> None:
    records = []
    for seq, doc in enumerate(docs):
        body = [{"id": k, "value": v, "status": None} for k, v in doc["rows"].items()]
        extra = {"deleted": doc["deleted"]} if doc["type"] == "update" else {}
        records.append(record(seq, seq=seq, type=doc["type"], rows=body, **extra))
    processor = TableProcessor()
    machine = SessionMachine(processor)
    state: SessionState[Table] | None = None
    rows: list[OutputRow] = []
    bounds = sorted({0, len(records), *[c for c in cuts if c < len(records)]})
    for lo, hi in itertools.pairwise(bounds):
        batch = records[lo:hi]
        random.Random(seed).shuffle(batch)  # Spark's shuffle keeps no order
        result = machine.apply(SESSION.encode(), state, batch)
        assert result.violations == []
        rows += result.rows
        state = result.state
        if state is not None and state.user is not None:  # as the state store would
            state.user = processor.decode(processor.encode(state.user))
    assert [(r.offset, r.row_id, r.value, r.deleted) for r in rows] == model(docs)
