"""Envelope parsing: rule 7 of CONTRACT.md section 2, one case each."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract.envelope import (
    Envelope,
    EnvelopeParser,
    MessageType,
    decode_key,
    parse_envelope,
)
from app.errors import EnvelopeError


def _value(**fields: object) -> bytes:
    doc: dict[str, object] = {"session": "s1", "seq": 0, "type": "snapshot", "ts": 5, "rows": []}
    doc.update(fields)
    return orjson.dumps({k: v for k, v in doc.items() if v is not _DROP})


_DROP = object()


def test_parses_a_snapshot_with_typed_rows() -> None:
    value = _value(
        rows=[{"id": "a", "value": 1, "status": "ok"}, {"id": "b", "value": None, "status": None}]
    )
    envelope = parse_envelope("s1", value)
    assert envelope.type is MessageType.SNAPSHOT
    assert list(envelope.rows) == [("a", 1.0, "ok"), ("b", None, None)]
    assert isinstance(envelope.rows[0][1], float)


def test_parses_an_update_with_deletes_and_ignores_unknown_keys() -> None:
    value = _value(type="update", seq=3, rows=[], deleted=["x"], extra={"ignored": True})
    envelope = parse_envelope("s1", value)
    assert (envelope.seq, list(envelope.deleted)) == (3, ["x"])


def test_end_without_rows_is_valid() -> None:
    assert parse_envelope("s1", _value(type="end", seq=9, rows=_DROP)).type is MessageType.END


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b'{"session": "s1", "seq": ', "not valid JSON"),
        (b"[1, 2]", "JSON array, not an object"),
        (_value(seq=_DROP), "lacks field 'seq'"),
        (_value(ts=_DROP), "lacks field 'ts'"),
        (_value(type=_DROP), "lacks field 'type'"),
        (_value(session=_DROP), "lacks field 'session'"),
        (_value(rows=_DROP), "snapshot lacks field 'rows'"),
        (_value(seq="1"), "field 'seq' is a JSON string, must be an integer"),
        (_value(seq=True), "field 'seq' is a JSON boolean"),
        (_value(seq=1.5), "field 'seq' is a JSON number, must be an integer"),
        (_value(seq=-1), "must be >= 0"),
        (_value(seq=2**63), "field 'seq' is 9223372036854775808, must be at most"),
        (_value(ts=253_402_300_800_000), "field 'ts' is 253402300800000, must be milliseconds"),
        (_value(ts=-62_135_596_800_001), "field 'ts' is -62135596800001, must be milliseconds"),
        (_value(ts=2**63 - 1), "within years 1 to 9999"),
        (_value(ts="now"), "field 'ts' is a JSON string"),
        (_value(type="delta"), "field 'type' is 'delta'"),
        (_value(session="s2"), "field 'session' is 's2' but the key is 's1'"),
        (_value(rows={"id": "a"}), "field 'rows' is a JSON object, must be an array"),
        (_value(rows=[{"id": 1, "value": 1, "status": None}]), "rows[0].id is number 1"),
        (
            _value(rows=[{"id": "a", "value": "1", "status": None}]),
            "rows[0].value is string '1', must be a finite number",
        ),
        (_value(rows=[{"id": "a", "value": 1, "status": 2}]), "rows[0].status is number 2"),
        (_value(rows=[{"value": 1, "status": None}]), "rows[0] lacks field 'id'"),
        (_value(rows=[{"id": None}]), "rows[0].id is null (the column is not nullable)"),
        (_value(type="update", rows=[], deleted=[3]), "deleted[0].id is number 3"),
        (
            _value(type="end", rows=[{"id": "a", "value": 1, "status": None}]),
            "end message carries 1 rows",
        ),
        (_value(deleted=["a"]), "only allowed on updates"),
    ],
)
def test_rejects_each_broken_envelope_with_its_reason(value: bytes, message: str) -> None:
    with pytest.raises(EnvelopeError, match=None) as info:
        parse_envelope("s1", value)
    assert message in str(info.value)


def test_key_must_be_present_and_utf8() -> None:
    with pytest.raises(EnvelopeError, match="no key"):
        decode_key(None)
    with pytest.raises(EnvelopeError, match="not UTF-8"):
        decode_key(b"\xff\xfe")
    assert decode_key("sé".encode()) == "sé"


_JSON_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["s1", "s2", "snapshot", "update", "end", "a", ""]),
    st.just([]),
    st.just({}),
    st.just(["a"]),
    st.just([1]),
)
_MAYBE = st.one_of(_JSON_ANY, st.just(_DROP))
_ROW = st.fixed_dictionaries(
    {},
    optional={
        "id": st.one_of(st.sampled_from(["a", "b", "a"]), _JSON_ANY),
        "value": st.one_of(st.integers(-5, 5), st.floats(allow_nan=False), _JSON_ANY),
        "status": st.one_of(st.sampled_from(["ok", None]), _JSON_ANY),
        "extra": _JSON_ANY,
    },
)
_ENVELOPE = st.fixed_dictionaries(
    {
        "session": st.one_of(st.just("s1"), _MAYBE),
        "seq": st.one_of(st.integers(-1, 5), _MAYBE),
        "type": st.one_of(st.sampled_from(["snapshot", "update", "end"]), _MAYBE),
        "ts": st.one_of(st.integers(0, 9), _MAYBE),
        "rows": st.one_of(st.lists(st.one_of(_ROW, _JSON_ANY), max_size=3), _MAYBE),
        "deleted": st.one_of(st.lists(st.one_of(st.just("a"), _JSON_ANY), max_size=3), _MAYBE),
    }
)


# The parser with the compiled decoder first (where built), and with msgspec's first.
_PATHS = {"compiled": parse_envelope, "msgspec": EnvelopeParser(native=False)}


@pytest.mark.parametrize("path", list(_PATHS))
@settings(max_examples=3000, deadline=None)
@given(_ENVELOPE)
def test_the_typed_decoding_accepts_and_rejects_exactly_what_the_full_checks_do(
    path: str, doc: dict[str, object]
) -> None:
    """The parser's fast paths against the field-by-field checks."""
    value = orjson.dumps({k: v for k, v in doc.items() if v is not _DROP})
    got = _parsed(lambda: _PATHS[path]("s1", value))
    full = _parsed(lambda: parse_envelope.parse_checked("s1", orjson.loads(value)))
    assert _content(got) == _content(full)
    if isinstance(got, Envelope):
        assert all(type(row) is tuple and len(row) == 3 for row in got.rows)
        assert all(value is None or type(value) is float for _, value, _ in got.rows)


def _parsed(parse: Callable[[], Envelope]) -> Envelope | str:
    try:
        return parse()
    except EnvelopeError as exc:
        return str(exc)


_HEAD = b'"session":"s1","type":"update","ts":1'


@pytest.mark.parametrize(
    "value",
    [
        b'{"session":"s1","seq":18446744073709551615,"type":"end","ts":1}',
        b'{"session":"s1","seq":18446744073709551616,"type":"end","ts":1}',  # a float to orjson
        b'{"session":"s1","seq":1,"type":"end","ts":-9223372036854775809}',
        b'{"session":"s1","seq":1,"type":"end","ts":-9223372036854775808}',
        b'{"session":"s1","seq":1,"type":"end","ts":1.0}',
        b'{"session":"s1","seq":1,"seq":-1,"type":"end","ts":1}',  # the last of a repeated key
        b'{"session":"s1","seq":-1,"seq":2,"type":"end","ts":1}',
        b"{" + _HEAD + b',"seq":1,"rows":[{"id":"a","value":true,"status":null}]}',
        b"{" + _HEAD + b',"seq":1,"rows":[{"id":"a","value":18446744073709551617,"status":"x"}]}',
        b"{" + _HEAD + b',"seq":1,"rows":[{"id":"a","value":1e400,"status":null}]}',
        b"{" + _HEAD + b',"seq":1,"rows":[{"id":"\\ud800","value":1,"status":null}]}',
        b"{" + _HEAD + b',"seq":1,"deleted":["a",null]}',
        b"{" + _HEAD + b',"seq":1,"deleted":[],"rows":null}',
        b'{"session":"s1","seq":1,"type":"Update","ts":1,"rows":[]}',
        b'{"session":"s2","seq":1,"type":"end","ts":1}',
        b'  {"session":"s1","seq":1,"type":"end","ts":1}  ',
        b'{"session":"s1","seq":1,"type":"end","ts":1} {}',
        b"[]",
        b"",
    ],
)
@pytest.mark.parametrize("path", list(_PATHS))
def test_values_at_the_edges_of_json_parse_as_the_full_checks_say(path: str, value: bytes) -> None:
    """Where the fast paths and orjson might read JSON differently, the result is the full
    checks'."""
    expected = _parsed(lambda: parse_envelope.parse_full("s1", value))  # the full checks
    assert _content(_parsed(lambda: _PATHS[path]("s1", value))) == _content(expected)


def _content(parsed: Envelope | str) -> object:
    """What a parse says, whatever sequence type holds the rows and deletions."""
    if isinstance(parsed, str):
        return parsed
    return (*parsed[:4], list(parsed.rows), list(parsed.deleted))
