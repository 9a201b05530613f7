"""The Kafka envelope of CONTRACT.md section 1, parsed into typed values.

Parsing enforces rule 7 of section 2 (valid JSON, every field present and of
the right type, ``session`` equal to the key). Everything that needs the
session's history (rules 1 to 6) is enforced in :mod:`app.engine.machine`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Any, NamedTuple

import msgspec
import orjson

from app.errors import EnvelopeError


class MessageType(StrEnum):
    SNAPSHOT = "snapshot"
    UPDATE = "update"
    END = "end"


# One row of a session's table (CONTRACT.md section 1): (id, value, status).
# A plain tuple: hundreds are built per snapshot, and a NamedTuple costs ten
# times as much to build.
TableRow = tuple[str, float | None, str | None]


class Envelope(NamedTuple):
    """One producer message, validated (a tuple: one is built per message)."""

    session: str
    seq: int
    type: MessageType
    ts: int
    rows: Sequence[TableRow]
    deleted: Sequence[str]


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """Where a record sits in Kafka; the sort order of a session's messages."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"topic {self.topic} partition {self.partition} offset {self.offset}"


@dataclass(frozen=True, slots=True)
class Record:
    """A Kafka record as Spark's Kafka source (or the raw archive) gives it."""

    position: Position
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


_MESSAGE_TYPES = {t.value: t for t in MessageType}


def decode_key(key: bytes | None) -> str:
    """The session id carried by a record key (UTF-8)."""
    if key is None:
        raise EnvelopeError("record has no key (the key must be the session id)")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvelopeError(f"key is not UTF-8: {exc.reason}") from None


def parse_envelope(key: str, value: bytes | None) -> Envelope:
    """Parse and validate one record value against the envelope of section 1.

    msgspec decodes the common case straight into typed fields, checking
    each field's presence and JSON type as it goes (about twice as fast as
    orjson's dicts and the checks in Python). A value it refuses, or one
    that fails a rule it does not check, goes through :func:`_parse_orjson`,
    which gives the same envelope for the same value, or the error that names
    what is wrong: msgspec only ever takes the fast way to the same result.
    """
    if value is None:
        raise EnvelopeError("value is null")
    try:
        doc = _decode_document(value)
    except msgspec.MsgspecError:
        return _parse_orjson(key, value)
    seq, ts, message_type = doc.seq, doc.ts, doc.type
    # orjson, and so the full checks, read integers beyond 64 bits as floats.
    if doc.session == key and 0 <= seq <= _INT_MAX and _INT_MIN <= ts <= _INT_MAX:
        raw_rows, raw_deleted = doc.rows, doc.deleted
        rows: Sequence[TableRow] = (
            () if raw_rows is None else [(r.id, r.value, r.status) for r in raw_rows]
        )
        if message_type is MessageType.UPDATE:
            if raw_rows is not None or raw_deleted is not None:
                deleted = () if raw_deleted is None else raw_deleted
                return _new_envelope((key, seq, message_type, ts, rows, deleted))
        elif raw_rows is not None and not raw_deleted:
            if message_type is MessageType.SNAPSHOT or not rows:
                return _new_envelope((key, seq, message_type, ts, rows, ()))
        elif raw_rows is None and not raw_deleted and message_type is MessageType.END:
            return _new_envelope((key, seq, message_type, ts, (), ()))
    return _parse_orjson(key, value)


class _Row(msgspec.Struct, gc=False):
    id: str
    value: float | None  # a JSON integer too, as a float; never a boolean
    status: str | None


class _Document(msgspec.Struct, gc=False):
    """The envelope's fields with their JSON types; unknown fields are ignored."""

    session: str
    seq: int
    type: MessageType
    ts: int
    rows: list[_Row] | None = None
    deleted: list[str] | None = None


_decode_document = msgspec.json.Decoder(_Document).decode
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1  # the integers orjson reads as integers
# One Envelope a message: tuple.__new__ skips the NamedTuple's Python-level __new__.
_new_envelope: Callable[
    [tuple[str, int, MessageType, int, Sequence[TableRow], Sequence[str]]], Envelope
] = partial(tuple.__new__, Envelope)


def _parse_orjson(key: str, value: bytes) -> Envelope:
    """The envelope through orjson's dicts and the field-by-field checks (naming what is wrong)."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise EnvelopeError(f"value is not valid JSON: {exc}") from None
    return _parse_checked(key, doc)


def _parse_checked(key: str, doc: Any) -> Envelope:
    """The field-by-field checks: every rule, and a message naming what is wrong."""
    if not isinstance(doc, dict):
        raise EnvelopeError(f"value is a JSON {_json_kind(doc)}, not an object")

    session = _field(doc, "session", str, "a string")
    if session != key:
        raise EnvelopeError(f"field 'session' is {session!r} but the key is {key!r}")
    seq = _field(doc, "seq", int, "an integer")
    if seq < 0:
        raise EnvelopeError(f"field 'seq' is {seq}, must be >= 0")
    type_name = _field(doc, "type", str, "a string")
    message_type = _MESSAGE_TYPES.get(type_name)
    if message_type is None:
        raise EnvelopeError(f"field 'type' is {type_name!r}, must be one of snapshot, update, end")
    ts = _field(doc, "ts", int, "an integer")

    raw_rows = doc.get("rows")
    raw_deleted = doc.get("deleted")
    if message_type is MessageType.SNAPSHOT and raw_rows is None:
        raise EnvelopeError("snapshot lacks field 'rows'")
    if message_type is MessageType.UPDATE and raw_rows is None and raw_deleted is None:
        raise EnvelopeError("update lacks field 'rows' (and has no 'deleted')")
    rows = _parse_rows(raw_rows)
    deleted = _parse_deleted(raw_deleted)
    if message_type is MessageType.END and rows:
        raise EnvelopeError(f"end message carries {len(rows)} rows, must carry none")
    if message_type is not MessageType.UPDATE and deleted:
        raise EnvelopeError(f"field 'deleted' is only allowed on updates, not on {type_name}")
    return Envelope(session, seq, message_type, ts, rows, deleted)


def _field(doc: dict[str, Any], name: str, kind: type, kind_name: str) -> Any:
    if name not in doc:
        raise EnvelopeError(f"lacks field {name!r}")
    found = doc[name]
    # bool is an int subclass in Python but not an integer in JSON.
    if not isinstance(found, kind) or isinstance(found, bool):
        raise EnvelopeError(f"field {name!r} is a JSON {_json_kind(found)}, must be {kind_name}")
    return found


def _parse_rows(raw: Any) -> Sequence[TableRow]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise EnvelopeError(f"field 'rows' is a JSON {_json_kind(raw)}, must be an array")
    rows: list[TableRow] = []
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise EnvelopeError(f"rows[{index}] is a JSON {_json_kind(item)}, must be an object")
        if "id" not in item or "value" not in item or "status" not in item:
            missing = [k for k in ("id", "value", "status") if k not in item]
            raise EnvelopeError(f"rows[{index}] lacks field {missing[0]!r}")
        row_id, value, status = item["id"], item["value"], item["status"]
        if not isinstance(row_id, str):
            raise EnvelopeError(
                f"rows[{index}].id is a JSON {_json_kind(row_id)}, must be a string"
            )
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise EnvelopeError(
                f"rows[{index}].value is a JSON {_json_kind(value)}, must be a number or null"
            )
        if status is not None and not isinstance(status, str):
            raise EnvelopeError(
                f"rows[{index}].status is a JSON {_json_kind(status)}, must be a string or null"
            )
        rows.append((row_id, None if value is None else float(value), status))
    return rows


def _parse_deleted(raw: Any) -> Sequence[str]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise EnvelopeError(f"field 'deleted' is a JSON {_json_kind(raw)}, must be an array")
    for index, item in enumerate(raw):
        if not isinstance(item, str):
            raise EnvelopeError(f"deleted[{index}] is a JSON {_json_kind(item)}, must be a string")
    return raw


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
