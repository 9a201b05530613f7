"""Integrity rules 1 to 6 around a processor, for one session at a time.

:class:`SessionMachine` is the heart of the job and knows nothing of Spark:
the Spark wrapper hands it a session's stored state and the records of one
micro-batch; ``verify`` and ``replay`` hand it a whole archive. It orders the
records by (topic, partition, offset) itself, because Spark's shuffle does
not keep offset order inside a group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Generic, NamedTuple

from app.contract import Envelope, MessageType, Position, Record, decode_key, parse_envelope
from app.errors import EnvelopeError, Rule, Violation
from app.processor import OutputRow, Processor, ProcessorViolation, StateT


class IntegrityMode(StrEnum):
    """What a violation does (CONTRACT.md section 2)."""

    STRICT = "strict"  # fail the job, publish nothing of the micro-batch
    RESYNC = "resync"  # quarantine the session until a snapshot re-establishes it


@dataclass(slots=True)
class SessionState(Generic[StateT]):
    """What the job remembers of one session between micro-batches."""

    session: str
    topic: str
    partition: int
    last_seq: int  # -1 while quarantined before any valid message
    last_offset: int
    last_ts: int
    closed: bool = False  # an `end` arrived; kept so that rule 5 can be enforced
    quarantine: str | None = None  # resync mode: why the session awaits a snapshot
    user: StateT | None = None  # the processor's state


class QuarantinedRecord(NamedTuple):
    """A record set aside in resync mode, with the reason (quarantine dataset)."""

    topic: str
    partition: int
    offset: int
    session: str
    seq: int | None
    type: str | None
    timestamp_ms: int
    reason: str
    value: bytes | None


class TraceEvent(NamedTuple):
    """One applied message of a traced session (``tablecast run --trace``)."""

    position: Position
    session: str
    seq: int
    type: str
    rows: int
    outcome: str


@dataclass(slots=True)
class BatchResult(Generic[StateT]):
    """What one session's records of one micro-batch produced."""

    state: SessionState[StateT] | None
    rows: list[OutputRow] = field(default_factory=list)
    quarantined: list[QuarantinedRecord] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    messages: int = 0
    trace: list[TraceEvent] = field(default_factory=list)


class SessionMachine(Generic[StateT]):
    """Applies a session's records in offset order, enforcing section 2.

    ``adopt`` names sessions that may begin with a resync snapshot (``seq`` >
    0) instead of ``seq`` 0: the sessions that ``tablecast repair`` restarted
    from a later snapshot, each with that snapshot's offset. The snapshot at
    that offset rebuilds the table but produces no rows: its rows (including
    the deletions relative to the table before it) are already published.
    """

    def __init__(
        self,
        processor: Processor[StateT],
        mode: IntegrityMode = IntegrityMode.STRICT,
        adopt: Mapping[str, int] | None = None,
        trace: frozenset[str] = frozenset(),
    ) -> None:
        self.processor = processor
        self.mode = mode
        self.adopt: Mapping[str, int] = adopt or {}
        self.trace = trace

    def apply(
        self, key: bytes | None, state: SessionState[StateT] | None, records: Iterable[Record]
    ) -> BatchResult[StateT]:
        """Apply one micro-batch of a session's records to its state."""
        result: BatchResult[StateT] = BatchResult(state)
        # Plain tuples compare in C; Position's own ordering is the same, slower.
        ordered = sorted(
            records,
            key=lambda r: (r.position.topic, r.position.partition, r.position.offset),
        )
        try:
            session = decode_key(key)
        except EnvelopeError as exc:
            label = repr(key)
            for record in ordered:
                result.messages += 1
                bad_key = _violation(record.position, label, Rule.ENVELOPE, "a valid key", exc)
                if not self._on_violation(result, record, label, bad_key, None):
                    break
            return result

        traced = session in self.trace
        for record in ordered:
            result.messages += 1
            message: Envelope | None = None
            rows_before = len(result.rows)
            violation: Violation | None
            try:
                message = parse_envelope(session, record.value)
                violation = self._apply_one(result, session, record, message)
            except EnvelopeError as exc:
                violation = _violation(
                    record.position, session, Rule.ENVELOPE, "a valid envelope", exc
                )
            if traced:
                result.trace.append(
                    _trace(record, session, message, result, rows_before, violation)
                )
            if violation is not None and not self._on_violation(
                result, record, session, violation, message
            ):
                break
        return result

    def _apply_one(
        self, result: BatchResult[StateT], session: str, record: Record, message: Envelope
    ) -> Violation | None:
        position = record.position
        state = result.state
        if state is not None and state.quarantine is not None:
            if message.type is not MessageType.SNAPSHOT:
                result.quarantined.append(
                    _quarantined(
                        record, session, message, f"awaiting a snapshot: {state.quarantine}"
                    )
                )
                return None
            # A snapshot re-establishes the session wherever it arrives.
            state.quarantine = None
            state.closed = False
            state.topic, state.partition = position.topic, position.partition
            state.last_seq = message.seq - 1

        if state is None:
            if message.type is not MessageType.SNAPSHOT or (
                message.seq != 0 and session not in self.adopt
            ):
                return Violation(
                    position.topic, position.partition, position.offset, session,
                    Rule.FIRST_MESSAGE, "a snapshot with seq 0 to open the session",
                    f"{message.type.value} with seq {message.seq}",
                )  # fmt: skip
            state = SessionState(
                session, position.topic, position.partition, message.seq - 1, -1, message.ts
            )
        elif (position.topic, position.partition) != (state.topic, state.partition):
            return Violation(
                position.topic, position.partition, position.offset, session,
                Rule.ONE_PARTITION, f"topic {state.topic} partition {state.partition}",
                f"topic {position.topic} partition {position.partition}",
            )  # fmt: skip
        elif state.closed:
            return Violation(
                position.topic, position.partition, position.offset, session,
                Rule.AFTER_END, f"nothing after the end message with seq {state.last_seq}",
                f"{message.type.value} with seq {message.seq}",
            )  # fmt: skip
        elif message.seq != state.last_seq + 1 and not (
            message.type is MessageType.SNAPSHOT and state.last_seq < 0
        ):
            return Violation(
                position.topic, position.partition, position.offset, session,
                Rule.SEQUENCE, f"seq {state.last_seq + 1}", f"seq {message.seq}",
            )  # fmt: skip

        if message.type is MessageType.END:
            state.user = None
            state.closed = True
        else:
            try:
                state.user, rows = self.processor.apply(state.user, position, message)
                if state.last_offset < 0 and self.adopt.get(session) == position.offset:
                    rows = []  # published before the repair that adopted this session
            except ProcessorViolation as exc:
                return Violation(
                    position.topic, position.partition, position.offset, session,
                    exc.rule, exc.expected, exc.got,
                )  # fmt: skip
            result.rows.extend(rows)
        state.last_seq = message.seq
        state.last_offset = position.offset
        state.last_ts = message.ts
        result.state = state
        return None

    def _on_violation(
        self,
        result: BatchResult[StateT],
        record: Record,
        session: str,
        violation: Violation,
        message: Envelope | None,
    ) -> bool:
        """Record a violation; return whether to go on with the batch."""
        result.violations.append(violation)
        if self.mode is IntegrityMode.STRICT:
            return False  # the batch fails: nothing after this matters
        reason = f"rule {int(violation.rule)}: expected {violation.expected}, got {violation.got}"
        result.quarantined.append(_quarantined(record, session, message, reason))
        position = record.position
        if result.state is None:
            result.state = SessionState(
                session, position.topic, position.partition, -1, position.offset,
                record.timestamp_ms,
            )  # fmt: skip
        if result.state.quarantine is None:
            result.state.quarantine = f"{reason} at {position}"
        return True


def _violation(
    position: Position, session: str, rule: Rule, expected: str, exc: Exception
) -> Violation:
    return Violation(
        position.topic, position.partition, position.offset, session, rule, expected, str(exc)
    )


def _quarantined(
    record: Record, session: str, message: Envelope | None, reason: str
) -> QuarantinedRecord:
    position = record.position
    return QuarantinedRecord(
        position.topic,
        position.partition,
        position.offset,
        session,
        None if message is None else message.seq,
        None if message is None else message.type.value,
        record.timestamp_ms,
        reason,
        record.value,
    )


def _trace(
    record: Record,
    session: str,
    message: Envelope | None,
    result: BatchResult[StateT],
    rows_before: int,
    violation: Violation | None,
) -> TraceEvent:
    if violation is not None:
        outcome = violation.describe()
    elif result.state is not None and result.state.quarantine is not None:
        outcome = "quarantined"
    else:
        outcome = "applied"
    return TraceEvent(
        record.position,
        session,
        -1 if message is None else message.seq,
        "invalid" if message is None else message.type.value,
        0 if violation is not None else len(result.rows) - rows_before,
        outcome,
    )
