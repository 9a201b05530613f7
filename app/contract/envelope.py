"""The Kafka envelope of CONTRACT.md section 1, parsed into typed values.

Parsing enforces rule 7 of section 2 (valid JSON, every field present and of
the right type, ``session`` equal to the key, every row and deleted key as
the table schema of section 1a declares it). Everything that needs the
session's history (rules 1 to 6) is enforced in :mod:`app.engine.machine`.

A row is a tuple of every declared column's value, in declared order and as
the output stores it (:mod:`app.contract.values`); a deleted key is the key
column's value, or a tuple of the key columns' values for a composite key.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from enum import StrEnum
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import msgspec
import orjson

from app import compiled
from app.contract import values
from app.contract.schema import DEFAULT_SCHEMA, Column, ColumnType, TableSchema
from app.errors import EnvelopeError

try:  # the compiled decoder, built by `make setup` (app/contract/_envelope.c)
    from app.contract import _envelope as _native
except ImportError:  # not built here: the parser's own paths, the same envelopes, slower
    _native = None  # type: ignore[assignment]
if not compiled.usable(_native):  # built from older source: `make setup` rebuilds it
    _native = None  # type: ignore[assignment]


class MessageType(StrEnum):
    SNAPSHOT = "snapshot"
    UPDATE = "update"
    END = "end"


# One row of a session's table: every declared column, in declared order. A plain
# tuple: hundreds are built per snapshot, and a NamedTuple costs ten times as much.
Row = tuple[Any, ...]
# A row's key: the key column's value, or a tuple of the key columns' values.
Key = Any


class Envelope(NamedTuple):
    """One producer message, validated (a tuple: one is built per message)."""

    session: str
    seq: int
    type: MessageType
    ts: int
    rows: Sequence[Row]
    deleted: Sequence[Key]


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
_Int64 = Annotated[int, msgspec.Meta(ge=values.INT64_MIN, le=values.INT64_MAX)]
_Float64 = Annotated[float, msgspec.Meta(ge=-values.FLOAT_MAX, le=values.FLOAT_MAX)]
# A time within years 1 to 9999, a timestamp column's or a message's ts: its microseconds fit
# the output's int64 (2**63 - 1 ms, made microseconds, wrapped to 1969 before it was refused).
_EpochMs = Annotated[int, msgspec.Meta(ge=values.MS_MIN, le=values.MS_MAX)]
_Seq = Annotated[int, msgspec.Meta(ge=0, le=values.INT64_MAX)]  # the output's int64
# What msgspec decodes each type into; the rest of the way is values' converters.
_DECODED: dict[ColumnType, Any] = {
    ColumnType.STRING: str,
    ColumnType.INT64: _Int64,
    ColumnType.FLOAT64: _Float64,
    ColumnType.BOOL: bool,
    ColumnType.TIMESTAMP: _EpochMs | str,  # its text checked by values' readers
    ColumnType.DATE: date,
    ColumnType.DECIMAL: msgspec.Raw,
}
_CONVERTED = (ColumnType.TIMESTAMP, ColumnType.DECIMAL)
# Rows of a schema with converted columns are rebuilt a column at a time anyway; there
# a float is left raw too and read with the column (values.float_column): msgspec's float
# decoding takes tens of microseconds for a literal beyond about 1e288 or below 1e-307.
_RAW_FLOATS = _DECODED | {ColumnType.FLOAT64: msgspec.Raw}


# The compiled parts' column types, in their order (app/contract/_envelope.c and
# app/engine/_columns.c); the decoder's message types.
NATIVE_TYPES = (
    ColumnType.STRING,
    ColumnType.INT64,
    ColumnType.FLOAT64,
    ColumnType.BOOL,
    ColumnType.TIMESTAMP,
    ColumnType.DATE,
    ColumnType.DECIMAL,
)
_NATIVE_MESSAGES = (MessageType.SNAPSHOT, MessageType.UPDATE, MessageType.END)


def native_decoder_built() -> bool:
    """Whether this checkout's compiled decoder is built (``make setup`` builds it)."""
    return _native is not None


def _native_decoder(schema: TableSchema) -> _native.Decoder | None:
    """The compiled decoder of ``schema``'s canonical forms, or None where it is not built."""
    if _native is None:
        return None
    columns = tuple(
        (c.name, NATIVE_TYPES.index(c.type), c.nullable, c.precision, c.scale)
        for c in schema.columns
    )
    return _native.Decoder(columns, tuple(schema.key_indexes), Decimal)


# A message's rows as the compiled decoder's store holds them (app/contract/_envelope.c):
# ``decode_into`` writes the rows of :meth:`EnvelopeParser.into`'s messages straight into a
# RowStore's Arrow buffers, as the output stores them, and gives them as a RowSpan: a
# sequence of the rows' tuples (made as a reader asks) with the rows' ``keys``, ``first``
# place and ``store``. The built-in processor reads only the keys (its table keeps each
# row's place: RowSpan.place, RowSpan.table); the output takes the rows from the store.
if TYPE_CHECKING:  # re-exported (as X as X) for the modules that name them
    from app.contract._envelope import RowSpan as RowSpan  # noqa: PLC0414
    from app.contract._envelope import RowStore as RowStore  # noqa: PLC0414
elif _native is not None:
    RowSpan, RowStore = _native.RowSpan, _native.RowStore
    Sequence.register(RowSpan)
else:  # no compiled decoder: no span is ever made

    class RowSpan:
        pass

    RowStore = None


def decode_key(key: bytes | None) -> str:
    """The session id carried by a record key (UTF-8)."""
    if key is None:
        raise EnvelopeError("record has no key (the key must be the session id)")
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvelopeError(f"key is not UTF-8: {exc.reason}") from None


class EnvelopeParser:
    """Parses record values against the envelope and one table schema.

    msgspec decodes the common case straight into typed fields, checking
    each field's presence and JSON type as it goes (about twice as fast as
    orjson's dicts and the checks in Python); its decoder is built from the
    schema when the parser is made. A value it refuses, or one that fails a
    rule it does not check, goes through :meth:`parse_checked`, which gives
    the same envelope for the same value, or the error that names what is
    wrong: msgspec only ever takes the fast way to the same result.

    Before msgspec, the compiled decoder (``app/contract/_envelope.c``, where
    ``make setup`` built it; ``native=False`` leaves it out) takes the
    canonical forms of the envelope and the schema straight to the rows'
    values; whatever it does not take for certain (an escape it does not
    know, a field the envelope or the schema does not declare, a value at
    the edge of its range, any break of the envelope) it leaves to the
    paths above, which accept it or name what is wrong.
    """

    def __init__(self, schema: TableSchema = DEFAULT_SCHEMA, *, native: bool = True) -> None:
        self.schema = schema
        self.native = native
        self._build()

    def __getstate__(self) -> dict[str, Any]:
        # The decoders are rebuilt where it is unpickled, the compiled one where it is built.
        return {"schema": self.schema, "native": self.native}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.schema = state["schema"]
        self.native = state.get("native", True)
        self._build()

    def _build(self) -> None:
        schema = self.schema
        self._decoder = _native_decoder(schema) if self.native else None
        self._native = None if self._decoder is None else self._decoder.decode
        columns = schema.columns
        names = [f"c{i}" for i in range(len(columns))]
        converted = {ColumnType.FLOAT64, *_CONVERTED}
        if not any(c.type in _CONVERTED for c in columns):
            converted = set()  # msgspec's values are the stored ones: no rebuilding at all
        decoded = _RAW_FLOATS if converted else _DECODED
        row_type = msgspec.defstruct(
            "Row",
            [_struct_field(name, c, decoded) for name, c in zip(names, columns, strict=True)],
            rename=dict(zip(names, (c.name for c in columns), strict=True)),
            kw_only=True,  # a required column may follow a nullable one
            gc=False,
        )
        key_columns = [columns[i] for i in schema.key_indexes]
        key_names = [names[i] for i in schema.key_indexes]
        key_type = msgspec.defstruct(
            "Key",
            [(n, _DECODED[c.type]) for n, c in zip(key_names, key_columns, strict=True)],
            rename=dict(zip(key_names, schema.key, strict=True)),
            gc=False,
        )
        single = len(key_columns) == 1
        deleted_item: Any = key_type  # a key object; a one-column key's bare value too
        if single and key_columns[0].type is ColumnType.DECIMAL:
            deleted_item = msgspec.Raw  # an object, or the decimal's literal
        elif single:
            deleted_item = key_type | _DECODED[key_columns[0].type]
        document = msgspec.defstruct(
            "Document",
            [
                ("session", str),
                ("seq", _Seq),
                ("type", MessageType),
                ("ts", _EpochMs),
                ("rows", list[row_type] | None, None),  # type: ignore[valid-type]
                ("deleted", list[deleted_item] | None, None),
            ],
            gc=False,
        )
        self._decode: Callable[[bytes], Any] = msgspec.json.Decoder(document).decode
        self._row_values: Callable[[Any], Row] = (
            attrgetter(*names) if len(names) > 1 else lambda r: (r.c0,)
        )
        self._cells = [attrgetter(name) for name in names]  # each column's value of a row
        self._key_values = attrgetter(*key_names)
        self._key_type = key_type
        self._decode_key = msgspec.json.Decoder(key_type).decode
        self._single = single
        # Columns whose decoded form is not yet the stored one: (index, its column's reader).
        self._converted = [
            (i, _column_reader(c)) for i, c in enumerate(columns) if c.type in converted
        ]
        self._key_converted = [
            (i, _converter(c)) for i, c in enumerate(key_columns) if c.type in _CONVERTED
        ]
        self._exact = any(c.type is ColumnType.DECIMAL for c in columns)
        first = self._key_converted[0] if self._key_converted else None
        self._convert_first: Callable[[Any], Any] = (
            first[1] if first is not None and first[0] == 0 else _unchanged
        )

    def __call__(self, key: str, value: bytes | None) -> Envelope:
        """Parse and validate one record value against the envelope and the schema."""
        if value is None:
            raise EnvelopeError("value is null")
        native = self._native
        if native is not None:
            found = native(value)
            if found is not None and found[0] == key:
                _, seq, message_type, ts, rows, deleted = found
                return _new_envelope((key, seq, _NATIVE_MESSAGES[message_type], ts, rows, deleted))
        if not _utf8(value):
            return self.parse_full(key, value)
        try:
            doc = self._decode(value)
        except msgspec.MsgspecError:
            return self.parse_full(key, value)
        return self._envelope(key, value, doc, None)

    def store(self) -> RowStore | None:
        """A new, empty store of this schema's rows for :meth:`into`; None where the
        compiled decoder is not built (or the parser was made without it)."""
        return None if self._decoder is None else _native.RowStore(self._decoder)

    def takes(self, store: RowStore) -> bool:
        """Whether ``store`` is one of this parser's (:meth:`store`)."""
        return self._decoder is not None and store.decoder is self._decoder

    def into(self, store: RowStore) -> Callable[[str, bytes | None], Envelope]:
        """The parser of a run whose rows go into ``store`` (from :meth:`store`): each
        envelope the compiled decoder takes has its rows as a :class:`RowSpan` of it; any
        other is :meth:`__call__`'s, rows as tuples (a value the decoder leaves, a session
        that is not the key), and nothing of it stays in the store."""
        decoder = self._decoder
        if decoder is None:
            raise ValueError("a store's parser needs the compiled decoder")
        decode_into = decoder.decode_into
        messages = _NATIVE_MESSAGES

        def parse(key: str, value: bytes | None) -> Envelope:
            if value.__class__ is bytes:
                found = decode_into(value, store)
                if found is not None:
                    session, seq, kind, ts, rows, deleted = found
                    if session == key:
                        return _new_envelope((key, seq, messages[kind], ts, rows, deleted))
                    if rows:  # the rows of a message the parser refuses: not kept
                        store.truncate(rows.first)
            return self(key, value)

        return parse

    def over(self, values: Sequence[bytes | None]) -> Callable[[str, bytes | None], Envelope]:
        """The parser of a run over ``values`` (a slice of records, parsed in any order).

        With the compiled decoder, it is :meth:`__call__` (the decoder converts as it
        goes). Without it, a schema whose rows are converted (:func:`_column_reader`)
        has every row of ``values`` decoded and converted here, a column at a time
        across all of them, so that each conversion is one loop of C calls rather than
        one Python call per message and column; each envelope is then checked as
        :meth:`__call__` checks it.
        A value that is not a record's of ``values``, or a slice holding a value its
        column refuses, is parsed alone, by :meth:`__call__`, which names what is wrong.
        """
        if not self._converted or self._native is not None:
            return self
        decode, decoded = self._decode, []
        for value in values:
            if value is not None and _utf8(value):
                try:
                    decoded.append((value, decode(value)))
                except msgspec.MsgspecError:
                    continue
        structs = [r for _, doc in decoded if doc.rows for r in doc.rows]
        columns: list[Sequence[Any]] = [list(map(cell, structs)) for cell in self._cells]
        try:
            for i, read in self._converted if structs else ():
                columns[i] = read(columns[i])
        except EnvelopeError:
            return self
        rows: list[Row] = list(zip(*columns, strict=True))
        prepared: dict[int, tuple[Any, Sequence[Row]]] = {}
        at = 0
        for value, doc in decoded:
            count = len(doc.rows) if doc.rows else 0
            prepared[id(value)] = (doc, () if doc.rows is None else rows[at : at + count])
            at += count
        return partial(self._prepared, prepared)

    def _prepared(
        self, prepared: dict[int, tuple[Any, Sequence[Row]]], key: str, value: bytes | None
    ) -> Envelope:
        # Keyed by the value object, which the slice holds while it runs; the same object
        # at two offsets is the same bytes, so the same document.
        found = prepared.get(id(value))
        if found is None or value is None:
            return self(key, value)
        return self._envelope(key, value, *found)

    def _envelope(self, key: str, value: bytes, doc: Any, rows: Sequence[Row] | None) -> Envelope:
        """The envelope of a decoded document; ``rows``: its rows converted already (None:
        convert them here)."""
        seq, ts, message_type = doc.seq, doc.ts, doc.type
        if doc.session == key:
            raw_rows, raw_deleted = doc.rows, doc.deleted
            try:
                if rows is None:
                    rows = () if raw_rows is None else self._rows(raw_rows)
                if message_type is MessageType.UPDATE:
                    if raw_rows is not None or raw_deleted is not None:
                        deleted = () if raw_deleted is None else self._deleted(raw_deleted)
                        return _new_envelope((key, seq, message_type, ts, rows, deleted))
                elif raw_rows is not None and not raw_deleted:
                    if message_type is MessageType.SNAPSHOT or not rows:
                        return _new_envelope((key, seq, message_type, ts, rows, ()))
                elif raw_rows is None and not raw_deleted and message_type is MessageType.END:
                    return _new_envelope((key, seq, message_type, ts, (), ()))
            except EnvelopeError:
                pass  # the checked parser names it, with where
        return self.parse_full(key, value)

    def _rows(self, raw_rows: list[Any]) -> Sequence[Row]:
        rows = list(map(self._row_values, raw_rows))
        if not self._converted or not rows:
            return rows
        # A column at a time: one call per converted column of the message, not per value.
        columns: list[Sequence[Any]] = list(zip(*rows, strict=True))
        for i, read in self._converted:
            columns[i] = read(columns[i])
        return list(zip(*columns, strict=True))

    def _deleted(self, raw_deleted: list[Any]) -> Sequence[Key]:
        key_type, convert_first = self._key_type, self._convert_first
        found: list[Key] = []
        for given in raw_deleted:
            item = given
            if isinstance(given, msgspec.Raw):  # a decimal key: an object, or its literal
                raw = bytes(given)
                if raw[:1] != b"{":
                    found.append(convert_first(given))
                    continue
                item = self._decode_key(raw)
            if type(item) is key_type:
                found.append(self._key_of(self._key_values(item)))
            else:  # the bare value of a one-column key
                found.append(convert_first(item))
        return found

    def _key_of(self, raw: Any) -> Key:
        if not self._key_converted:
            return raw
        if self._single:
            return self._convert_first(raw)
        cells = list(raw)
        for i, convert in self._key_converted:
            cells[i] = convert(cells[i])
        return tuple(cells)

    def parse_full(self, key: str, value: bytes) -> Envelope:
        """The envelope through orjson (validity) and the field-by-field checks."""
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError as exc:
            raise EnvelopeError(f"value is not valid JSON: {_not_json(value, exc)}") from None
        if self._exact:  # a decimal is the literal's exact value, never the nearest double
            doc = json.loads(value, parse_float=Decimal)
        return self.parse_checked(key, doc)

    def parse_checked(self, key: str, doc: Any) -> Envelope:
        """The field-by-field checks: every rule, and a message naming what is wrong."""
        if not isinstance(doc, dict):
            raise EnvelopeError(f"value is a JSON {_json_kind(doc)}, not an object")

        session = _field(doc, "session", str, "a string")
        if session != key:
            raise EnvelopeError(f"field 'session' is {session!r} but the key is {key!r}")
        seq = _field(doc, "seq", int, "an integer")
        if seq < 0:
            raise EnvelopeError(f"field 'seq' is {seq}, must be >= 0")
        if seq > values.INT64_MAX:
            raise EnvelopeError(
                f"field 'seq' is {seq}, must be at most {values.INT64_MAX} (the output's int64)"
            )
        type_name = _field(doc, "type", str, "a string")
        message_type = _MESSAGE_TYPES.get(type_name)
        if message_type is None:
            raise EnvelopeError(
                f"field 'type' is {type_name!r}, must be one of snapshot, update, end"
            )
        ts = _field(doc, "ts", int, "an integer")
        if not values.MS_MIN <= ts <= values.MS_MAX:  # beyond the output's times
            raise EnvelopeError(
                f"field 'ts' is {ts}, must be milliseconds since the epoch within years 1 to 9999"
            )

        raw_rows = doc.get("rows")
        raw_deleted = doc.get("deleted")
        if message_type is MessageType.SNAPSHOT and raw_rows is None:
            raise EnvelopeError("snapshot lacks field 'rows'")
        if message_type is MessageType.UPDATE and raw_rows is None and raw_deleted is None:
            raise EnvelopeError("update lacks field 'rows' (and has no 'deleted')")
        rows = self._checked_rows(raw_rows)
        deleted = self._checked_deleted(raw_deleted)
        if message_type is MessageType.END and rows:
            raise EnvelopeError(f"end message carries {len(rows)} rows, must carry none")
        if message_type is not MessageType.UPDATE and deleted:
            raise EnvelopeError(f"field 'deleted' is only allowed on updates, not on {type_name}")
        return Envelope(session, seq, message_type, ts, rows, deleted)

    def _checked_rows(self, raw: Any) -> Sequence[Row]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            raise EnvelopeError(f"field 'rows' is a JSON {_json_kind(raw)}, must be an array")
        columns = self.schema.columns
        rows: list[Row] = []
        for index, item in enumerate(raw):
            where = f"rows[{index}]"
            if not isinstance(item, dict):
                raise EnvelopeError(f"{where} is a JSON {_json_kind(item)}, must be an object")
            rows.append(tuple(_cell(c, item, where) for c in columns))
        return rows

    def _checked_deleted(self, raw: Any) -> Sequence[Key]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            raise EnvelopeError(f"field 'deleted' is a JSON {_json_kind(raw)}, must be an array")
        key_columns = [self.schema.columns[i] for i in self.schema.key_indexes]
        found: list[Key] = []
        for index, item in enumerate(raw):
            where = f"deleted[{index}]"
            if isinstance(item, dict):
                cells = tuple(_cell(c, item, where) for c in key_columns)
                found.append(cells[0] if self._single else cells)
            elif self._single:
                column = key_columns[0]
                found.append(values.check(column, item, where))
            else:
                names = ", ".join(self.schema.key)
                raise EnvelopeError(
                    f"{where} is a JSON {_json_kind(item)}, must be an object with the key "
                    f"columns ({names})",
                    column=self.schema.key[0],
                    expected=f"an object with the key columns ({names})",
                    got=f"a JSON {_json_kind(item)} in {where}",
                )
        return found


def _utf8(value: bytes) -> bool:
    """Whether a value is UTF-8, as JSON text is (RFC 8259). msgspec checks only the strings
    it decodes, not those it skips (an undeclared field) or leaves raw (a decimal's text):
    a value that is not is left to the full checks, which refuse it."""
    if value.isascii():  # most values, checked without a copy
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _not_json(value: bytes, exc: orjson.JSONDecodeError) -> str:
    """Why orjson refused a value, in the value's terms where it is not UTF-8."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as bad:
        return f"not UTF-8 (byte 0x{value[bad.start]:02x} at {bad.start}: {bad.reason})"
    return str(exc)


def _struct_field(
    name: str, column: Column, types: dict[ColumnType, Any]
) -> tuple[str, Any] | tuple[str, Any, Any]:
    """A column as a field of the row struct; a nullable one may be absent (null)."""
    decoded = types[column.type]
    if decoded is msgspec.Raw:  # its literal, null included
        return (name, decoded, msgspec.Raw(b"null")) if column.nullable else (name, decoded)
    return (name, decoded | None, None) if column.nullable else (name, decoded)


def _unchanged(value: Any) -> Any:
    return value


def _converter(column: Column) -> Callable[[Any], Any]:
    """The fast parser's last step for a value msgspec does not decode to its stored form
    (a decimal's JSON text, a time's text or epoch milliseconds); a refusal sends the value to the
    full checks, which name where it is."""
    if column.type is ColumnType.DECIMAL:
        read = values.DecimalReader(column).raw
        return lambda value: read(value, "rows")

    def timestamp(value: Any) -> Any:
        if type(value) is int:
            return values.timestamp_ms(column, value, "rows")
        if type(value) is str:
            return values.timestamp_text(column, value, "rows")
        return value  # None

    return timestamp


def _column_reader(column: Column) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """The fast parser's last step for a column of rows that msgspec does not
    decode to its stored form (a float's or a decimal's JSON text, times as texts or epoch
    milliseconds); a refusal sends the message to the full checks, which name where it is."""
    if column.type is ColumnType.DECIMAL:
        return values.DecimalReader(column).raw_column
    if column.type is ColumnType.FLOAT64:
        return values.float_column(column)
    return values.timestamp_column(column)


def _cell(column: Column, item: dict[str, Any], where: str) -> Any:
    if column.name in item:
        return values.check(column, item[column.name], where)
    if column.nullable:
        return None
    want = values.expected(column)
    raise EnvelopeError(
        f"{where} lacks field {column.name!r}",
        column=column.name,
        expected=want,
        got=f"no field {column.name!r} in {where}",
    )


# One Envelope a message: tuple.__new__ skips the NamedTuple's Python-level __new__.
_new_envelope: Callable[
    [tuple[str, int, MessageType, int, Sequence[Row], Sequence[Key]]], Envelope
] = partial(tuple.__new__, Envelope)


def _field(doc: dict[str, Any], name: str, kind: type, kind_name: str) -> Any:
    if name not in doc:
        raise EnvelopeError(f"lacks field {name!r}")
    found = doc[name]
    # bool is an int subclass in Python but not an integer in JSON.
    if not isinstance(found, kind) or isinstance(found, bool):
        raise EnvelopeError(f"field {name!r} is a JSON {_json_kind(found)}, must be {kind_name}")
    return found


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float | Decimal):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


@functools.lru_cache(maxsize=16)
def parser_for(schema: TableSchema) -> EnvelopeParser:
    """The parser of ``schema``, made once per process (its decoders are built at run time)."""
    return EnvelopeParser(schema)


# The default schema's parser (CONTRACT.md section 1a: the shape of versions 1.x).
parse_envelope = parser_for(DEFAULT_SCHEMA)
