"""Rows of declared schemas: the typed decoding against the full checks and against a
plain-Python model of the table, over generated schemas and captures; every bad-row kind
of rule 7, located, in strict and resync modes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract import values
from app.contract.envelope import EnvelopeParser
from app.contract.offsets import TopicPartition
from app.contract.schema import Column, TableSchema, parse_schema
from app.contract.table_processor import TableProcessor
from app.engine.in_process import run_partitions
from app.engine.machine import IntegrityMode, PartitionMachine, RecordColumns, Rules
from app.engine.state import PartitionState
from app.errors import EnvelopeError, Rule
from app.tools import generate as gen
from tests.generated_schemas import capture as generated_capture
from tests.generated_schemas import schemas


def _records(capture: gen.Capture, tp: TopicPartition) -> Iterator[RecordColumns]:
    messages = capture.partitions[tp]
    yield RecordColumns(
        [m.session.encode() for m in messages],
        [m.value for m in messages],
        list(range(len(messages))),
        [m.ts for m in messages],
    )


def _model(schema: TableSchema, capture: gen.Capture) -> list[tuple[Any, ...]]:
    """The output rows as a plain Python model of CONTRACT.md section 3 computes them, from
    the JSON text with exact numbers, one session table (a dict by key) at a time."""
    keys = [schema.columns[i] for i in schema.key_indexes]
    rows: list[tuple[Any, ...]] = []
    for tp, messages in sorted(capture.partitions.items()):
        tables: dict[str, dict[Any, tuple[Any, ...]]] = {}
        for offset, message in enumerate(messages):
            doc = json.loads(message.value, parse_float=Decimal)
            table = tables.setdefault(doc["session"], {})
            head = (tp.topic, tp.partition, offset, doc["session"], doc["seq"], doc["type"])

            def typed(raw: dict[str, Any], columns: list[Column]) -> tuple[Any, ...]:
                return tuple(values.check(c, raw.get(c.name), "model") for c in columns)

            def key_of(item: Any) -> Any:
                return (
                    typed(item, keys)
                    if isinstance(item, dict)
                    else typed({keys[0].name: item}, keys)
                )

            def gone(key: Any, head: tuple[Any, ...] = head) -> tuple[Any, ...]:
                cells: list[Any] = [None] * len(schema.columns)
                for i, value in zip(schema.key_indexes, key, strict=True):
                    cells[i] = value
                return (*head, *cells, True)

            new = {}
            for raw in doc.get("rows") or []:
                row = typed(raw, list(schema.columns))
                new[tuple(row[i] for i in schema.key_indexes)] = row
            if doc["type"] == "snapshot":
                rows += [gone(k) for k in table if k not in new]
                table.clear()
            elif doc["type"] == "update":
                for item in doc.get("deleted") or []:
                    rows.append(gone(key_of(item)))
                    del table[key_of(item)]
            else:
                del tables[doc["session"]]
            table.update(new)
            rows += [(*head, *row, False) for row in new.values()]
    return rows


@settings(max_examples=60, deadline=None)
@given(schemas(), st.integers(0, 2**16), st.sampled_from([0, 3]))
def test_declared_rows_are_exactly_what_a_plain_model_of_the_contract_computes(
    schema: TableSchema, seed: int, resync: int
) -> None:
    capture = generated_capture(schema, seed, resync)
    parser = EnvelopeParser(schema)
    for messages in capture.partitions.values():
        for message in messages:  # the typed decoding gives what the full checks give
            fast = parser(message.session, message.value)
            assert fast == parser.parse_full(message.session, message.value)
    outcome = run_partitions(
        sorted(capture.partitions),
        lambda tp: _records(capture, tp),
        TableProcessor(schema),
        Rules(IntegrityMode.STRICT),
    )
    assert outcome.violations == []
    table = outcome.rows()
    got = [
        (*r[:6], *r[7:-1], r[-1])  # every column but ts (the model keeps no record times)
        for r in zip(*(table.column(i).to_pylist() for i in range(table.num_columns)), strict=True)
    ]
    assert got == _model(schema, capture)


WIDE = parse_schema(
    """
    [key]
    columns = ["site", "id"]
    [columns]
    site  = "string"
    id    = "int64"
    n     = { type = "int64", nullable = true }
    x     = { type = "float64", nullable = true }
    on    = { type = "bool", nullable = true }
    at    = { type = "timestamp", nullable = true }
    day   = { type = "date", nullable = true }
    price = { type = "decimal(6,2)", nullable = true }
    name  = "string"
    """,
    "wide.toml",
)


def _snapshot(*rows: dict[str, Any], seq: int = 0) -> bytes:
    return orjson.dumps(
        {"session": "s1", "seq": seq, "type": "snapshot", "ts": 1, "rows": list(rows)}
    )


def _row(**fields: Any) -> dict[str, Any]:
    return {"site": "a", "id": 1, "name": "n", **fields}


BAD_ROWS = [
    ("int64 beyond 64 bits", _snapshot(_row(n=2**63)), "n", "outside the signed 64-bit range"),
    ("int64 given 1.0", _snapshot(_row(n=1.0)), "n", "number 1.0"),
    ("int64 given true", _snapshot(_row(n=True)), "n", "true"),
    (
        "int64 given 1e2",
        b'{"session":"s1","seq":0,"type":"snapshot","ts":1,"rows":[{"site":"a","id":1,"name":"n","n":1e2}]}',
        "n",
        "number 1E+2",
    ),
    ("float64 given true", _snapshot(_row(x=True)), "x", "true"),
    ("float64 given a string", _snapshot(_row(x="1.5")), "x", "string '1.5'"),
    ("bool given 1", _snapshot(_row(on=1)), "on", "number 1"),
    ("decimal beyond its scale", _snapshot(_row(price="1.234")), "price", "string '1.234'"),
    ("decimal beyond its precision", _snapshot(_row(price=12345.6)), "price", "number 12345.6"),
    ("decimal not a number string", _snapshot(_row(price="1e3")), "price", "string '1e3'"),
    (
        "timestamp without an offset",
        _snapshot(_row(at="2026-01-01T00:00:00")),
        "at",
        "string '2026-01-01T00:00:00'",
    ),
    (
        "timestamp not RFC 3339",
        _snapshot(_row(at="2026-13-01T00:00:00Z")),
        "at",
        "string '2026-13-01T00:00:00Z'",
    ),
    (
        "timestamp offset without its colon",
        _snapshot(_row(at="2026-01-01T00:00:00+0530")),
        "at",
        "string '2026-01-01T00:00:00+0530' (an offset is Z or +HH:MM)",
    ),
    (
        "timestamp joined by a space",
        _snapshot(_row(at="2026-01-01 00:00:00Z")),
        "at",
        "string '2026-01-01 00:00:00Z' (the date and the time are joined by T)",
    ),
    (
        "timestamp finer than microseconds",
        _snapshot(_row(at="2026-01-01T23:59:59.9999995Z")),
        "at",
        "string '2026-01-01T23:59:59.9999995Z' (at most six decimals of a second)",
    ),
    (
        "timestamp in nanoseconds with an offset",
        _snapshot(_row(at="2026-01-01T00:00:00.123456789+05:30")),
        "at",
        "string '2026-01-01T00:00:00.123456789+05:30' (at most six decimals of a second)",
    ),
    (
        "timestamp before year 1 in UTC",
        _snapshot(_row(at="0001-01-01T00:30:00+01:00")),
        "at",
        "string '0001-01-01T00:30:00+01:00' (outside years 1 to 9999 in UTC)",
    ),
    (
        "timestamp after year 9999 in UTC",
        _snapshot(_row(at="9999-12-31T23:30:00-01:00")),
        "at",
        "string '9999-12-31T23:30:00-01:00' (outside years 1 to 9999 in UTC)",
    ),
    ("timestamp as a float", _snapshot(_row(at=1.5)), "at", "number 1.5"),
    ("date not YYYY-MM-DD", _snapshot(_row(day="2026-1-2")), "day", "string '2026-1-2'"),
    ("date that does not exist", _snapshot(_row(day="2026-02-30")), "day", "string '2026-02-30'"),
    ("key column missing", _snapshot({"site": "a", "name": "n"}), "id", "no field 'id'"),
    ("key column null", _snapshot(_row(site=None)), "site", "null"),
    ("non-nullable column null", _snapshot(_row(name=None)), "name", "null"),
    ("non-nullable column missing", _snapshot({"site": "a", "id": 1}), "name", "no field 'name'"),
]


@pytest.mark.parametrize("mode", list(IntegrityMode))
@pytest.mark.parametrize(("kind", "value", "column", "got"), BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_each_bad_row_kind_violates_rule_7_located_with_column_expected_and_got(
    kind: str, value: bytes, column: str, got: str, mode: IntegrityMode
) -> None:
    tp = TopicPartition("sensor-9", 3)
    machine = PartitionMachine(TableProcessor(WIDE), Rules(mode))
    records = RecordColumns([b"s1"], [value], [41], [1_000])
    result = machine.run(PartitionState.empty(tp, 41), records)
    assert len(result.violations) == 1, kind
    v = result.violations[0]
    assert (v.topic, v.partition, v.offset, v.session, v.rule) == ("sensor-9", 3, 41, "s1", Rule(7))
    assert v.column == column and got in v.got and "rows[0]" in v.got
    assert v.expected == values.expected(WIDE.column(column))  # type: ignore[arg-type]
    line = v.describe()
    assert "topic sensor-9 partition 3 offset 41, session 's1'" in line
    assert f"column {column!r}" in line and "\n" not in line
    if mode is not IntegrityMode.STRICT:  # set aside with the reason, the job goes on
        assert [q.offset for q in result.quarantined] == [41]
        assert column in result.quarantined[0].reason or got in result.quarantined[0].reason
    else:
        assert result.quarantined == []


def test_a_snapshot_holding_one_key_twice_violates_rule_7() -> None:
    machine = PartitionMachine(TableProcessor(WIDE), Rules())
    value = _snapshot(_row(), _row(n=2))
    result = machine.run(
        PartitionState.empty(TopicPartition("t", 0), 0),
        RecordColumns([b"s1"], [value], [0], [0]),
    )
    v = result.violations[0]
    assert v.rule is Rule.ENVELOPE and v.expected == "unique keys in a snapshot"
    assert "('a', 1)" in v.got


def test_deletes_name_rows_by_key_object_or_bare_value_typed_like_rows() -> None:
    schema = parse_schema(
        '[key]\ncolumns = ["at"]\n[columns]\nat = "timestamp"\nv = { type = "int64", '
        "nullable = true }\n",
        "t.toml",
    )
    parser = EnvelopeParser(schema)
    update = orjson.dumps(
        {
            "session": "s",
            "seq": 1,
            "type": "update",
            "ts": 1,
            "deleted": [{"at": "1970-01-01T01:00:00+01:00"}, 1000],
        }
    )
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    assert list(parser("s", update).deleted) == [epoch, epoch + timedelta(seconds=1)]
    with pytest.raises(EnvelopeError, match=r"deleted\[0\]\.at"):
        parser("s", update.replace(b"+01:00", b""))
    # A key is a row's value: the same offsets and years refused, with where.
    for bad, why in ((b"+0100", "an offset is Z or"), (b"+01:00", "outside years 1 to 9999")):
        edge = update.replace(b"1970-01-01T01:00:00+01:00", b"0001-01-01T00:30:00" + bad)
        with pytest.raises(EnvelopeError, match=rf"deleted\[0\]\.at is .*\({why}"):
            parser("s", edge)


def test_a_traced_message_names_its_keys_in_the_declared_key_columns() -> None:
    machine = PartitionMachine(TableProcessor(WIDE), Rules(trace=frozenset({"s1"})))
    rows = [_row(id=i) for i in range(5)]
    update = orjson.dumps(
        {"session": "s1", "seq": 1, "type": "update", "ts": 2, "deleted": [{"site": "a", "id": 0}]}
    )
    result = machine.run(
        PartitionState.empty(TopicPartition("t", 0), 0),
        RecordColumns([b"s1", b"s1"], [_snapshot(*rows), update], [0, 1], [0, 0]),
    )
    assert [(t.outcome, t.keys) for t in result.trace] == [
        ("applied", "rows (site, id): (a, 0), (a, 1), (a, 2) and 2 more"),
        ("applied", "deleted: (a, 0)"),
    ]


def test_every_fault_of_a_declared_schemas_capture_violates_where_generate_says() -> None:
    faults = tuple(f for f in gen.Fault if f is not gen.Fault.ARCHIVE_HOLE)
    spec = gen.CaptureSpec(sessions=len(faults) + 3, updates=20, faults=faults, schema=WIDE)
    capture = gen.generate(spec)
    outcome = run_partitions(
        sorted(capture.partitions),
        lambda tp: _records(capture, tp),
        TableProcessor(WIDE),
        Rules(IntegrityMode.RESYNC),
    )
    found = {(v.topic, v.partition, v.offset, v.rule) for v in outcome.violations}
    assert found == {
        (f.topic, f.partition, f.offset, gen.FAULT_RULES[f.fault]) for f in capture.faults
    }
    assert len(capture.faults) == len(faults)


# JSON texts of a float64, a decimal(6,2) and a timestamp column: the forms a column-wise
# reading takes at once (plain literals, exactly scaled decimals), the ones it reads one by
# one (exponents, leading zeros, escapes, the integer -0) and the ones the checks refuse.
_FLOATS = [
    b"0.5",
    b"-0",
    b"3",
    b"1e+300",
    b"1.7976931348623157e308",
    b"5e-324",
    b"-2.5e-300",
    b"1e400",
    b"null",
    b"true",
    b'"1.5"',
    b'"a,b"',
    b"[1,2]",
    b"18446744073709551617",
    b"0",
    b"-0.0",
    b"1E5",
    b"123456789012345678901234567890",
    b"-1.5e-320",
]
_DECIMALS = [
    b"1.25",
    b'"1.25"',
    b"1.5",
    b'"-0"',
    b"0",
    b"9999.99",
    b"10000",
    b"1.5e1",
    b'"0012.5"',
    b'"1.\\u0035"',
    b"1.255",
    b"null",
    b'"x"',
    b"true",
    b'"1,5"',
]
_TIMES = [
    b"0",
    b"1700000000123",
    b'"2026-01-01T00:00:00+05:30"',
    b'"2026-01-01T00:00:00Z"',
    b"null",
    b'"2026-01-01T00:00:00"',
    b"1.5",
    b"253402300800000",
    b'"2026-01-01T00:00:00+0530"',
    b'"0001-01-01T00:30:00+01:00"',
    b'"0001-01-01T00:30:00-01:00"',
    b'"9999-12-31T23:30:00-01:00"',
    b'"2026-01-01t00:00:00.1234567z"',
    b'"2026-01-01t00:00:00.123456z"',
    b'"2026-01-01T00:00:00.123456-05:30"',
    b'"2026-01-01T00:00:00.1234567+05:30"',
    b'"2026-01-01 00:00:00Z"',
    b'"2026"',
]
_COLUMN_WISE = parse_schema(
    '[key]\ncolumns = ["id"]\n[columns]\nid = "int64"\n'
    'x = { type = "float64", nullable = true }\ny = "float64"\n'
    'price = { type = "decimal(6,2)", nullable = true }\n'
    'at = { type = "timestamp", nullable = true }\n',
    "column-wise.toml",
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(_FLOATS),
                st.sampled_from(_FLOATS[:7]),
                st.sampled_from(_DECIMALS),
                st.sampled_from(_TIMES),
            ),
            max_size=4,
        ),
        min_size=1,
        max_size=6,
    )
)
def test_a_slice_parsed_together_gives_what_each_message_parsed_alone_gives(
    messages: list[list[tuple[bytes, bytes, bytes, bytes]]],
) -> None:
    """The column-wise reading of a slice's rows (the path without the compiled decoder)
    against each message alone and the full checks: the same envelopes, and the same
    located line for each refused message."""
    parser = EnvelopeParser(_COLUMN_WISE, native=False)
    values = [
        b'{"session":"s","seq":0,"type":"snapshot","ts":1,"rows":['
        + b",".join(
            b'{"id":%d,"x":%s,"y":%s,"price":%s,"at":%s}' % (i, *row) for i, row in enumerate(rows)
        )
        + b"]}"
        for rows in messages
    ]

    def parsed(parse: Any, value: bytes) -> Any:
        try:
            return parse("s", value)
        except EnvelopeError as exc:
            return str(exc)

    together = parser.over(values)
    for value in values:
        alone = parsed(parser, value)
        assert repr(parsed(together, value)) == repr(alone)  # decimals' scales and all
        full = parsed(parser.parse_full, value)
        assert repr(alone) == repr(full)  # a zero's sign too (0.0 == -0.0)
        if not isinstance(alone, str):
            assert all(type(row) is tuple for row in alone.rows)
            assert _scales(alone) == _scales(full)
            assert all(scale == -2 for row in _scales(alone) for scale in row)


def _scales(envelope: Any) -> list[list[object]]:
    return [[v.as_tuple().exponent for v in row if isinstance(v, Decimal)] for row in envelope.rows]


# JSON text is UTF-8 (RFC 8259): a value holding a byte that is not, wherever it is, is not
# valid JSON. Each place a decoder reads a string from: the parsers' fast paths decode some
# as they go, and must send the value to the full checks, never raise past them.
_NOT_UTF8 = {
    "session": _snapshot(_row()).replace(b'"session":"s1"', b'"session":"s1\xff"'),
    "string column": _snapshot(_row(name="n\xff")),
    "key column": _snapshot(_row(site="a\xff")),
    "decimal string": _snapshot(_row(price="1.5\xff")),
    "timestamp string": _snapshot(_row(at="2026-01-01T00:00:00Z\xff")),
    "date string": _snapshot(_row(day="2026-01-01\xff")),
    "undeclared row field": _snapshot(_row(extra="e\xff")),
    "undeclared envelope field": _snapshot(_row()).replace(b'"ts":1', b'"ts":1,"note":"\xff"'),
    "deleted key object": orjson.dumps(
        {"session": "s1", "seq": 1, "type": "update", "ts": 1, "deleted": [{"site": "a\xff"}]}
    ),
}


@pytest.mark.parametrize("mode", list(IntegrityMode))
@pytest.mark.parametrize("where", list(_NOT_UTF8))
def test_a_value_that_is_not_utf8_anywhere_violates_rule_7_located(
    where: str, mode: IntegrityMode
) -> None:
    """Alone and in a slice with others: a located rule-7 line (in resync modes, the message
    set aside and the slice's next session's message applied), never an error past the
    parser."""
    value = _NOT_UTF8[where].replace("\xff".encode(), b"\xff")
    assert b"\xff" in value and b"\xc3\xbf" not in value
    parser = EnvelopeParser(WIDE)
    for parse in (parser, parser.over([value, _snapshot(_row())])):
        with pytest.raises(EnvelopeError, match="not valid JSON: not UTF-8"):
            parse("s1", value)

    tp = TopicPartition("sensor-9", 3)
    machine = PartitionMachine(TableProcessor(WIDE), Rules(mode))
    other = _snapshot(_row()).replace(b'"s1"', b'"s2"')
    records = RecordColumns([b"s1", b"s2"], [value, other], [41, 42], [1_000, 1_000])
    result = machine.run(PartitionState.empty(tp, 41), records)
    (v,) = result.violations
    assert (v.topic, v.partition, v.offset, v.session, v.rule) == ("sensor-9", 3, 41, "s1", Rule(7))
    assert "not UTF-8" in v.describe() and "\n" not in v.describe()
    if mode is not IntegrityMode.STRICT:
        assert [q.offset for q in result.quarantined] == [41]
        assert len(result.rows) == 1  # s2's snapshot, after the refused message


_MUTATED_BASES = [
    _snapshot(
        _row(n=5, x=1.5, on=True, at="2026-01-01T00:00:00.5+05:30", day="2026-02-03", price="12.5"),
        _row(id=2, at=1_700_000_000_000, price=3),
    ),
    orjson.dumps(
        {
            "session": "s1",
            "seq": 1,
            "type": "update",
            "ts": 1,
            "rows": [_row(price="1.00")],
            "deleted": [{"site": "a", "id": 7}],
        }
    ),
]


@pytest.mark.parametrize("native", [True, False], ids=["compiled", "msgspec"])
@settings(max_examples=1500, deadline=None)
@given(
    st.sampled_from(_MUTATED_BASES),
    st.lists(
        st.tuples(st.integers(0, 300), st.binary(max_size=3), st.booleans()), min_size=1, max_size=3
    ),
)
def test_any_bytes_parse_as_the_full_checks_say_alone_and_in_a_slice(
    native: bool, base: bytes, edits: list[tuple[int, bytes, bool]]
) -> None:
    """A valid value with bytes overwritten or inserted anywhere (a stray byte in a string, a
    broken literal, a cut structure): the fast paths give the full checks' envelope or their
    line, never another error."""
    mutated = bytearray(base)
    for where, data, overwrite in edits:
        at = where % (len(mutated) + 1)
        mutated[at : at + len(data) if overwrite else at] = data
    value = bytes(mutated)
    parser = EnvelopeParser(WIDE, native=native)

    def said(parse: Any) -> str:
        try:
            envelope = parse("s1", value)
        except EnvelopeError as exc:
            return str(exc)
        return repr((*envelope[:4], list(envelope.rows), list(envelope.deleted)))

    full = said(parser.parse_full)
    assert said(parser) == full
    assert said(parser.over([value, base])) == full
