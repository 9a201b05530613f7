"""Rows of any declared table schema, with the edge values producers send.

A session's table is kept as JSON values (what goes on the wire), keyed by
its key columns' values. Keys come from a counter, so a snapshot never
holds one twice: the first key column that can hold every count takes the
counter, the others cycle through a few values (``site`` in ``site, id``).
"""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal
from typing import Any, Protocol

import orjson

from app.contract.schema import Column, ColumnType, TableSchema


class SessionShape(Protocol):
    """How a session's tables grow and change (:class:`app.tools.generate.CaptureSpec`)."""

    @property
    def rows_min(self) -> int: ...
    @property
    def rows_max(self) -> int: ...
    @property
    def updates(self) -> int: ...
    @property
    def resync_every(self) -> int: ...


_ABSENT = object()  # a nullable field left out of the row
_STRINGS = ("ok", "é", "日本語", "🙂 emoji", 'quote " and \\ backslash', "", "line\nbreak")
_OFFSETS = ("Z", "+05:30", "-08:00", "+00:00")
_START = datetime(2026, 1, 1, tzinfo=UTC)
_START_MS = int(_START.timestamp() * 1000)
_EPOCH_DATE = date(2000, 1, 1)
_EXACT = Context(prec=80)


class TypedRows:
    """One session's rows of ``schema``, drawn from ``rng``."""

    def __init__(self, schema: TableSchema, rng: random.Random) -> None:
        self.schema = schema
        self.rng = rng
        keys = [schema.columns[i] for i in schema.key_indexes]
        counted = [c for c in keys if c.type is not ColumnType.BOOL]
        self._counted = counted[0].name if counted else keys[-1].name
        self._keys = keys
        self._next = 0

    def unknown_key(self) -> Any:
        """A key no row of the session has (rule 4's fault)."""
        return self._key_object(10**6 + 7)

    def session_messages(self, spec: SessionShape, session: str) -> list[dict[str, Any]]:
        """The envelopes of one session, ``ts`` left for the interleaving to set."""
        rng = self.rng
        table: dict[str, dict[str, Any]] = {}

        def snapshot(seq: int) -> dict[str, Any]:
            nonlocal table
            if table:  # a resync keeps most rows, changes some, drops a few
                table = {k: v for k, v in table.items() if rng.random() > 0.1}
            for _ in range(rng.randint(spec.rows_min, spec.rows_max) - len(table)):
                row = self.new_row()
                table[self._identity(row)] = row
            return {
                "session": session,
                "seq": seq,
                "type": "snapshot",
                "rows": list(table.values()),
            }

        messages = [snapshot(0)]
        for _ in range(spec.updates):
            seq = len(messages)
            if spec.resync_every and seq % spec.resync_every == 0:
                messages.append(snapshot(seq))
                continue
            upserts: dict[str, dict[str, Any]] = {}
            for _ in range(rng.randint(1, 4)):
                if table and rng.random() < 0.8:
                    identity = rng.choice(list(table))
                    upserts[identity] = self.changed(table[identity])
                else:
                    row = self.new_row()
                    upserts[self._identity(row)] = row
            deleted: list[Any] = []
            untouched = [k for k in table if k not in upserts]
            if len(table) > spec.rows_min and untouched and rng.random() < 0.1:
                deleted = [self._deleted(table.pop(rng.choice(untouched)))]
            table.update(upserts)
            message: dict[str, Any] = {
                "session": session,
                "seq": seq,
                "type": "update",
                "rows": list(upserts.values()),
            }
            if deleted:
                message["deleted"] = deleted
            messages.append(message)
        messages.append({"session": session, "seq": len(messages), "type": "end"})
        return messages

    def new_row(self) -> dict[str, Any]:
        self._next += 1
        row = self._key_object(self._next)
        return self._fill(row)

    def changed(self, row: dict[str, Any]) -> dict[str, Any]:
        """The same key, other values."""
        return self._fill({c.name: row[c.name] for c in self._keys})

    def _fill(self, row: dict[str, Any]) -> dict[str, Any]:
        for column in self.schema.columns:
            if column.name in row:
                continue
            value = self._value(column)
            if value is not _ABSENT:
                row[column.name] = value
        return row

    def _identity(self, row: dict[str, Any]) -> str:
        return orjson.dumps([row[c.name] for c in self._keys]).decode()

    def _deleted(self, row: dict[str, Any]) -> Any:
        """A delete names the row by a key object; a one-column key sometimes bare."""
        key = {c.name: row[c.name] for c in self._keys}
        if len(self._keys) == 1 and self.rng.random() < 0.5:
            return key[self._keys[0].name]
        return key

    def _key_object(self, n: int) -> dict[str, Any]:
        return {c.name: _key_value(c, n if c.name == self._counted else n % 3) for c in self._keys}

    def _value(self, column: Column) -> Any:
        rng = self.rng
        if column.nullable:
            draw = rng.random()
            if draw < 0.12:
                return _ABSENT
            if draw < 0.2:
                return None
        kind = column.type
        if kind is ColumnType.STRING:
            return rng.choice(_STRINGS)
        if kind is ColumnType.INT64:
            return rng.choice((0, -1, 2**63 - 1, -(2**63), rng.randint(-(10**12), 10**12)))
        if kind is ColumnType.FLOAT64:
            return rng.choice((round(rng.uniform(-1e6, 1e6), 3), 0.0, -0.5, 3, 1e300, -2.5e-300))
        if kind is ColumnType.BOOL:
            return rng.random() < 0.5
        if kind is ColumnType.TIMESTAMP:
            micros = rng.randint(-(10**15), 10**15)
            if rng.random() < 0.3:
                return _START_MS + micros // 1000
            return _rfc3339(_START + timedelta(microseconds=micros), rng.choice(_OFFSETS))
        if kind is ColumnType.DATE:
            return (_EPOCH_DATE + timedelta(days=rng.randint(-3650, 3650))).isoformat()
        limit = 10**column.precision - 1
        unscaled = rng.choice((limit, -limit, 0, rng.randint(-limit, limit)))
        return _decimal(column, unscaled, as_number=rng.random() < 0.5)


def _key_value(column: Column, n: int) -> Any:
    kind = column.type
    if kind is ColumnType.STRING:
        return f"k{n:06d}-é"
    if kind is ColumnType.INT64:
        return n * 1_000_003 - 2**62
    if kind is ColumnType.FLOAT64:
        return n + 0.25
    if kind is ColumnType.BOOL:
        return n % 2 == 1
    if kind is ColumnType.TIMESTAMP:
        ms = _START_MS + n * 1000
        return ms if n % 2 else _rfc3339(_START + timedelta(milliseconds=n * 1000), "+01:00")
    if kind is ColumnType.DATE:
        return (_EPOCH_DATE + timedelta(days=n)).isoformat()
    return _decimal(column, n % 10**column.precision, as_number=False)


def _decimal(column: Column, unscaled: int, *, as_number: bool) -> Any:
    text = f"{Decimal(unscaled).scaleb(-column.scale, context=_EXACT):f}"
    return orjson.Fragment(text.encode()) if as_number else text


def _rfc3339(moment: datetime, offset: str) -> str:
    hours = (
        0
        if offset in ("Z", "+00:00")
        else int(offset[:3]) + (int(offset[4:]) / 60) * (1 if offset[0] == "+" else -1)
    )
    local = moment + timedelta(hours=hours)
    return local.strftime("%Y-%m-%dT%H:%M:%S.%f") + offset
