"""The integrity rules of CONTRACT.md section 2, applied to one topic-partition.

:class:`PartitionMachine` is the heart of the job and knows nothing of
Spark. It takes a topic-partition's state and that partition's records of
one offset range, in offset order, and applies each record to its session:
rule 7 (the envelope), rules 1 to 5 (first message, sequence, resync,
deletions, end) and the local half of rule 6 (a session that belongs to
another topic-partition). It reports the other half of rule 6 as
:class:`Claim` events: the driver compares them across partitions
(:mod:`app.engine.ownership`).

Idle sessions expire on the partition's own clock, the largest record
timestamp it has seen: a session whose last message is more than the
timeout behind that clock is dropped before its next message and at the
end of every range. The outcome depends on the records alone, never on how
they were cut into micro-batches or when they were processed, so a redone
batch leaves exactly the same state, and catching up after an outage
expires nothing that was not idle in the data itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter
from typing import Any, Generic, NamedTuple

import pyarrow as pa

from app import defaults
from app.contract.envelope import Envelope, MessageType, parser_for
from app.contract.offsets import TopicPartition
from app.contract.processor import NO_CHANGES, Processor, ProcessorViolation, StateT
from app.contract.schema import TableSchema
from app.engine.gc_pause import cyclic_gc_paused
from app.engine.output import QuarantinedRecord, RowColumns
from app.engine.state import PartitionState, SessionState
from app.errors import EnvelopeError, Rule, Violation


class IntegrityMode(StrEnum):
    """What a violation does (CONTRACT.md section 2)."""

    STRICT = "strict"  # fail the job, publish nothing of the micro-batch
    RESYNC = "resync"  # quarantine the session until a snapshot re-establishes it


@dataclass(frozen=True)
class Rules:
    """How the machine treats records (the same for every partition of a run)."""

    mode: IntegrityMode = IntegrityMode.STRICT
    timeout_ms: int = defaults.SESSION_TIMEOUT_MS  # idle sessions expire after this partition time
    # Sessions that `tablecast repair` restarts from a resync snapshot: session -> its offset.
    adopt: Mapping[str, int] = field(default_factory=dict)
    trace: frozenset[str] = frozenset()  # sessions whose every message is reported


class RecordColumns(NamedTuple):
    """One topic-partition's records of a range, as parallel columns in offset order."""

    keys: Sequence[bytes | None]
    values: Sequence[bytes | None]
    offsets: Sequence[int]
    timestamps_ms: Sequence[int]

    @classmethod
    def from_arrow(cls, records: pa.Table | pa.RecordBatch) -> RecordColumns:
        """The columns of records with the Kafka source's schema."""
        # Through NumPy: ten times faster than Arrow's to_pylist for these columns
        # (bytes objects and ints alike); nulls come out as None for binary.
        micros = records.column("timestamp").cast(pa.int64()).to_numpy()
        return cls(
            records.column("key").to_numpy(zero_copy_only=False).tolist(),
            records.column("value").to_numpy(zero_copy_only=False).tolist(),
            records.column("offset").to_numpy().tolist(),
            (micros // 1000).tolist(),
        )


class Claim(NamedTuple):
    """A session first seen here, or established here again (for rule 6 across partitions)."""

    session: str
    offset: int
    established: bool  # whether this partition now owns the session


class Drop(NamedTuple):
    """A session that expired (idle) before ``offset``: its partition owns it no more."""

    session: str
    offset: int


class TraceEvent(NamedTuple):
    """One applied message of a traced session (``tablecast run --trace``)."""

    offset: int
    session: str
    seq: int
    type: str
    rows: int
    outcome: str
    keys: str = ""  # the keys the message names, in the declared key columns


@dataclass(slots=True)
class PartitionResult:
    """What one range of a topic-partition produced."""

    rows: RowColumns
    quarantined: list[QuarantinedRecord] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    trace: list[TraceEvent] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    dropped: list[Drop] = field(default_factory=list)  # sessions expired (idle)
    messages: int = 0


class PartitionMachine(Generic[StateT]):
    """Applies a topic-partition's records to its state, enforcing section 2.

    ``foreign`` names sessions that belong to another topic-partition (the
    driver found them so in an earlier pass over the same range): their
    messages here violate rule 6.
    """

    def __init__(
        self,
        processor: Processor[StateT],
        rules: Rules,
        foreign: Mapping[str, TopicPartition] | None = None,
    ) -> None:
        self.rules = rules
        self.foreign: Mapping[str, TopicPartition] = foreign or {}
        self.use(processor)

    def use(self, processor: Processor[StateT]) -> None:
        """Apply the records from now on with ``processor`` (and its schema's parser)."""
        self.processor = processor
        self.parse = parser_for(processor.schema)

    def switch(self, state: PartitionState[StateT], processor: Processor[StateT]) -> None:
        """Go on with ``processor`` where the live job restarted with another table schema:
        the sessions' tables carry on, read as it reads a state saved before (a column
        added since is null)."""
        before = self.processor
        if processor is before:
            return
        for session in state.sessions.values():
            if session.user is not None:
                session.user = processor.decode(before.encode(session.user))
        self.use(processor)

    def run(
        self,
        state: PartitionState[StateT],
        records: RecordColumns,
        result: PartitionResult | None = None,
    ) -> PartitionResult:
        """Apply ``records`` (offsets from ``state.offset`` on, ascending) to ``state``.

        ``state`` is updated in place; what the records produce is added to
        ``result`` (a new one by default), so a range can be run a slice at a
        time. In strict mode the run stops at the first violation: the batch
        fails, and the state is thrown away.
        """
        with cyclic_gc_paused():
            return self._run(state, records, result)

    def _run(
        self,
        state: PartitionState[StateT],
        records: RecordColumns,
        result: PartitionResult | None,
    ) -> PartitionResult:
        tp = state.tp
        if result is None:
            result = PartitionResult(RowColumns(tp, self.processor.schema))
        sessions = state.sessions
        strict = self.rules.mode is IntegrityMode.STRICT
        timeout = self.rules.timeout_ms
        traced = self.rules.trace
        keys, values, offsets, stamps = records
        violation: Violation | None
        clock = state.clock_ms
        parse = self.parse
        for i in range(len(offsets)):
            offset = offsets[i]
            seen = stamps[i]
            if seen > clock:  # noqa: PLR1730 (no builtin call per message)
                clock = seen
            result.messages += 1
            key = keys[i]
            try:
                session, bad_key = key.decode("utf-8"), None  # type: ignore[union-attr]
            except (AttributeError, UnicodeDecodeError):  # no key, or not UTF-8
                session, bad_key = _session_of(key)
            if bad_key is not None:
                violation = _violation(tp, offset, session, Rule.ENVELOPE, "a valid key", bad_key)
                if not self._on_violation(
                    result, state, session, None, offset, seen, values[i], violation
                ):
                    break
                continue

            current = sessions.get(session)
            if current is not None and current.seen_ms < clock - timeout:
                del sessions[session]  # idle for longer than the timeout: gone
                result.dropped.append(Drop(session, offset))
                current = None
            message: Envelope | None = None
            rows = 0
            try:
                message = parse(session, values[i])
            except EnvelopeError as exc:
                violation = _envelope_violation(tp, offset, session, exc)
                if current is None:
                    result.claims.append(Claim(session, offset, False))
            else:
                violation, rows = self._apply(
                    result, state, current, session, message, offset, seen, values[i]
                )
            if session in traced:
                result.trace.append(
                    _trace(
                        offset,
                        session,
                        message,
                        sessions.get(session),
                        rows,
                        violation,
                        self.processor.schema,
                    )
                )
            if violation is not None:
                if strict:
                    result.violations.append(violation)
                    break
                self._on_violation(
                    result, state, session, message, offset, seen, values[i], violation
                )
        state.clock_ms = clock
        if not strict or not result.violations:
            self._expire(state, result, offsets[-1] + 1 if len(offsets) else state.offset)
        return result

    def _apply(
        self,
        result: PartitionResult,
        state: PartitionState[StateT],
        current: SessionState[StateT] | None,
        session: str,
        message: Envelope,
        offset: int,
        seen: int,
        value: bytes | None,
    ) -> tuple[Violation | None, int]:
        """Apply one valid envelope; the violation it makes, or the rows it produced."""
        _, seq, kind, ts, _, _ = message
        if (  # the common case first: an open session's next message
            current is not None
            and seq == current.last_seq + 1
            and current.quarantine is None
            and current.owner is None
            and not current.closed
            and kind is not MessageType.END
        ):
            try:
                current.user, changes = self.processor.apply(current.user, message)
            except ProcessorViolation as exc:
                return _violation(state.tp, offset, session, exc.rule, exc.expected, exc.got), 0
            current.advance(seq, offset, ts, seen)
            return None, result.rows.emit(offset, session, seq, kind, ts, changes)

        tp = state.tp
        snapshot = kind is MessageType.SNAPSHOT
        if current is not None and current.owner is not None:
            result.quarantined.append(
                _quarantined(
                    tp,
                    offset,
                    session,
                    message,
                    seen,
                    value,
                    f"rule 6: the session belongs to {current.owner}",
                )
            )
            current.seen_ms = seen
            return None, 0
        reopening = False
        if current is not None and current.quarantine is not None:
            if not snapshot:
                result.quarantined.append(
                    _quarantined(
                        tp,
                        offset,
                        session,
                        message,
                        seen,
                        value,
                        f"awaiting a snapshot: {current.quarantine}",
                    )
                )
                current.seen_ms = seen
                return None, 0
            reopening = True  # a snapshot re-establishes the session

        owner = self.foreign.get(session)
        if owner is not None and (current is None or reopening):
            return _rule_6(tp, offset, session, owner), 0
        if current is None:
            if not snapshot or (message.seq != 0 and session not in self.rules.adopt):
                result.claims.append(Claim(session, offset, False))
                return _violation(
                    tp,
                    offset,
                    session,
                    Rule.FIRST_MESSAGE,
                    "a snapshot with seq 0 to open the session",
                    f"{message.type.value} with seq {message.seq}",
                ), 0
            user = None
        elif current.closed and not reopening:
            return _violation(
                tp,
                offset,
                session,
                Rule.AFTER_END,
                f"nothing after the end message with seq {current.last_seq}",
                f"{message.type.value} with seq {message.seq}",
            ), 0
        elif (
            not reopening
            and message.seq != current.last_seq + 1
            and not (snapshot and current.last_seq < 0)
        ):
            return _violation(
                tp,
                offset,
                session,
                Rule.SEQUENCE,
                f"seq {current.last_seq + 1}",
                f"seq {message.seq}",
            ), 0
        else:
            user = current.user

        if message.type is MessageType.END:
            user, changes = None, NO_CHANGES
        else:
            try:
                user, changes = self.processor.apply(user, message)
            except ProcessorViolation as exc:
                if current is None:
                    result.claims.append(Claim(session, offset, False))
                return _violation(tp, offset, session, exc.rule, exc.expected, exc.got), 0
            if current is None and self.rules.adopt.get(session) == offset:
                changes = NO_CHANGES  # published before the repair that adopted this session
        if current is None:
            current = SessionState.opened(session, message.seq, offset, message.ts, seen)
            state.sessions[session] = current
            result.claims.append(Claim(session, offset, True))
        elif reopening:
            result.claims.append(Claim(session, offset, True))
            current.quarantine = None
        current.advance(message.seq, offset, message.ts, seen)
        current.closed = message.type is MessageType.END
        current.user = user
        rows = result.rows.emit(offset, session, message.seq, message.type, message.ts, changes)
        return None, rows

    def _on_violation(
        self,
        result: PartitionResult,
        state: PartitionState[StateT],
        session: str,
        message: Envelope | None,
        offset: int,
        seen: int,
        value: bytes | None,
        violation: Violation,
    ) -> bool:
        """Record a violation; return whether to go on with the range."""
        result.violations.append(violation)
        if self.rules.mode is IntegrityMode.STRICT:
            return False  # the batch fails: nothing after this matters
        reason = f"rule {int(violation.rule)}: expected {violation.expected}, got {violation.got}"
        result.quarantined.append(
            _quarantined(state.tp, offset, session, message, seen, value, reason)
        )
        current = state.sessions.get(session)
        if current is None:
            current = SessionState.quarantined_at(session, offset, seen)
            state.sessions[session] = current
        current.seen_ms = seen
        if current.quarantine is None:
            current.quarantine = f"{reason} at {state.tp} offset {offset}"
        if violation.rule is Rule.ONE_PARTITION and session in self.foreign:
            current.owner = self.foreign[session]
        return True

    def _expire(self, state: PartitionState[StateT], result: PartitionResult, at: int) -> None:
        """Drop every session idle for longer than the timeout on the partition's clock.

        ``at``: the offset after the records just run, where the drops take effect.
        """
        horizon = state.clock_ms - self.rules.timeout_ms
        idle = [name for name, s in state.sessions.items() if s.seen_ms < horizon]
        for name in idle:
            del state.sessions[name]
        result.dropped.extend(Drop(name, at) for name in idle)


def _session_of(key: bytes | None) -> tuple[str, str | None]:
    """The session id a key carries, or a label for the key and what is wrong with it."""
    if key is None:
        return "None", "record has no key (the key must be the session id)"
    try:
        return key.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        return repr(key), f"key is not UTF-8: {exc.reason}"


def _violation(
    tp: TopicPartition, offset: int, session: str, rule: Rule, expected: str, got: str
) -> Violation:
    """The violation of ``rule`` by the message at ``offset`` of ``tp``."""
    return Violation(
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        session=session,
        rule=rule,
        expected=expected,
        got=got,
    )


def _envelope_violation(
    tp: TopicPartition, offset: int, session: str, exc: EnvelopeError
) -> Violation:
    """Rule 7: a row that broke its schema names the column, what was expected and arrived."""
    if not exc.column:
        return _violation(tp, offset, session, Rule.ENVELOPE, "a valid envelope", str(exc))
    return Violation(
        topic=tp.topic,
        partition=tp.partition,
        offset=offset,
        session=session,
        rule=Rule.ENVELOPE,
        expected=exc.expected,
        got=exc.got,
        column=exc.column,
    )


def _rule_6(tp: TopicPartition, offset: int, session: str, owner: TopicPartition) -> Violation:
    return _violation(tp, offset, session, Rule.ONE_PARTITION, str(owner), str(tp))


def _quarantined(
    tp: TopicPartition,
    offset: int,
    session: str,
    message: Envelope | None,
    seen: int,
    value: bytes | None,
    reason: str,
) -> QuarantinedRecord:
    return QuarantinedRecord(
        tp.topic,
        tp.partition,
        offset,
        session,
        None if message is None else message.seq,
        None if message is None else message.type.value,
        None if message is None else message.ts,
        seen,
        reason,
        value,
    )


def _trace(
    offset: int,
    session: str,
    message: Envelope | None,
    current: SessionState[StateT] | None,
    rows: int,
    violation: Violation | None,
    schema: TableSchema,
) -> TraceEvent:
    if violation is not None:
        outcome = violation.describe()
    elif current is not None and (current.quarantine is not None or current.owner is not None):
        outcome = "quarantined"
    else:
        outcome = "applied"
    return TraceEvent(
        offset,
        session,
        -1 if message is None else message.seq,
        "invalid" if message is None else message.type.value,
        rows,
        outcome,
        _keys(message, schema),
    )


def _keys(message: Envelope | None, schema: TableSchema, shown: int = 3) -> str:
    """The keys a traced message names: ``rows (site, id): (a, 1), (b, 2) and 4 more``."""
    if message is None or not (message.rows or message.deleted):
        return ""
    key = itemgetter(*schema.key_indexes)
    names = ", ".join(schema.key)

    def listed(keys: list[Any]) -> str:
        def one(k: Any) -> str:
            cells = k if isinstance(k, tuple) else (k,)
            text = ", ".join(str(c) for c in cells)
            return f"({text})" if len(cells) > 1 else text

        more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
        return ", ".join(one(k) for k in keys[:shown]) + more

    parts = []
    if message.rows:
        parts.append(f"rows ({names}): {listed([key(r) for r in message.rows])}")
    if message.deleted:
        parts.append(f"deleted: {listed(list(message.deleted))}")
    return "; ".join(parts)
