"""Envelope parsing: rule 7 of CONTRACT.md section 2, one case each."""

from __future__ import annotations

import orjson
import pytest

from app.contract import MessageType, TableRow, decode_key, parse_envelope
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
    assert envelope.rows == (TableRow("a", 1.0, "ok"), TableRow("b", None, None))
    assert isinstance(envelope.rows[0].value, float)


def test_parses_an_update_with_deletes_and_ignores_unknown_keys() -> None:
    value = _value(type="update", seq=3, rows=[], deleted=["x"], extra={"ignored": True})
    envelope = parse_envelope("s1", value)
    assert (envelope.seq, envelope.deleted) == (3, ("x",))


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
        (_value(ts="now"), "field 'ts' is a JSON string"),
        (_value(type="delta"), "field 'type' is 'delta'"),
        (_value(session="s2"), "field 'session' is 's2' but the key is 's1'"),
        (_value(rows={"id": "a"}), "field 'rows' is a JSON object, must be an array"),
        (_value(rows=[{"id": 1, "value": 1, "status": None}]), "rows[0].id is a JSON number"),
        (
            _value(rows=[{"id": "a", "value": "1", "status": None}]),
            "rows[0].value is a JSON string",
        ),
        (_value(rows=[{"id": "a", "value": 1, "status": 2}]), "rows[0].status is a JSON number"),
        (_value(rows=[{"id": "a", "status": None}]), "rows[0] lacks field 'value'"),
        (_value(type="update", rows=[], deleted=[3]), "deleted[0] is a JSON number"),
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
