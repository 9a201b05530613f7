"""The Spark wrapper around :class:`app.session.SessionMachine`.

``transformWithStateInPandas`` groups the records of a micro-batch by key
(the session id) and calls :meth:`SessionProcessor.handleInputRows` once per
session; the session's state is one ValueState row (:data:`STATE_DDL`,
named :data:`STATE_VAR`). Idle sessions expire through one processing-time
timer per session (:meth:`SessionProcessor.handleExpiredTimer`). The
processor only moves values between Spark and the plain functions
:func:`on_input` and :func:`on_timer`, which hold the logic and are tested
without Spark. Its output is an event stream: output rows, quarantined
records, strict-mode violations and trace lines, told apart by ``kind``; the
sink sorts them out.

Why ``transformWithStateInPandas``: see docs/design.md ("Choosing the
stateful operator") for the measurements.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

import numpy as np
import orjson
import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from app.contract import Position, Record
from app.processor import Processor
from app.session import BatchResult, IntegrityMode, SessionMachine, SessionState

# Event kinds in the stateful operator's output.
ROW = "row"
QUARANTINE = "quarantine"
VIOLATION = "violation"
TRACE = "trace"

OUTPUT_DDL = (
    "kind string, topic string, partition int, offset long, session string, seq long, "
    "type string, ts_ms long, row_id string, value double, status string, deleted boolean, "
    "detail string, raw binary"
)
# The one state variable per session: a ValueState of this row.
STATE_VAR = "session"
STATE_DDL = (
    "session string, topic string, partition int, last_seq long, last_offset long, "
    "last_ts long, closed boolean, quarantine string, user binary, active_ms long"
)
OUTPUT_COLUMNS = [part.strip().split(" ")[0] for part in OUTPUT_DDL.split(",")]


@dataclass(frozen=True)
class SessionLogic:
    """What the processor needs to apply a session's records (pickled to executors)."""

    processor: Processor[Any]
    mode: IntegrityMode
    timeout_ms: int
    run_started_ms: int
    adopt: Mapping[str, int] = field(default_factory=dict)
    trace: frozenset[str] = frozenset()


class InputStep(NamedTuple):
    """What one call with a session's records produced."""

    row: tuple[Any, ...] | None  # the state row to store; None: clear the state
    events: pd.DataFrame  # the output events (possibly empty)
    timer_ms: int | None  # the one timer to keep (expiry, ms); None: no timer


def on_input(
    logic: SessionLogic,
    key: bytes | None,
    stored: tuple[Any, ...] | None,
    frames: Iterable[pd.DataFrame],
    now_ms: int,
) -> InputStep:
    """Apply a session's records of one micro-batch to its stored state row."""
    state = None if stored is None else _load(logic.processor, stored).state
    machine = SessionMachine(logic.processor, logic.mode, logic.adopt, logic.trace)
    result = machine.apply(key, state, _records(frames))
    events = _events(result)
    if result.state is None:
        return InputStep(None, events, None)
    return InputStep(
        _dump(logic.processor, result.state, now_ms), events, now_ms + logic.timeout_ms
    )


def on_timer(logic: SessionLogic, stored: tuple[Any, ...] | None, now_ms: int) -> int | None:
    """A session's idle timer fired: the next expiry (ms), or None to drop its state."""
    if stored is None:
        return None
    remaining = idle_remaining_ms(
        _load(logic.processor, stored).last_active_ms,
        logic.run_started_ms,
        now_ms,
        logic.timeout_ms,
    )
    return None if remaining <= 0 else now_ms + remaining


class SessionProcessor(StatefulProcessor):
    """The processor given to ``transformWithStateInPandas`` (pickled to executors)."""

    def __init__(self, logic: SessionLogic) -> None:
        self.logic = logic

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState(STATE_VAR, STATE_DDL)

    def handleInputRows(  # noqa: N802 (PySpark's name)
        self,
        key: tuple[Any, ...],
        rows: Iterator[pd.DataFrame] | Iterator[Row],
        timerValues: TimerValues,  # noqa: N803 (PySpark's name)
    ) -> Iterator[pd.DataFrame]:
        now_ms = int(timerValues.getCurrentProcessingTimeInMs())
        stored = self.state.get() if self.state.exists() else None
        # transformWithStateInPandas gives frames (Rows are transformWithState's).
        frames = cast(Iterator[pd.DataFrame], rows)
        step = on_input(self.logic, key[0], stored, frames, now_ms)
        if step.row is None:
            self.state.clear()
        else:
            self.state.update(step.row)
        self._keep_timer(step.timer_ms)
        if len(step.events):
            yield step.events

    def handleExpiredTimer(  # noqa: N802 (PySpark's name)
        self,
        key: tuple[Any, ...],
        timerValues: TimerValues,  # noqa: N803 (PySpark's name)
        expiredTimerInfo: ExpiredTimerInfo,  # noqa: N803 (PySpark's name)
    ) -> Iterator[pd.DataFrame]:
        now_ms = int(timerValues.getCurrentProcessingTimeInMs())
        stored = self.state.get() if self.state.exists() else None
        expiry = on_timer(self.logic, stored, now_ms)
        if expiry is None:
            self.state.clear()
        else:
            self.handle.registerTimer(expiry)
        return iter(())

    def _keep_timer(self, expiry_ms: int | None) -> None:
        """Leave the session with exactly one timer, at ``expiry_ms`` (or none)."""
        for timer in list(self.handle.listTimers()):
            if timer != expiry_ms:
                self.handle.deleteTimer(timer)
            else:
                expiry_ms = None
        if expiry_ms is not None:
            self.handle.registerTimer(expiry_ms)

    def close(self) -> None:
        pass


def idle_remaining_ms(
    last_active_ms: int, run_started_ms: int, now_ms: int, timeout_ms: int
) -> int:
    """How long an idle session lives on; <= 0 means expire it now.

    Idle time counts only while this run is up: after an outage the job
    catches up before the sessions it has not reached yet look idle.
    """
    idle = now_ms - max(last_active_ms, run_started_ms)
    return timeout_ms - idle


def current_time_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class _Stored:
    state: SessionState[Any]
    last_active_ms: int


def _load(processor: Processor[Any], row: tuple[Any, ...]) -> _Stored:
    (
        session,
        topic,
        partition,
        last_seq,
        last_offset,
        last_ts,
        closed,
        quarantine,
        user,
        active,
    ) = row
    state: SessionState[Any] = SessionState(
        session,
        topic,
        int(partition),
        int(last_seq),
        int(last_offset),
        int(last_ts),
        bool(closed),
        quarantine,
        None if user is None else processor.decode(bytes(user)),
    )
    return _Stored(state, int(active))


def _dump(processor: Processor[Any], state: SessionState[Any], now_ms: int) -> tuple[Any, ...]:
    return (
        state.session,
        state.topic,
        state.partition,
        state.last_seq,
        state.last_offset,
        state.last_ts,
        state.closed,
        state.quarantine,
        None if state.user is None else processor.encode(state.user),
        now_ms,
    )


def _records(frames: Iterable[pd.DataFrame]) -> Iterator[Record]:
    for frame in frames:
        for key, value, topic, partition, offset, ts in zip(
            frame["key"].tolist(),
            frame["value"].tolist(),
            frame["topic"].tolist(),
            frame["partition"].tolist(),
            frame["offset"].tolist(),
            frame["timestamp_ms"].tolist(),
            strict=True,
        ):
            yield Record(Position(topic, int(partition), int(offset)), key, value, int(ts))


def _events(result: BatchResult[Any]) -> pd.DataFrame:
    if result.rows and not (result.quarantined or result.violations or result.trace):
        return _row_events(result)
    columns: dict[str, list[Any]] = {name: [] for name in OUTPUT_COLUMNS}
    if result.rows:
        n = len(result.rows)
        topic, partition, offset, session, seq, kind, ts, row_id, value, status, deleted = zip(
            *result.rows, strict=True
        )
        columns.update(
            kind=[ROW] * n,
            topic=list(topic),
            partition=list(partition),
            offset=list(offset),
            session=list(session),
            seq=list(seq),
            type=list(kind),
            ts_ms=list(ts),
            row_id=list(row_id),
            value=list(value),
            status=list(status),
            deleted=list(deleted),
            detail=[None] * n,
            raw=[None] * n,
        )
    extra: list[dict[str, Any]] = []
    for q in result.quarantined:
        extra.append(
            {
                "kind": QUARANTINE, "topic": q.topic, "partition": q.partition,
                "offset": q.offset, "session": q.session, "seq": q.seq, "type": q.type,
                "ts_ms": q.timestamp_ms, "detail": q.reason, "raw": q.value,
            }
        )  # fmt: skip
    for v in result.violations:
        extra.append(
            {
                "kind": VIOLATION, "topic": v.topic, "partition": v.partition,
                "offset": v.offset, "session": v.session,
                "detail": orjson.dumps(
                    {"rule": int(v.rule), "expected": v.expected, "got": v.got}
                ).decode(),
            }
        )  # fmt: skip
    for t in result.trace:
        extra.append(
            {
                "kind": TRACE, "topic": t.position.topic, "partition": t.position.partition,
                "offset": t.position.offset, "session": t.session, "seq": t.seq,
                "type": t.type, "detail": f"{t.outcome}; {t.rows} rows",
            }
        )  # fmt: skip
    for event in extra:
        for name in OUTPUT_COLUMNS:
            columns[name].append(event.get(name))
    frame = pd.DataFrame(columns)
    return frame


def _row_events(result: BatchResult[Any]) -> pd.DataFrame:
    """Only output rows (the common case): typed arrays spare pandas its inference."""
    n = len(result.rows)
    topic, partition, offset, session, seq, kind, ts, row_id, value, status, deleted = zip(
        *result.rows, strict=True
    )
    nothing = np.full(n, None, dtype=object)
    return pd.DataFrame(
        {
            "kind": np.full(n, ROW, dtype=object),
            "topic": np.array(topic, dtype=object),
            "partition": np.array(partition, dtype=np.int32),
            "offset": np.array(offset, dtype=np.int64),
            "session": np.array(session, dtype=object),
            "seq": np.array(seq, dtype=np.int64),
            "type": np.array(kind, dtype=object),
            "ts_ms": np.array(ts, dtype=np.int64),
            "row_id": np.array(row_id, dtype=object),
            # None becomes NaN here and null again in Spark's conversion.
            "value": np.array(value, dtype=np.float64),
            "status": np.array(status, dtype=object),
            "deleted": np.array(deleted, dtype=np.bool_),
            "detail": nothing,
            "raw": nothing,
        },
        columns=OUTPUT_COLUMNS,
    )
