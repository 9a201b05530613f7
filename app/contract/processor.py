"""The per-session processor interface and its reference implementation.

A processor turns one session's messages, one at a time and in order, into
changes of the session's table while carrying arbitrary state of its own.
It knows nothing of Spark, Kafka or files: the partition engine
(:class:`app.engine.machine.PartitionMachine`) feeds it messages that
already passed the sequence rules, turns its :class:`Changes` into output
rows (CONTRACT.md section 3) and stores the bytes that
:meth:`Processor.encode` returns in the partition's state.

To build another stateful transformation on the same pipeline, implement
:class:`Processor` for your state type and pass it to the job; the ordering,
integrity, state versioning and exactly-once output come with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from operator import itemgetter
from typing import Any, NamedTuple, Protocol, TypeVar

import orjson

from app.contract.envelope import Envelope, Key, MessageType, Row
from app.contract.schema import DEFAULT_SCHEMA, ColumnType, TableSchema
from app.errors import Rule

StateT = TypeVar("StateT")


class Changes(NamedTuple):
    """What one message did to a session's table.

    The engine writes one output row per deleted key (``deleted=true``, the
    key columns set and every other column null), then one per upserted
    row, so that the last row of a message for a key is its state after the
    message.
    """

    deleted: Sequence[Key]
    upserted: Sequence[Row]


NO_CHANGES = Changes((), ())
# Changes((deleted, upserted)) without NamedTuple's Python-level __new__ (one per message).
_changes: Callable[[tuple[Sequence[Key], Sequence[Row]]], Changes] = partial(tuple.__new__, Changes)


class ProcessorViolation(Exception):
    """Raised by a processor when a message breaks a rule it owns."""

    def __init__(self, rule: Rule, expected: str, got: str) -> None:
        super().__init__(f"expected {expected}, got {got}")
        self.rule = rule
        self.expected = expected
        self.got = got


class Processor(Protocol[StateT]):
    """What a session's transformation implements.

    ``schema`` is the table schema its messages are parsed with: rows reach
    it as tuples of the declared columns' values, in declared order
    (:mod:`app.contract.values` says each type's Python form), and the rows
    it returns are written as those columns.

    ``apply`` receives the state left by the previous message (``None`` for
    the first message of a session, which is always a snapshot) and returns
    the new state with the changes the message makes. It may update the
    state in place: the engine never reuses a state after a failed batch.
    ``end`` messages never reach it: the session's state is dropped.
    """

    @property
    def schema(self) -> TableSchema: ...

    def apply(self, state: StateT | None, message: Envelope) -> tuple[StateT, Changes]: ...

    def encode(self, state: StateT) -> bytes: ...

    def decode(self, data: bytes) -> StateT: ...


# key -> the row (every column); dicts keep insertion order, so output is stable.
Table = dict[Key, Row]


class TableProcessor:
    """Rebuilds a session's table from snapshots and updates (the reference)."""

    def __init__(self, schema: TableSchema = DEFAULT_SCHEMA) -> None:
        self._schema = schema
        self._key: Callable[[Row], Key] = itemgetter(*schema.key_indexes)

    @property
    def schema(self) -> TableSchema:
        return self._schema

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self._schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["schema"])  # type: ignore[misc]

    def apply(self, state: Table | None, message: Envelope) -> tuple[Table, Changes]:
        _, _, kind, _, rows, deleted = message
        key = self._key
        if kind is MessageType.SNAPSHOT:
            table: Table = {key(row): row for row in rows}
            if len(table) != len(rows):
                raise ProcessorViolation(
                    Rule.ENVELOPE, "unique keys in a snapshot", f"key {_twice(rows, key)!r} twice"
                )
            gone = [k for k in state if k not in table] if state else []
            return table, _changes((gone, rows))

        table = state if state is not None else {}
        for k in deleted:  # all checked before any is removed: a violation changes nothing
            if k not in table:
                raise ProcessorViolation(
                    Rule.DELETE_UNKNOWN_ROW,
                    "a key present in the table",
                    f"delete of unknown key {k!r}",
                )
        for k in deleted:
            del table[k]
        for row in rows:
            table[key(row)] = row
        return table, _changes((deleted, rows))

    def encode(self, state: Table) -> bytes:
        """The table as ``[column names, rows]`` (decimals, times and dates as text): a
        state saved before columns were added reads them as null."""
        return orjson.dumps([self._schema.names, list(state.values())], default=str)

    def decode(self, data: bytes) -> Table:
        return decode_table(self._schema, orjson.loads(data))


def decode_table(schema: TableSchema, raw: Any) -> Table:
    """A table from :meth:`TableProcessor.encode`, under ``schema``: columns matched by
    name, a column the state lacks (added since) null. A state of versions 1.x (``{id:
    [value, status]}``) reads as the default schema's."""
    if isinstance(raw, dict):
        raw = [("id", "value", "status"), [[k, *v] for k, v in raw.items()]]
    names, rows = raw
    key = itemgetter(*schema.key_indexes)
    where = {name: i for i, name in enumerate(names)}
    places = [where.get(c.name) for c in schema.columns]
    # What JSON holds as text: decimals, times and dates.
    typed = [(i, _FROM_TEXT[c.type]) for i, c in enumerate(schema.columns) if c.type in _FROM_TEXT]
    if places == list(range(len(names))) and not typed:
        return {key(row): row for row in map(tuple, rows)}
    table: Table = {}
    for stored in rows:
        cells: list[Any] = [None if at is None else stored[at] for at in places]
        for i, read in typed:
            if cells[i] is not None:
                cells[i] = read(cells[i])
        row = tuple(cells)
        table[key(row)] = row
    return table


_FROM_TEXT: dict[ColumnType, Callable[[str], Any]] = {
    ColumnType.DECIMAL: Decimal,
    ColumnType.TIMESTAMP: datetime.fromisoformat,
    ColumnType.DATE: date.fromisoformat,
}


def _twice(rows: Sequence[Row], key: Callable[[Row], Key]) -> Key:
    seen: set[Key] = set()
    for row in rows:
        k = key(row)
        if k in seen:
            return k
        seen.add(k)
    raise AssertionError("no repeated key")
