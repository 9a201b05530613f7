"""The per-session processor interface and its reference implementation.

A processor turns one session's messages, one at a time and in order, into
output rows while carrying arbitrary state of its own. It knows nothing of
Spark, Kafka or files: :class:`app.session.SessionMachine` feeds it messages
that already passed the sequence rules, and the Spark wrapper stores the
bytes that :meth:`Processor.encode` returns in Spark's state store.

To build another stateful transformation on the same pipeline, implement
:class:`Processor` for your state type and pass it to the job; the ordering,
integrity, checkpointing and exactly-once output come with it.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, TypeVar

import orjson

from app.contract import Envelope, MessageType, Position
from app.errors import Rule

StateT = TypeVar("StateT")


class OutputRow(NamedTuple):
    """One row of the output dataset (CONTRACT.md section 3); ``ts`` in ms."""

    topic: str
    partition: int
    offset: int
    session: str
    seq: int
    type: str
    ts: int
    row_id: str
    value: float | None
    status: str | None
    deleted: bool


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
    the new state with the rows the message produces. It may update the state
    in place. ``end`` messages never reach it: the session's state is dropped.
    """

    def apply(
        self, state: StateT | None, position: Position, message: Envelope
    ) -> tuple[StateT, list[OutputRow]]: ...

    def encode(self, state: StateT) -> bytes: ...

    def decode(self, data: bytes) -> StateT: ...


# row id -> (value, status); dicts keep insertion order, so output is stable.
Table = dict[str, tuple[float | None, str | None]]


class TableProcessor:
    """Rebuilds a session's table from snapshots and updates (the reference)."""

    def apply(
        self, state: Table | None, position: Position, message: Envelope
    ) -> tuple[Table, list[OutputRow]]:
        topic, partition, offset = position.topic, position.partition, position.offset
        session, seq, kind, ts = message.session, message.seq, message.type.value, message.ts
        out: list[OutputRow] = []
        if message.type is MessageType.SNAPSHOT:
            table: Table = {}
            for row in message.rows:
                if row.id in table:
                    raise ProcessorViolation(
                        Rule.ENVELOPE, "unique row ids in a snapshot", f"row id {row.id!r} twice"
                    )
                table[row.id] = (row.value, row.status)
                out.append(
                    OutputRow(
                        topic, partition, offset, session, seq, kind, ts,
                        row.id, row.value, row.status, False,
                    )
                )  # fmt: skip
            for row_id in state or ():
                if row_id not in table:
                    out.append(
                        OutputRow(
                            topic, partition, offset, session, seq, kind, ts,
                            row_id, None, None, True,
                        )
                    )  # fmt: skip
            return table, out

        table = state if state is not None else {}
        for row_id in message.deleted:
            if row_id not in table:
                raise ProcessorViolation(
                    Rule.DELETE_UNKNOWN_ROW,
                    "a row id present in the table",
                    f"delete of unknown row id {row_id!r}",
                )
            del table[row_id]
            out.append(
                OutputRow(
                    topic, partition, offset, session, seq, kind, ts, row_id, None, None, True
                )
            )
        for row in message.rows:
            table[row.id] = (row.value, row.status)
            out.append(
                OutputRow(
                    topic, partition, offset, session, seq, kind, ts,
                    row.id, row.value, row.status, False,
                )
            )  # fmt: skip
        return table, out

    def encode(self, state: Table) -> bytes:
        return orjson.dumps(state)

    def decode(self, data: bytes) -> Table:
        raw: dict[str, tuple[float | None, str | None]] = orjson.loads(data)
        return {row_id: (value, status) for row_id, (value, status) in raw.items()}
