"""The output dataset's rows and the quarantine's records, built as columns.

The schemas here are the one definition of CONTRACT.md section 3 (and of
the quarantine dataset beside it); every writer and reader derives from
them. :class:`RowColumns` collects a partition's output while the engine
runs: the columns of each message that produced rows are kept once and
repeated by row count when the Arrow table is built, so no per-row Python
object is made.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from numbers import Integral, Number
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app import compiled
from app.contract.envelope import NATIVE_TYPES, Key, Row, RowSpan, RowStore
from app.contract.offsets import TopicPartition
from app.contract.processor import Changes
from app.contract.schema import DEFAULT_SCHEMA, Column, ColumnType, TableSchema
from app.contract.table_processor import TableProcessor
from app.engine.gc_pause import cyclic_gc_paused
from app.errors import ProcessorError

try:  # rows to Arrow's buffers, compiled: built by `make setup` (app/engine/_columns.c)
    from app.engine import _columns as _native
except ImportError:  # not built here: pyarrow's conversion alone, the same columns, slower
    _native = None  # type: ignore[assignment]
if not compiled.usable(_native):  # built from older source: `make setup` rebuilds it
    _native = None  # type: ignore[assignment]

_US_UTC = pa.timestamp("us", tz="UTC")
# The output's own columns before the declared ones (CONTRACT.md section 3), never null.
_METADATA = [
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("session", pa.string(), nullable=False),
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("type", pa.string(), nullable=False),
    # Microseconds: Iceberg's timestamptz, in the files as in the table.
    pa.field("ts", _US_UTC, nullable=False),
]
_DELETED = pa.field("deleted", pa.bool_(), nullable=False)


def arrow_type(column: Column) -> pa.DataType:
    """A declared column's output type (CONTRACT.md section 1a)."""
    kind = column.type
    if kind is ColumnType.DECIMAL:
        return pa.decimal128(column.precision, column.scale)
    return {
        ColumnType.STRING: pa.string(),
        ColumnType.INT64: pa.int64(),
        ColumnType.FLOAT64: pa.float64(),
        ColumnType.BOOL: pa.bool_(),
        ColumnType.TIMESTAMP: _US_UTC,
        ColumnType.DATE: pa.date32(),
    }[kind]


def declared_fields(schema: TableSchema) -> list[pa.Field]:
    """The declared columns under their output names. Only key columns are never null: a
    deleted row holds its key and null in every other column."""
    keys = set(schema.key)
    return [pa.field(c.output, arrow_type(c), nullable=c.name not in keys) for c in schema.columns]


@functools.lru_cache(maxsize=16)
def output_schema(schema: TableSchema) -> pa.Schema:
    """The output dataset's file schema for ``schema`` (CONTRACT.md section 3)."""
    return pa.schema([*_METADATA, *declared_fields(schema), _DELETED])


# The output dataset's file schema with the default schema (versions 1.x's columns).
OUTPUT_SCHEMA = output_schema(DEFAULT_SCHEMA)
OUTPUT_COLUMNS: tuple[str, ...] = tuple(OUTPUT_SCHEMA.names)
METADATA_NAMES: tuple[str, ...] = (*(f.name for f in _METADATA), _DELETED.name)

# The quarantine dataset (``<output>/_quarantine/``): records set aside in
# resync mode, with the reason, and the raw value as it arrived. Its columns are
# named as the output's where they mean the same (``ts``: the message's own time,
# null where its value could not be read); ``timestamp`` is the record's, Kafka's.
QUARANTINE_SCHEMA = pa.schema(
    [
        *(pa.field(f.name, f.type) for f in _METADATA[:6]),  # topic ... type
        pa.field("ts", _US_UTC),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("reason", pa.string()),
        pa.field("value", pa.binary()),
    ]
)

# What RowColumns keeps of a message with rows: its columns, its rows and deletions.
_MESSAGE = pa.struct(
    [
        *(pa.field(f.name, f.type) for f in _METADATA[2:6]),  # offset, session, seq, type
        pa.field("ts_ms", pa.int64()),
        pa.field("rows", pa.int64()),
        pa.field("deleted_rows", pa.int64()),
    ]
)


class QuarantinedRecord(NamedTuple):
    """A record set aside in resync mode, with the reason (quarantine dataset)."""

    topic: str
    partition: int
    offset: int
    session: str
    seq: int | None
    type: str | None
    ts_ms: int | None  # the message's ``ts``, where its value could be read
    timestamp_ms: int  # the record's timestamp (Kafka's)
    reason: str
    value: bytes | None


class RowColumns:
    """One topic-partition's output rows, in the order they were produced.

    Rows are taken as the processor returns them and converted to Arrow
    whole; a row the output schema refuses is found only then, and named
    with its message and column (:class:`~app.errors.ProcessorError`).
    ``producer`` names the processor that wrote them, for that line.

    With a ``store`` (:meth:`use_store`: the compiled decoder's
    :class:`~app.contract.envelope.RowStore`, which the engine's parser writes
    the messages' rows into), rows given as a
    :class:`~app.contract.envelope.RowSpan` of it are kept as their places,
    and the output's columns are the store's, taken by index; other rows (a
    message's deletions, one the decoder left) are tuples as without it.
    """

    __slots__ = (
        "_counts",
        "_deleted_row",
        "_length",
        "_messages",
        "_rows",
        "_starts",
        "producer",
        "schema",
        "store",
        "tp",
    )

    def __init__(
        self, tp: TopicPartition, schema: TableSchema = DEFAULT_SCHEMA, producer: str = ""
    ) -> None:
        self.tp = tp
        self.schema = schema
        self.producer = producer
        # (offset, session, seq, type, ts, rows, deleted rows): one per message with rows.
        self._messages: list[tuple[int, str, int, str, int, int, int]] = []
        self._rows: list[Row] = []  # a deleted row: its key, null elsewhere
        self._deleted_row = _deleted_row(schema)
        self.store: RowStore | None = None
        # With a store, the rows in order as runs of places: a run of the store's rows
        # (its first place), or of the tuples' (~ their first index), and its length.
        self._starts: list[int] = []
        self._counts: list[int] = []
        self._length = 0

    def __len__(self) -> int:
        return len(self._rows) if self.store is None else self._length

    def use_store(self, store: RowStore) -> bool:
        """Take the rows of :class:`~app.contract.envelope.RowSpan` s of ``store`` as
        their places from now on; False (and nothing changed) when this collection
        already holds rows or another store."""
        if self.store is None and not self._rows:
            self.store = store
        return self.store is store

    def emptied(self) -> RowColumns:
        """A new, empty collection of the same partition, schema and producer."""
        return RowColumns(self.tp, self.schema, self.producer)

    def emit(
        self, offset: int, session: str, seq: int, kind: str, ts: int, changes: Changes
    ) -> int:
        """Add a message's rows: its deletions, then its upserts. Returns the row count."""
        if changes.__class__ is not Changes:  # a list of rows would unpack as two rows
            raise TypeError(
                f"it returned {type(changes).__name__} {changes!r:.60} as its changes, not "
                "tablecast.Changes(rows, deleted) (or tablecast.NO_CHANGES)"
            )
        upserted, deleted = changes
        try:
            count = len(deleted) + len(upserted)
        except TypeError:  # a generator, say
            raise TypeError(
                f"its Changes holds {type(upserted).__name__} rows and {type(deleted).__name__} "
                "deleted keys: give each as a list"
            ) from None
        if count:
            self._messages.append((offset, session, seq, kind, ts, count, len(deleted)))
            rows = self._rows
            if self.store is None:
                if deleted:
                    rows.extend(map(self._deleted_row, deleted))
                rows.extend(upserted)
                return count
            self._length += count
            at = len(rows)
            if deleted:
                rows.extend(map(self._deleted_row, deleted))
            if upserted.__class__ is RowSpan and upserted.store is self.store:
                if deleted:
                    self._starts.append(~at)
                    self._counts.append(len(deleted))
                self._starts.append(upserted.first)
                self._counts.append(len(upserted))
            else:
                rows.extend(upserted)
                self._starts.append(~at)
                self._counts.append(len(rows) - at)
        return count

    def to_table(self) -> pa.Table:
        """The rows as an Arrow table of :func:`output_schema`."""
        with cyclic_gc_paused():
            return self._table()

    def _table(self) -> pa.Table:
        schema = output_schema(self.schema)
        n = len(self)
        if not n:
            return schema.empty_table()
        # One conversion each of the message and row tuples as structs: unzipping
        # millions of tuples in Python cost several times the conversions.
        offsets, sessions, seqs, kinds, stamps, counts, deleted_counts = pa.array(
            self._messages, _MESSAGE
        ).flatten()
        declared = self._declared() if self.store is None else self._declared_from_store(n)
        keys = self.schema.key_indexes
        if any(declared[i].null_count for i in keys):
            raise self._refused("a key column is null")
        repeat = counts.to_numpy()
        per_row = np.repeat(np.arange(len(repeat)), repeat)
        # Each message's rows start with its deletions.
        firsts = np.repeat(np.cumsum(repeat) - repeat, repeat)
        deleted = (np.arange(n) - firsts) < np.repeat(deleted_counts.to_numpy(), repeat)
        micros = pa.array(stamps.take(per_row).to_numpy() * 1000, pa.int64())
        return pa.table(
            [
                pa.repeat(pa.scalar(self.tp.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.tp.partition, pa.int32()), n),
                offsets.take(per_row),
                sessions.take(per_row),
                seqs.take(per_row),
                kinds.take(per_row),
                micros.cast(_US_UTC),
                *declared,
                pa.array(deleted, pa.bool_()),
            ],
            schema=schema,
        )

    def _declared(self) -> list[pa.Array]:
        """The declared columns of the tuples."""
        declared = _native_columns(self.schema, self._rows)
        if declared is None:  # not every value of its exact type (or not built): pyarrow's
            try:
                declared = pa.array(self._rows, _row_struct(self.schema)).flatten()
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise self._refused(str(exc)) from None
            # The built-in's rows are its input's, which rule 7 typed: a user's are checked.
            if self.producer != TableProcessor.name and not (
                _converted_exactly(self.schema, self._rows) and _finite(self.schema, declared)
            ):
                raise self._refused("")
        return declared

    def _declared_from_store(self, n: int) -> list[pa.Array]:
        """The declared columns of the ``n`` rows, in the order of the runs: the store
        gathers its rows and the tuples' (the compiled converter's columns of them) in one
        copy. Tuples the converter leaves go through pyarrow and its checks
        (:meth:`_declared`), and then the store's columns and theirs are taken."""
        assert self.store is not None
        others = _native_buffers(self.schema, self._rows) if self._rows else None
        if not self._rows or others is not None:
            found = self.store.gather(self._starts, self._counts, others, len(self._rows))
            return _arrays(self.schema, found, n)
        held = len(self.store)
        stored = _arrays(self.schema, self.store.columns(), held)
        starts = np.array(self._starts, np.int64)
        counts = np.array(self._counts, np.int64)
        # A run's places in the store's rows followed by the tuples'.
        first = np.where(starts < 0, held + ~starts, starts)
        index = pa.array(np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(n))
        if not self._rows:
            return [column.take(index) for column in stored]
        tuples = self._declared()
        return [
            pa.concat_arrays([column, more]).take(index)
            for column, more in zip(stored, tuples, strict=True)
        ]

    def _refused(self, arrow: str) -> ProcessorError:
        """The first row the output schema refuses, named with its message and column."""
        columns = self.schema.columns
        keys = set(self.schema.key_indexes)
        found = next(
            (
                (n, problem)
                for n, row in enumerate(self._rows)
                for problem in [_row_problem(columns, keys, row)]
                if problem is not None
            ),
            (None, arrow.splitlines()[0] if arrow else "rows Arrow cannot convert"),
        )
        at, problem = found
        where = ""
        facts: dict[str, str | int] = {"step": "output", "processor": self.producer}
        if at is not None and self.store is None:  # with a store, the tuples are some rows
            first = 0
            for offset, session, _, _, _, count, _ in self._messages:
                if at < first + count:
                    where = f" at {self.tp} offset {offset}, session {session!r}"
                    facts |= {
                        "topic": self.tp.topic,
                        "partition": self.tp.partition,
                        "offset": offset,
                        "session": session,
                    }
                    break
                first += count
        who = f"processor {self.producer}" if self.producer else "a processor"
        return ProcessorError(
            f"{who} wrote a row its output schema refuses{where}: {problem}", **facts
        )


def native_converter_built() -> bool:
    """Whether this checkout's compiled converter is built (``make setup`` builds it)."""
    return _native is not None


@functools.lru_cache(maxsize=16)
def _native_types(schema: TableSchema) -> tuple[tuple[int, int, int], ...]:
    return tuple((NATIVE_TYPES.index(c.type), c.precision, c.scale) for c in schema.columns)


# The compiled parts' form of columns: per column its null count, validity, data and (a
# string's) offsets.
_Buffers = list[tuple[int, bytes | None, bytes, bytes | None]]


def _native_columns(schema: TableSchema, rows: list[Row]) -> list[pa.Array] | None:
    """The declared columns of ``rows``, written by the compiled converter: only when every
    value is of its column's exact type, as the output holds it (an int in an int64
    column, a finite float in a float64 one, an aware datetime, a Decimal exact at the
    column's scale, ...), so they are what pyarrow's conversion and the checks of a
    user's rows would give; otherwise None (and where it is not built)."""
    found = _native_buffers(schema, rows)
    return None if found is None else _arrays(schema, found, len(rows))


def _native_buffers(schema: TableSchema, rows: list[Row]) -> _Buffers | None:
    """:func:`_native_columns`' buffers (null count, validity, data, a string's offsets)
    before they are made Arrow arrays."""
    if _native is None or not rows:
        return None
    found: _Buffers | None = _native.columns(rows, _native_types(schema), Decimal)
    return found


def _arrays(schema: TableSchema, found: _Buffers, rows: int) -> list[pa.Array]:
    """The declared columns from the compiled parts' buffers (null count, validity, data,
    a string's offsets) of ``rows`` rows."""
    arrays: list[pa.Array] = []
    for column, (nulls, validity, data, offsets) in zip(schema.columns, found, strict=True):
        mask = None if validity is None else pa.py_buffer(validity)
        buffers = [mask, pa.py_buffer(data)]
        if offsets is not None:  # a string column: validity, offsets, then the UTF-8
            buffers = [mask, pa.py_buffer(offsets), pa.py_buffer(data)]
        arrays.append(pa.Array.from_buffers(arrow_type(column), rows, buffers, nulls))
    return arrays


# Arrow converts some values of another type into these columns without a word: a float
# or a Decimal into int64 truncated, a number into a timestamp as microseconds or into a
# date as days, a datetime into a date cut to its day; and a naive datetime as UTC.
def _inexact(kind: ColumnType, found: type) -> bool:
    if kind is ColumnType.INT64:
        return issubclass(found, Number) and not issubclass(found, Integral)
    if kind is ColumnType.DATE and issubclass(found, datetime):
        return True
    return issubclass(found, Number)


_LENIENT = (ColumnType.INT64, ColumnType.TIMESTAMP, ColumnType.DATE)
_TZ = attrgetter("tzinfo")


def _converted_exactly(schema: TableSchema, rows: list[Row]) -> bool:
    """Whether Arrow, having taken ``rows``, converted each value as it is."""
    for i, kind in _lenient_columns(schema):
        cell = itemgetter(i)
        try:  # a type at a time: a column's values are of one or two
            if any(_inexact(kind, found) for found in set(map(type, map(cell, rows)))):
                return False
            if kind is ColumnType.TIMESTAMP and None in set(
                map(_TZ, filter(None, map(cell, rows)))
            ):
                return False
        except (IndexError, KeyError, TypeError):  # a row that is not a tuple (a dict)
            return False
    return True


def _finite(schema: TableSchema, declared: Sequence[pa.Array]) -> bool:
    """Whether the float64 columns hold numbers only: not NaN or infinite (CONTRACT.md 1a)."""
    for i, column in enumerate(schema.columns):
        if (
            column.type is ColumnType.FLOAT64
            and pc.any(pc.invert(pc.is_finite(declared[i]))).as_py()
        ):
            return False
    return True


@functools.lru_cache(maxsize=16)
def _lenient_columns(schema: TableSchema) -> tuple[tuple[int, ColumnType], ...]:
    return tuple((i, c.type) for i, c in enumerate(schema.columns) if c.type in _LENIENT)


def _row_problem(columns: tuple[Column, ...], keys: set[int], row: Any) -> str | None:
    """What is wrong with one output row, or None."""
    if not isinstance(row, tuple) or len(row) != len(columns):
        names = ", ".join(c.output for c in columns)
        got = f"a tuple of {len(row)}" if isinstance(row, tuple) else type(row).__name__
        return f"expected a tuple of the {len(columns)} output columns ({names}), got {got}"
    for i, (column, value) in enumerate(zip(columns, row, strict=True)):
        if value is None:
            if i in keys:
                return f"column {column.output!r}: a key column is never null"
            continue
        if not _fits(column, value):
            if isinstance(value, datetime) and column.type is ColumnType.TIMESTAMP:
                return f"column {column.output!r}: expected an aware datetime, got {value!r:.60}"
            return (
                f"column {column.output!r}: expected {column.type_name}, got "
                f"{type(value).__name__} {value!r:.60}"
            )
    return None


def _fits(column: Column, value: Any) -> bool:
    kind = column.type
    if kind is ColumnType.STRING:
        return isinstance(value, str)
    if kind is ColumnType.BOOL:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind is ColumnType.INT64:
        return isinstance(value, int) and -(2**63) <= value < 2**63
    if kind is ColumnType.FLOAT64:
        return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))
    if kind is ColumnType.TIMESTAMP:
        return isinstance(value, datetime) and value.tzinfo is not None
    if kind is ColumnType.DATE:
        return isinstance(value, date) and not isinstance(value, datetime)
    if not isinstance(value, Decimal | int) or (
        isinstance(value, Decimal) and not value.is_finite()
    ):
        return False
    digits = Decimal(value).as_tuple()
    scale = -int(digits.exponent) if isinstance(digits.exponent, int) else 0
    return scale <= column.scale and len(digits.digits) - scale <= column.precision - column.scale


@functools.lru_cache(maxsize=16)
def _row_struct(schema: TableSchema) -> pa.StructType:
    """A row tuple as Arrow converts it (every field nullable: the table's schema says more)."""
    return pa.struct([pa.field(f.name, f.type) for f in declared_fields(schema)])


def _deleted_row(schema: TableSchema) -> Callable[[Key], Row]:
    """The output row of a deleted key: the key columns set, every other column null."""
    width, indexes = len(schema.columns), schema.key_indexes
    if len(indexes) == 1:
        before, after = (None,) * indexes[0], (None,) * (width - indexes[0] - 1)
        return lambda key: (*before, key, *after)

    def row(key: Key) -> Row:
        cells: list[object] = [None] * width
        for i, value in zip(indexes, key, strict=True):
            cells[i] = value
        return tuple(cells)

    return row


def quarantine_table(records: list[QuarantinedRecord]) -> pa.Table:
    """Quarantined records as an Arrow table of :data:`QUARANTINE_SCHEMA`."""
    columns = list(zip(*records, strict=True)) if records else [()] * len(QuarantinedRecord._fields)
    arrays = [
        _quarantine_column(name, values).cast(field.type)
        for name, field, values in zip(
            QUARANTINE_SCHEMA.names, QUARANTINE_SCHEMA, columns, strict=True
        )
    ]
    return pa.table(arrays, schema=QUARANTINE_SCHEMA)


def _quarantine_column(name: str, values: Sequence[object]) -> pa.Array:
    """One quarantine column; its times arrive as milliseconds since the epoch."""
    if name == "ts":
        return pc.multiply(pa.array(values, pa.int64()), 1000)  # microseconds, as the output's
    if name == "timestamp":
        return pa.array(values, pa.int64())
    return pa.array(values, QUARANTINE_SCHEMA.field(name).type)
