"""The built-in processor: a session's table rebuilt from snapshots and updates.

One :class:`~app.contract.processor.Processor` among others, written
against the same API as a user's: its input and output are the operator's
table schema (CONTRACT.md section 1a), its state the session's table, and
what each message produces is CONTRACT.md section 3's. It encodes its state
itself (a table of the schema's columns, by name), so that a state saved
before columns were added reads them as null.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime
from decimal import Decimal
from functools import partial
from operator import itemgetter
from typing import Any

import orjson

from app.contract.envelope import RowSpan
from app.contract.processor import Changes, Key, Message, MessageType, Processor, Reject, Row
from app.contract.schema import DEFAULT_SCHEMA, ColumnType, TableSchema

# key -> the row (every column); dicts keep insertion order, so output is stable.
Table = dict[Key, Row]

# Changes((rows, deleted)) without NamedTuple's Python-level __new__ (one per message).
_changes: Callable[[tuple[Sequence[Row], Sequence[Key]]], Changes] = partial(tuple.__new__, Changes)


class TableProcessor(Processor[Table]):
    """Rebuilds a session's table from snapshots and updates (the reference)."""

    name = "table"

    def __init__(self, schema: TableSchema = DEFAULT_SCHEMA) -> None:
        self.input = self.output = schema
        self._schema = schema
        self._key: Callable[[Row], Key] = itemgetter(*schema.key_indexes)

    @property
    def schema(self) -> TableSchema:
        return self._schema

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self._schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["schema"])  # type: ignore[misc]

    def start(self, message: Message) -> Table:
        return {}

    def apply(self, state: Table, message: Message) -> tuple[Table, Changes]:
        _, _, kind, _, rows, deleted = message
        # Rows the compiled decoder keeps in its store (app.contract.envelope.RowSpan): the
        # table holds each row's place there, an int, until the engine's run ends and
        # makes the places a table still holds rows again (app.engine.machine.settle).
        span = rows if isinstance(rows, RowSpan) else None
        key = self._key
        if kind is MessageType.SNAPSHOT:
            table: Table = span.table() if span is not None else {key(row): row for row in rows}
            if len(table) != len(rows):
                twice = _twice(span.keys if span is not None else map(key, rows))
                raise Reject("unique keys in a snapshot", f"key {twice!r} twice")
            gone = [k for k in state if k not in table]
            return table, _changes((rows, gone))

        for k in deleted:  # all checked before any is removed: a violation changes nothing
            if k not in state:
                raise Reject("a key present in the table", f"delete of unknown key {k!r}", rule=4)
        for k in deleted:
            del state[k]
        if span is not None:
            span.place(state)
        else:
            for row in rows:
                state[key(row)] = row
        return state, _changes((rows, deleted))

    def encode_state(self, state: Table) -> bytes:
        """The table as ``[column names, rows]`` (decimals, times and dates as text): a
        state saved before columns were added reads them as null."""
        return orjson.dumps([self._schema.names, list(state.values())], default=str)

    def decode_state(self, data: bytes) -> Table:
        return decode_table(self._schema, orjson.loads(data))

    def decode_old(self, data: bytes) -> Any:
        return orjson.loads(data)


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


def _twice(keys: Iterable[Key]) -> Key:
    seen: set[Key] = set()
    for k in keys:
        if k in seen:
            return k
        seen.add(k)
    raise AssertionError("no repeated key")
