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
from functools import partial
from typing import NamedTuple, Protocol, TypeVar

import orjson

from app.contract.envelope import Envelope, MessageType, TableRow
from app.errors import Rule

StateT = TypeVar("StateT")


class Changes(NamedTuple):
    """What one message did to a session's table.

    The engine writes one output row per deleted id (``deleted=true``,
    value and status null), then one per upserted row, so that the last
    row of a message for a row id is its state after the message.
    """

    deleted: Sequence[str]
    upserted: Sequence[TableRow]


NO_CHANGES = Changes((), ())
# Changes((deleted, upserted)) without NamedTuple's Python-level __new__ (one per message).
_changes: Callable[[tuple[Sequence[str], Sequence[TableRow]]], Changes] = partial(
    tuple.__new__, Changes
)


class ProcessorViolation(Exception):
    """Raised by a processor when a message breaks a rule it owns."""

    def __init__(self, rule: Rule, expected: str, got: str) -> None:
        super().__init__(f"expected {expected}, got {got}")
        self.rule = rule
        self.expected = expected
        self.got = got


class Processor(Protocol[StateT]):
    """What a session's transformation implements.

    ``apply`` receives the state left by the previous message (``None`` for
    the first message of a session, which is always a snapshot) and returns
    the new state with the changes the message makes. It may update the
    state in place: the engine never reuses a state after a failed batch.
    ``end`` messages never reach it: the session's state is dropped.
    """

    def apply(self, state: StateT | None, message: Envelope) -> tuple[StateT, Changes]: ...

    def encode(self, state: StateT) -> bytes: ...

    def decode(self, data: bytes) -> StateT: ...


# row id -> (value, status); dicts keep insertion order, so output is stable.
Table = dict[str, tuple[float | None, str | None]]


class TableProcessor:
    """Rebuilds a session's table from snapshots and updates (the reference)."""

    def apply(self, state: Table | None, message: Envelope) -> tuple[Table, Changes]:
        _, _, kind, _, rows, deleted = message
        if kind is MessageType.SNAPSHOT:
            table: Table = {row_id: (value, status) for row_id, value, status in rows}
            if len(table) != len(rows):
                raise ProcessorViolation(
                    Rule.ENVELOPE, "unique row ids in a snapshot", f"row id {_twice(rows)!r} twice"
                )
            gone = [row_id for row_id in state if row_id not in table] if state else []
            return table, _changes((gone, rows))

        table = state if state is not None else {}
        for row_id in deleted:  # all checked before any is removed: a violation changes nothing
            if row_id not in table:
                raise ProcessorViolation(
                    Rule.DELETE_UNKNOWN_ROW,
                    "a row id present in the table",
                    f"delete of unknown row id {row_id!r}",
                )
        for row_id in deleted:
            del table[row_id]
        for row_id, value, status in rows:
            table[row_id] = (value, status)
        return table, _changes((deleted, rows))

    def encode(self, state: Table) -> bytes:
        return orjson.dumps(state)

    def decode(self, data: bytes) -> Table:
        raw: dict[str, list[float | str | None]] = orjson.loads(data)
        return {row_id: (value, status) for row_id, (value, status) in raw.items()}  # type: ignore[misc]


def _twice(rows: Sequence[TableRow]) -> str:
    seen: set[str] = set()
    for row_id, _, _ in rows:
        if row_id in seen:
            return row_id
        seen.add(row_id)
    raise AssertionError("no repeated row id")
