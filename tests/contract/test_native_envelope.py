"""The compiled decoder (app/contract/_envelope.c) against the parser's own paths.

It may only ever be a faster way to the same envelope: whatever it decodes, the full
checks (``parse_full``) give identically (types, a zero's sign, a decimal's scale, a
time's offset); whatever it leaves (None), the parser's other paths judge. The
canonical forms the contract spells, which captures hold, it must take itself, or
the job is no faster for it. Its store (``decode_into``, the built-in processor's
path) is held to the same: the rows it keeps read back as those tuples, its buffers
are pyarrow's conversion of them, and a value it leaves leaves nothing in it.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract.envelope import EnvelopeParser, native_decoder_built
from app.contract.schema import TableSchema, parse_schema
from app.engine.output import _arrays, _row_struct
from app.errors import EnvelopeError
from tests.generated_schemas import capture, schemas

SCHEMA = parse_schema(
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
    whole = { type = "decimal(3,0)", nullable = true }
    name  = "string"
    """,
    "native.toml",
)
DECIMAL_KEY = parse_schema(
    '[key]\ncolumns = ["k"]\n[columns]\nk = "decimal(5,1)"\n'
    'v = { type = "string", nullable = true }',
    "decimal_key.toml",
)


def _said(parse: Any, key: str, value: bytes) -> str:
    """An envelope in full (every type and scale in its repr), or the parser's line."""
    try:
        envelope = parse(key, value)
    except EnvelopeError as exc:
        return f"refused: {exc}"
    return repr((*envelope[:4], list(envelope.rows), list(envelope.deleted)))


def _check(schema: TableSchema, value: bytes, key: str = "s1") -> bool:
    """The decoder's envelope is the full checks' (when it takes the value), and the
    parser's answer is the one it gives without the decoder; whether it took the value."""
    parser = EnvelopeParser(schema)
    decode = parser._native
    assert decode is not None
    found = decode(value)
    full = _said(parser.parse_full, key, value)
    if found is not None and found[0] == key:
        assert _said(parser, key, value) == full
        assert not full.startswith("refused")
    python = EnvelopeParser(schema, native=False)
    assert _said(parser, key, value) == _said(python, key, value)
    _check_store(parser, value, found)
    return found is not None


def _check_store(parser: EnvelopeParser, value: bytes, found: Any) -> None:
    """``decode_into`` takes what ``decode`` takes (but a decimal's negative zero, which
    only a Decimal keeps), its rows read back as ``decode``'s, and its buffers are
    pyarrow's of them; what it leaves, it leaves out of the store. Twice into one store:
    the second lands after the first."""
    decoder = parser._decoder
    assert decoder is not None
    store = parser.store()
    assert store is not None
    got = decoder.decode_into(value, store)
    again = decoder.decode_into(value, store)
    if got is None:
        assert again is None and len(store) == 0
        assert found is None or any(
            isinstance(cell, Decimal) and cell.is_zero() and cell.is_signed()
            for row in found[4]
            for cell in row
        ), "the store left a value decode takes"
        return
    assert found is not None and again is not None, "the store took a value decode leaves"
    session, seq, kind, ts, span, deleted = got
    keys = span.keys if span else []
    assert (span.first if span else 0, again[4].first if again[4] else len(keys)) == (0, len(keys))
    assert repr((session, seq, kind, ts, deleted)) == repr((*found[:4], found[5]))
    rows = list(found[4])
    n = len(rows)
    assert repr(store.rows(range(n))) == repr(rows)
    assert repr(store.rows(range(n, 2 * n))) == repr(rows)
    indexes = parser.schema.key_indexes
    assert repr(list(keys)) == repr(
        [row[indexes[0]] if len(indexes) == 1 else tuple(row[i] for i in indexes) for row in rows]
    )
    if rows:
        schema = parser.schema
        expected = pa.array(rows + rows, _row_struct(schema)).flatten()
        for column, want in zip(_arrays(schema, store.columns(), 2 * n), expected, strict=True):
            column.validate(full=True)
            assert column.equals(want)


def test_the_compiled_decoder_is_built_here() -> None:
    """`make setup` builds it (gcc and Python's headers); without it the job is slower."""
    assert native_decoder_built(), "app/contract/_envelope.c is not built: run make setup"


def _message(*rows: dict[str, Any], **fields: Any) -> bytes:
    envelope = {"session": "s1", "seq": 0, "type": "snapshot", "ts": 1, "rows": list(rows)}
    return orjson.dumps({**envelope, **fields})


def _row(**fields: Any) -> dict[str, Any]:
    return {"site": "a", "id": 1, "name": "n", **fields}


def _raw_row(cells: bytes) -> bytes:
    """A snapshot of one row written as given: ``cells`` beside the key and name."""
    given = {name for name in (b"site", b"id", b"name") if b'"%s":' % name in cells}
    defaults = [b'"site":"a"', b'"id":1', b'"name":"n"']
    row = b",".join([d for d in defaults if d.split(b":")[0].strip(b'"') not in given] + [cells])
    return b'{"session":"s1","seq":0,"type":"snapshot","ts":1,"rows":[{%s}]}' % row


# What captures hold and the contract spells: each taken by the decoder itself.
TAKEN = {
    "plain row": _message(_row()),
    "every column null": _message(_row(n=None, x=None, on=None, at=None, day=None, price=None)),
    "int64 ends": _message(_row(n=-(2**63)), _row(id=2, n=2**63 - 1)),
    "float negative zero": _raw_row(b'"x":-0.0'),
    "float integer -0 is 0.0": _raw_row(b'"x":-0'),
    "float exponent": _raw_row(b'"x":1.5e-300'),
    "float integer beyond int64": _raw_row(b'"x":123456789012345678901234567890'),
    "time Z and six decimals": _message(_row(at="2026-01-01T00:00:00.123456Z")),
    "time one decimal": _message(_row(at="2026-01-01T00:00:00.5Z")),
    "time east offset": _message(_row(at="2026-06-30T23:59:59+05:30")),
    "time west offset": _message(_row(at="1969-12-31T23:59:59-08:00")),
    "time -00:00": _message(_row(at="2026-01-01T00:00:00-00:00")),
    "time leap day": _message(_row(at="2024-02-29T12:00:00Z")),
    "epoch ms": _message(_row(at=1_700_000_000_123)),
    "epoch ms before 1970": _message(_row(at=-1)),
    "epoch ms first and last": _message(
        _row(at=-62_135_596_800_000), _row(id=2, at=253_402_300_799_999)
    ),
    "date": _message(_row(day="2024-02-29")),
    "decimal number padded": _raw_row(b'"price":1.5'),
    "decimal string padded": _message(_row(price="-1.5")),
    "decimal integer": _raw_row(b'"price":-3'),
    "decimal zero negative": _raw_row(b'"price":-0.0'),
    "decimal at its precision": _message(_row(price="9999.99")),
    "decimal scale 0": _raw_row(b'"whole":999'),
    "string escapes": _message(_row(name='q " b \\ / \b \f \n \r \t')),
    "string unicode escapes": _raw_row(b'"name":"\\u00e9\\u65e5\\ud83d\\ude42\\u0000"'),
    "string UTF-8": _message(_row(name="\u00e9\u65e5\U0001f642")),
    "whitespace between tokens": b' { "session" : "s1" ,\n"seq":0,\t"type":"snapshot","ts":1,'
    b'"rows":[ {"site":"a","id":1,"name":"n"} ] } ',
    "update with deletes": _message(type="update", rows=[], deleted=[{"site": "a", "id": 1}]),
    "update deletes only": orjson.dumps(
        {"session": "s1", "seq": 1, "type": "update", "ts": 1, "deleted": [{"site": "a", "id": 2}]}
    ),
    "update rows null": orjson.dumps(
        {"session": "s1", "seq": 1, "type": "update", "ts": 1, "rows": None, "deleted": []}
    ),
    "end": orjson.dumps({"session": "s1", "seq": 3, "type": "end", "ts": 1}),
    "end empty rows": orjson.dumps({"session": "s1", "seq": 3, "type": "end", "ts": 1, "rows": []}),
    "snapshot empty deleted": _message(_row(), deleted=[]),
    "session with escapes": _message(_row(), session="s\u00e91\n").replace(b"s1", b"s1"),
}
# What the decoder leaves to the parser's paths, which accept it or name what is wrong.
LEFT = {
    "undeclared row field": _message(_row(extra=1)),
    "undeclared envelope field": _message(_row(), note="x"),
    "repeated field": _raw_row(b'"n":1,"n":2'),
    "repeated name": _raw_row(b'"name":"n","name":"m"'),
    "repeated envelope field": (
        b'{"session":"s1","seq":0,"seq":0,"type":"snapshot","ts":1,"rows":[]}'
    ),
    "time in year 1": _message(_row(at="0001-01-01T00:00:00+01:00")),
    "time in year 9999": _message(_row(at="9999-12-31T23:59:59-01:00")),
    "time lowercase t": _message(_row(at="2026-01-01t00:00:00Z")),
    "time without offset": _message(_row(at="2026-01-01T00:00:00")),
    "time seven decimals": _message(_row(at="2026-01-01T00:00:00.1234567Z")),
    "time second 60": _message(_row(at="2026-01-01T23:59:60Z")),
    "time +24:00": _message(_row(at="2026-01-01T00:00:00+24:00")),
    "time +0530": _message(_row(at="2026-01-01T00:00:00+0530")),
    "time escaped": _raw_row(b'"at":"2026-01-01T00:00:00\\u005a"'),
    "date 30 February": _message(_row(day="2023-02-30")),
    "date year 0": _message(_row(day="0000-01-01")),
    "epoch ms past year 9999": _message(_row(at=253_402_300_800_000)),
    "epoch ms as a float": _raw_row(b'"at":1.0'),
    "int64 past its range": _raw_row(b'"n":9223372036854775808'),
    "int64 given 1.0": _raw_row(b'"n":1.0'),
    "int64 given 1e2": _raw_row(b'"n":1e2'),
    "int64 leading zero": _raw_row(b'"n":01'),
    "float infinite": _raw_row(b'"x":1e400'),
    "float a string": _message(_row(x="1.5")),
    "decimal exponent": _raw_row(b'"price":1.5e1'),
    "decimal beyond its scale": _message(_row(price="1.234")),
    "decimal trailing zeros past its scale": _message(_row(price="1.500")),
    "decimal beyond its precision": _message(_row(price="12345.6")),
    "decimal string leading zero": _message(_row(price="01.5")),
    "decimal string plus": _message(_row(price="+1.5")),
    "decimal string space": _message(_row(price=" 1.5")),
    "decimal string point first": _message(_row(price=".5")),
    "lone surrogate": _raw_row(b'"name":"\\ud83d"'),
    "unknown escape": _raw_row(b'"name":"\\x41"'),
    "control character": _raw_row(b'"name":"a\x01b"'),
    "not UTF-8": _message(_row()).replace(b'"name":"n"', b'"name":"n\xff"'),
    "null not nullable": _message(_row(name=None)),
    "key column absent": _message({"site": "a", "name": "n"}),
    "bool given 1": _raw_row(b'"on":1'),
    "trailing bytes": _message(_row()) + b"x",
    "snapshot with deletes": _message(_row(), deleted=[{"site": "a", "id": 1}]),
    "end with rows": _message(_row(), type="end"),
    "update without rows or deletes": orjson.dumps(
        {"session": "s1", "seq": 1, "type": "update", "ts": 1}
    ),
    "seq negative": _message(_row(), seq=-1),
    "ts past year 9999": _message(_row(), ts=253_402_300_800_000),
    "type unknown": _message(_row(), type="upsert"),
    "session not a string": _message(_row(), session=1),
    "not an object": b"[1,2]",
    "deleted key bare for a composite key": _message(type="update", rows=[], deleted=["a"]),
}


@pytest.mark.parametrize("name", list(TAKEN))
def test_canonical_forms_are_decoded_as_the_full_checks_give_them(name: str) -> None:
    value = TAKEN[name]
    key = "s\u00e91\n" if name == "session with escapes" else "s1"
    assert _check(SCHEMA, value, key), f"the decoder left {name!r} to the parser"


@pytest.mark.parametrize("name", list(LEFT))
def test_forms_the_decoder_does_not_judge_are_the_parsers(name: str) -> None:
    assert not _check(SCHEMA, LEFT[name]), f"the decoder took {name!r}"


@pytest.mark.parametrize(
    "deleted",
    [["12.5"], [12.5], [-3], [{"k": "0.5"}], [{"k": 7}]],
    ids=["string", "number", "integer", "object string", "object integer"],
)
def test_a_one_column_decimal_key_is_deleted_by_bare_value_or_object(deleted: list[Any]) -> None:
    value = orjson.dumps({"session": "s1", "seq": 1, "type": "update", "ts": 1, "deleted": deleted})
    assert _check(DECIMAL_KEY, value)


def test_a_session_other_than_the_key_is_the_parsers_to_name() -> None:
    value = _message(_row())
    assert EnvelopeParser(SCHEMA)._native is not None
    with pytest.raises(EnvelopeError, match="field 'session' is 's1' but the key is 's2'"):
        EnvelopeParser(SCHEMA)("s2", value)


@settings(max_examples=60, deadline=None)
@given(schemas(), st.integers(0, 2**16), st.sampled_from([0, 3]))
def test_generated_captures_of_generated_schemas_decode_as_the_full_checks_say(
    schema: TableSchema, seed: int, resync: int
) -> None:
    """Every message of a generated capture (with its faults and edge values): the decoder's
    envelope is the full checks', and it takes most of them itself."""
    generated = capture(schema, seed, resync)
    taken = total = 0
    for messages in generated.partitions.values():
        for message in messages:
            total += 1
            taken += _check(schema, message.value, message.session)
    assert taken >= total // 2, f"the decoder took {taken} of {total} messages"


_BASES = [TAKEN[name] for name in ("plain row", "time east offset", "update with deletes")] + [
    _message(
        _row(n=5, x=1.5, on=True, at="2026-01-01T00:00:00.5+05:30", day="2026-02-03", price="12.5"),
        _row(id=2, at=1_700_000_000_000, price=3, name="q\\u00e9\n"),
    )
]


@settings(max_examples=3000, deadline=None)
@given(
    st.sampled_from(_BASES),
    st.lists(
        st.tuples(
            st.integers(0, 400),
            st.one_of(
                st.binary(max_size=3),
                st.sampled_from([b'"', b"\\", b"\\u", b",", b"}", b"]", b"-", b"0", b".", b"e"]),
            ),
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_mutated_values_decode_as_the_full_checks_say_or_are_left_to_them(
    base: bytes, edits: list[tuple[int, bytes, bool]]
) -> None:
    """Bytes overwritten or inserted anywhere: what the decoder still takes, the full checks
    give identically; never a crash or another error."""
    mutated = bytearray(base)
    for where, data, overwrite in edits:
        at = where % (len(mutated) + 1)
        mutated[at : at + len(data) if overwrite else at] = data
    _check(SCHEMA, bytes(mutated))


def test_a_schema_of_thousands_of_columns_is_decoded_too() -> None:
    """The decoder has no width of its own: 5,000 declared columns (an earlier build
    refused more than 4,096 as it was made, failing the parser's construction)."""
    lines = "\n".join(f'c{i} = {{ type = "int64", nullable = true }}' for i in range(5_000))
    wide = parse_schema(f'[key]\ncolumns = ["k"]\n[columns]\nk = "string"\n{lines}', "w.toml")
    value = orjson.dumps(
        {"session": "s1", "seq": 0, "type": "snapshot", "ts": 1, "rows": [{"k": "a", "c4999": 7}]}
    )
    assert _check(wide, value)


FLOATS = parse_schema('[key]\ncolumns = ["k"]\n[columns]\nk = "string"\nx = "float64"', "f.toml")


def _decimal_literal(negative: bool, whole: int, fraction: str) -> str:
    return f"{'-' if negative else ''}{whole}{'.' if fraction else ''}{fraction}"


@settings(max_examples=2000, deadline=None)
@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        # Up to 19 digits before the point and 22 after: the fast path's reach and past it.
        st.builds(
            _decimal_literal,
            st.booleans(),
            st.integers(0, 10**19 - 1),
            st.text("0123456789", max_size=22),
        ),
        # Long digits under a large exponent, up to just short of the largest double: the slow
        # path's hardest roundings, and an underflow to zero.
        st.builds("{}e{}".format, st.integers(1, 10**25), st.integers(-350, 283)),
    )
)
def test_a_float_is_the_correctly_rounded_double_of_its_literal(literal: str) -> None:
    """Every literal, those the fast path divides (at most 19 digits, a fraction of at most
    22) and those the slow path rounds, decodes to ``float()``'s double, bit for bit (a
    fast path over 2**53 digits, or a power of ten a double cannot hold, is off by one)."""
    value = b'{"session":"s1","seq":0,"type":"snapshot","ts":1,"rows":[{"k":"a","x":%s}]}'
    found = EnvelopeParser(FLOATS)._native
    assert found is not None
    decoded = found(value % literal.encode())
    assert decoded is not None
    got = decoded[4][0][1]
    exact = float(literal) if "." in literal or "e" in literal else float(int(literal))
    assert struct.pack("<d", got) == struct.pack("<d", exact), (literal, got, exact)
