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
expires nothing that was not idle in the data itself. The rows a processor
writes when a session times out carry the offset of the record whose time
made it idle (or of its own last message, where that came late), whichever
slice found it so.

The integrity class (:class:`IntegrityMode`) says what a message's ``seq``
does: ``strict`` and ``resync`` enforce rules 1 to 5; ``ordered`` drops a
seq at or below the last applied and counts the seqs it skips; ``once``
applies each seq exactly once in arrival order, drops repeats and counts
the seqs missing when the session ends or times out; ``none`` applies every
message. Under the last three a message that breaks a rule the class still
has (the envelope, a processor's refusal, rule 6) is quarantined alone.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from operator import itemgetter
from typing import Any, Generic, NamedTuple

import numpy as np
import pyarrow as pa

from app import defaults
from app.contract.envelope import Envelope, MessageType, RowStore, parser_for
from app.contract.offsets import TopicPartition
from app.contract.processor import NO_CHANGES, Changes, Processor, Reject, StateT
from app.contract.schema import DEFAULT_SCHEMA, TableSchema
from app.contract.table_processor import TableProcessor
from app.engine.gc_pause import cyclic_gc_paused
from app.engine.output import QuarantinedRecord, RowColumns
from app.engine.state import PartitionState, SessionState
from app.errors import EnvelopeError, ProcessorError, Rule, Violation, one_line


class IntegrityMode(StrEnum):
    """What a message's seq means, and what a violation does (CONTRACT.md section 2)."""

    STRICT = "strict"  # rules 1-7; fail the job, publish nothing of the micro-batch
    RESYNC = "resync"  # rules 1-7; quarantine the session until a snapshot re-establishes it
    ORDERED = "ordered"  # seqs rise: one at or below the last applied is dropped; gaps counted
    ONCE = "once"  # each seq applied once, in arrival order; repeats dropped, gaps reported
    NONE = "none"  # every message applied as it arrives

    @property
    def checks_sequence(self) -> bool:
        """Whether rules 1 to 5 hold (strict, resync)."""
        return self in (IntegrityMode.STRICT, IntegrityMode.RESYNC)


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


class Gap(NamedTuple):
    """Class once: seqs of a session that never arrived, found when it ended or timed out."""

    session: str
    offset: int  # the end message's, or where the session timed out
    missing: int
    seqs: str  # the first few: "4-6, 9"


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
    repeats: int = 0  # ordered, once: messages dropped for their seq
    gaps: int = 0  # ordered: seqs skipped; once: seqs missing at a session's end or timeout
    gap_reports: list[Gap] = field(default_factory=list)  # once: where each was found


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
        """Apply the records from now on with ``processor`` (and its input schema's parser)."""
        self.processor = processor
        self.input = processor.input or DEFAULT_SCHEMA
        self.parse = parser_for(self.input)
        # The built-in processor reads only its rows' keys: its rows can stay in the
        # compiled decoder's store (app.contract.envelope.RowSpan) until the output.
        self._spans = processor.__class__ is TableProcessor and processor.output == self.input

    def switch(self, state: PartitionState[StateT], processor: Processor[StateT]) -> None:
        """Go on with ``processor`` where the live job restarted with another table schema:
        the sessions' tables carry on, read as it reads a state saved before (a column
        added since is null)."""
        before = self.processor
        if processor is before:
            return
        for session in state.sessions.values():
            if session.user is not None:
                session.user = processor.decode_state(before.encode_state(session.user))
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
        if result is None:
            result = PartitionResult(
                RowColumns(state.tp, self.processor.output, self.processor.name)
            )
        store = self._store(result.rows)
        with cyclic_gc_paused():
            try:
                return self._run(state, records, result, store)
            finally:
                if store is not None:
                    settle(store, [session.user for session in state.sessions.values()])

    def _store(self, rows: RowColumns) -> RowStore | None:
        """The store the run's rows go into (``rows``'), where they can: None otherwise."""
        if not self._spans:
            return None
        store = rows.store
        if store is None:
            store = self.parse.store()
            if store is None or not rows.use_store(store):
                return None
        return store if self.parse.takes(store) else None  # another schema's: tuples

    def _run(
        self,
        state: PartitionState[StateT],
        records: RecordColumns,
        result: PartitionResult,
        store: RowStore | None,
    ) -> PartitionResult:
        tp = state.tp
        sessions = state.sessions
        strict = self.rules.mode is IntegrityMode.STRICT
        apply = self._apply if self.rules.mode.checks_sequence else self._apply_class
        timeout = self.rules.timeout_ms
        traced = self.rules.trace
        keys, values, offsets, stamps = records
        violation: Violation | None
        clock = state.clock_ms
        idle = _IdleClock(clock, offsets, stamps)
        # The slice's rows into the store, or converted a column at a time.
        parse = self.parse.over(values) if store is None else self.parse.into(store)
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
                self._timed_out(result, tp, current, idle.passed(current, timeout))
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
                violation, rows = apply(
                    result, state, current, session, message, offset, seen, values[i]
                )
            if session in traced:
                result.trace.append(
                    _trace(
                        offset, session, message, sessions.get(session), rows, violation, self.input
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
            self._expire(state, result, offsets[-1] + 1 if len(offsets) else state.offset, idle)
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
        """Strict, resync: apply one valid envelope under rules 1 to 5; the violation it
        makes, or the rows it produced."""
        _, seq, kind, ts, _, _ = message
        if (  # the common case first: an open session's next message
            current is not None
            and seq == current.last_seq + 1
            and current.quarantine is None
            and current.owner is None
            and not current.closed
            and kind is not MessageType.END
            and current.user is not None
        ):
            try:
                current.user, changes = self.processor.apply(current.user, message)
                rows = result.rows.emit(offset, session, seq, kind, ts, changes)
            except Reject as exc:
                return _refused(state.tp, offset, session, exc), 0
            except Exception as exc:
                raise self._failed("apply", state.tp, offset, session, exc) from exc
            current.advance(seq, offset, ts, seen)
            return None, rows

        tp = state.tp
        snapshot = kind is MessageType.SNAPSHOT
        if current is not None and current.owner is not None:
            return _held(result, current, tp, offset, message, seen, value, _owned(current))
        reopening = False
        if current is not None and current.quarantine is not None:
            if not snapshot:
                reason = f"awaiting a snapshot: {current.quarantine}"
                return _held(result, current, tp, offset, message, seen, value, reason)
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

        try:
            user, changes = self._changes(user, message)
        except Reject as exc:
            if current is None:
                result.claims.append(Claim(session, offset, False))
            return _refused(tp, offset, session, exc), 0
        except Exception as exc:
            raise self._failed(_step(message), tp, offset, session, exc) from exc
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
        return None, self._emit(result, tp, offset, session, message, changes)

    def _apply_class(
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
        """Ordered, once, none: what the class says of the message's seq, then the
        processor. The rows it produced; -1: the class dropped the message."""
        tp = state.tp
        if current is not None and current.owner is not None:
            return _held(result, current, tp, offset, message, seen, value, _owned(current))
        owner = self.foreign.get(session)
        if owner is not None and current is None:
            return _rule_6(tp, offset, session, owner), 0
        mode = self.rules.mode
        seq = message.seq
        opened = current is None
        if current is None:
            current = SessionState.opened(session, -1, offset, message.ts, seen)
        elif (mode is IntegrityMode.ORDERED and seq <= current.last_seq) or (
            mode is IntegrityMode.ONCE
            and (seq <= current.last_seq or (current.ahead is not None and seq in current.ahead))
        ):
            return self._repeat(result, current)

        try:
            user, changes = self._changes(current.user, message)
        except Reject as exc:
            if opened:
                result.claims.append(Claim(session, offset, False))
            return _refused(tp, offset, session, exc), 0
        except Exception as exc:
            raise self._failed(_step(message), tp, offset, session, exc) from exc
        if opened:
            if self.rules.adopt.get(session) == offset:
                changes = NO_CHANGES  # published before the repair that adopted this session
            state.sessions[session] = current
            result.claims.append(Claim(session, offset, True))
        ts = message.ts
        if mode is IntegrityMode.ONCE and seq != current.last_seq + 1:
            if current.ahead is None:
                current.ahead = set()
            current.ahead.add(seq)
            current.last_offset, current.last_ts, current.seen_ms = offset, ts, seen
        elif mode is IntegrityMode.ONCE:
            ahead, last = current.ahead, seq
            while ahead and last + 1 in ahead:
                last += 1
                ahead.remove(last)
            current.advance(last, offset, ts, seen)
        else:
            if mode is IntegrityMode.ORDERED and seq > current.last_seq + 1:
                skipped = seq - current.last_seq - 1
                current.gaps += skipped
                result.gaps += skipped
            current.advance(seq, offset, ts, seen)
        current.user = user
        current.closed = message.type is MessageType.END
        if current.closed and mode is IntegrityMode.ONCE:
            self._report_gap(result, current, offset)
        return None, self._emit(result, tp, offset, session, message, changes)

    def _changes(self, user: StateT | None, message: Envelope) -> tuple[StateT | None, Changes]:
        """The processor's state and changes after ``message``: its end hook for an end
        (the state is dropped), else its start (where there is no state) and apply."""
        processor = self.processor
        if message.type is MessageType.END:
            return None, NO_CHANGES if user is None else processor.end(user, message)
        if user is None:
            user = processor.start(message)
        return processor.apply(user, message)

    def _emit(
        self,
        result: PartitionResult,
        tp: TopicPartition,
        offset: int,
        session: str,
        message: Envelope,
        changes: Changes,
    ) -> int:
        try:
            return result.rows.emit(offset, session, message.seq, message.type, message.ts, changes)
        except Exception as exc:  # not a Changes of rows and keys
            raise self._failed(_step(message), tp, offset, session, exc) from exc

    def _repeat(
        self, result: PartitionResult, current: SessionState[StateT]
    ) -> tuple[Violation | None, int]:
        """Ordered, once: the message's seq was applied already (or passed): dropped."""
        current.repeats += 1
        result.repeats += 1
        return None, -1

    def _report_gap(self, result: PartitionResult, current: SessionState[StateT], at: int) -> None:
        """Once: count the seqs below the highest applied that never arrived, where the
        session ends or times out; a late one is then dropped as a repeat."""
        ahead = sorted(current.ahead or ())
        if not ahead:
            return
        missing: list[int] = []
        expected = current.last_seq + 1
        for seq in ahead:
            missing.extend(range(expected, seq))
            expected = seq + 1
        current.gaps += len(missing)
        result.gaps += len(missing)
        result.gap_reports.append(Gap(current.session, at, len(missing), _runs(missing)))
        current.last_seq, current.ahead = ahead[-1], None

    def _timed_out(
        self,
        result: PartitionResult,
        tp: TopicPartition,
        current: SessionState[StateT],
        at: int,
    ) -> None:
        """A session went idle: its processor's timeout rows, written at offset ``at`` (the
        record that made it idle), and, class once, its missing seqs."""
        if self.rules.mode is IntegrityMode.ONCE and not current.closed:
            self._report_gap(result, current, at)
        user = current.user
        if user is None or current.quarantine is not None or current.owner is not None:
            return  # nothing to close, or a state awaiting its snapshot
        try:
            changes = self.processor.timeout(user, current.session)
            rows = result.rows.emit(
                at, current.session, current.last_seq, TIMEOUT, current.last_ts, changes
            )
        except Exception as exc:
            raise self._failed("timeout", tp, at, current.session, exc) from exc
        if current.session in self.rules.trace:
            result.trace.append(
                TraceEvent(at, current.session, current.last_seq, TIMEOUT, rows, "timed out")
            )

    def _failed(
        self, step: str, tp: TopicPartition, offset: int, session: str, exc: Exception
    ) -> ProcessorError:
        """The processor raised (or returned what is not a state and changes): one line,
        with where in its code."""
        name = self.processor.name or type(self.processor).__qualname__
        frame = _own_frame(type(self.processor), exc)
        where = f" ({frame.filename} line {frame.lineno})" if frame is not None else ""
        return ProcessorError(
            f"processor {name} failed in {step} at {tp} offset {offset}, session "
            f"{session!r}: {one_line(exc)}{where}",
            processor=name,
            step=step,
            topic=tp.topic,
            partition=tp.partition,
            offset=offset,
            session=session,
        )

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
        mode = self.rules.mode
        if mode is IntegrityMode.STRICT:
            return False  # the batch fails: nothing after this matters
        reason = f"rule {int(violation.rule)}: expected {violation.expected}, got {violation.got}"
        result.quarantined.append(
            _quarantined(state.tp, offset, session, message, seen, value, reason)
        )
        current = state.sessions.get(session)
        if current is None:
            current = SessionState.quarantined_at(session, offset, seen)
            state.sessions[session] = current
        if mode is IntegrityMode.RESYNC or current.last_seq < 0:
            # Under the other classes a session's idle clock runs from its last applied
            # message (where its timeout rows are written), a refused one left out.
            current.seen_ms = seen
        # Resync sets the session aside until a snapshot; the other classes the message only.
        if current.quarantine is None and mode is IntegrityMode.RESYNC:
            current.quarantine = f"{reason} at {state.tp} offset {offset}"
        if violation.rule is Rule.ONE_PARTITION and session in self.foreign:
            current.owner = self.foreign[session]
        return True

    def _expire(
        self,
        state: PartitionState[StateT],
        result: PartitionResult,
        at: int,
        idle: _IdleClock,
    ) -> None:
        """Drop every session idle for longer than the timeout on the partition's clock.

        ``at``: the offset after the records just run, where the drops take effect.
        """
        timeout = self.rules.timeout_ms
        horizon = state.clock_ms - timeout
        gone = [s for s in state.sessions.values() if s.seen_ms < horizon]
        for current in gone:
            del state.sessions[current.session]
            self._timed_out(result, state.tp, current, idle.passed(current, timeout))
        result.dropped.extend(Drop(s.session, at) for s in gone)


# The ``type`` of the rows a processor writes when a session times out.
TIMEOUT = "timeout"


def settle(store: RowStore, tables: Sequence[Any]) -> None:
    """The rows the built-in processor's ``tables`` (the sessions' states) hold as places
    in ``store`` made tuples again (:meth:`app.contract.table_processor.TableProcessor.apply`), so
    that no state outlives a run with places in it. Every table that took places noted
    itself in ``store.dirty`` with the keys it took; one a snapshot replaced since is
    no session's, and is left as it is."""
    store.settle({id(table) for table in tables})


class _IdleClock:
    """Where, in one run's records, a session became idle: the first record at or after its
    last message whose time put the partition's clock more than the timeout past it."""

    def __init__(self, clock: int, offsets: Sequence[int], stamps: Sequence[int]) -> None:
        self._clock = clock
        self._offsets = offsets
        self._stamps = stamps
        self._running: np.ndarray | None = None  # the clock after each record, made once

    def passed(self, session: SessionState[Any], timeout: int) -> int:
        if not len(self._offsets):
            return session.last_offset
        if self._running is None:
            stamps = np.asarray(self._stamps, dtype=np.int64)
            self._running = np.maximum.accumulate(np.maximum(stamps, self._clock))
        offsets = np.asarray(self._offsets, dtype=np.int64)
        first = int(np.searchsorted(self._running, session.seen_ms + timeout, side="right"))
        own = int(np.searchsorted(offsets, session.last_offset, side="left"))
        return int(offsets[min(max(first, own), len(offsets) - 1)])


def _own_frame(cls: type, exc: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``exc`` in the code of ``cls``'s package (not a library's it
    called, nor the engine's); None where it raised in none."""
    top = sys.modules.get(cls.__module__.partition(".")[0])
    folders = getattr(top, "__path__", None)  # a package's, a namespace package's too
    if folders is not None:
        roots = tuple(os.path.join(folder, "") for folder in folders)
    else:
        found = getattr(top, "__file__", None)
        roots = () if found is None else (found,)
    frames = traceback.extract_tb(exc.__traceback__)
    return next((f for f in reversed(frames) if roots and f.filename.startswith(roots)), None)


def _step(message: Envelope) -> str:
    return "end" if message.type is MessageType.END else "apply"


def _runs(seqs: Sequence[int], shown: int = 5) -> str:
    """Missing seqs as runs: ``4-6, 9`` (the first few, then how many more)."""
    runs: list[tuple[int, int]] = []
    for seq in seqs:
        if runs and runs[-1][1] == seq - 1:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:shown])
    return text + (f" and {len(runs) - shown} more" if len(runs) > shown else "")


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


def _refused(tp: TopicPartition, offset: int, session: str, exc: Reject) -> Violation:
    """A processor's refusal, as a violation of the rule it names."""
    return _violation(tp, offset, session, Rule(exc.rule), exc.expected, exc.got)


def _rule_6(tp: TopicPartition, offset: int, session: str, owner: TopicPartition) -> Violation:
    return _violation(tp, offset, session, Rule.ONE_PARTITION, str(owner), str(tp))


def _owned(current: SessionState[Any]) -> str:
    """Why a message of a session that lives in another topic-partition is quarantined."""
    return f"rule 6: the session belongs to {current.owner}"


def _held(
    result: PartitionResult,
    current: SessionState[Any],
    tp: TopicPartition,
    offset: int,
    message: Envelope,
    seen: int,
    value: bytes | None,
    reason: str,
) -> tuple[None, int]:
    """A message of a session set aside (rule 6, or awaiting a snapshot): quarantined
    unapplied, no violation, no rows; the session's idle clock runs on."""
    result.quarantined.append(
        _quarantined(tp, offset, current.session, message, seen, value, reason)
    )
    current.seen_ms = seen
    return None, 0


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
    elif rows < 0:
        outcome = "dropped: its seq was applied or passed already"
        rows = 0
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
