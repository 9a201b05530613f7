"""The Spark wrapper's own logic: state rows, idle expiry, event frames.

:func:`on_input` and :func:`on_timer` hold the logic and are plain
functions; :class:`SessionProcessor` is driven here by PySpark's
``TwsTester`` (an in-memory handle: ValueState and processing-time timers,
no JVM), and the Spark tests drive it for real.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pandas as pd
from pyspark.sql.streaming.tws_tester import TwsTester

from app.processor import TableProcessor
from app.session import IntegrityMode
from app.stateful import (
    OUTPUT_COLUMNS,
    ROW,
    STATE_VAR,
    VIOLATION,
    SessionLogic,
    SessionProcessor,
    idle_remaining_ms,
    on_input,
    on_timer,
)

HOUR = 3_600_000
ACTIVE = 9  # the state row's last-active time (ms)


def _frame(*docs: dict[str, Any]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "key": [b"s1"] * len(docs),
            "value": [orjson.dumps({"session": "s1", "ts": 1, **d}) for d in docs],
            "topic": ["sensor-1"] * len(docs),
            "partition": [0] * len(docs),
            "offset": list(range(len(docs)))[::-1],  # arrives out of order
            "timestamp_ms": [1] * len(docs),
        }
    )


def _frames(*docs: dict[str, Any]) -> Iterator[pd.DataFrame]:
    yield _frame(*docs)


def _logic(run_started_ms: int = 0) -> SessionLogic:
    return SessionLogic(TableProcessor(), IntegrityMode.STRICT, HOUR, run_started_ms)


SNAPSHOT = {"seq": 0, "type": "snapshot", "rows": [{"id": "a", "value": 1, "status": "ok"}]}
UPDATE = {"seq": 1, "type": "update", "rows": [{"id": "b", "value": 2, "status": None}]}


def test_idle_time_counts_only_while_this_run_is_up() -> None:
    assert idle_remaining_ms(last_active_ms=0, run_started_ms=0, now_ms=HOUR, timeout_ms=HOUR) == 0
    # Idle for a day, but the job only restarted a minute ago: the session lives on.
    day = 24 * HOUR
    assert (
        idle_remaining_ms(0, run_started_ms=day, now_ms=day + 60_000, timeout_ms=HOUR)
        == HOUR - 60_000
    )


def test_state_round_trips_through_the_state_row_and_sets_the_timer() -> None:
    step = on_input(_logic(), b"s1", None, _frames(UPDATE, SNAPSHOT), now_ms=500)
    assert step.timer_ms == 500 + HOUR
    assert step.row is not None and step.row[3] == 1  # last seq
    assert step.row[ACTIVE] == 500
    assert list(step.events.columns) == OUTPUT_COLUMNS
    assert step.events["kind"].tolist() == [ROW, ROW]
    assert step.events["offset"].tolist() == [0, 1]  # applied in offset order
    more = {"seq": 2, "type": "update", "deleted": ["a"]}
    step = on_input(_logic(), b"s1", step.row, _frames(more), now_ms=700)
    assert step.events["row_id"].tolist() == ["a"] and step.events["deleted"].tolist() == [True]
    assert step.timer_ms == 700 + HOUR and step.row is not None and step.row[ACTIVE] == 700


def test_a_violation_comes_out_as_an_event_and_keeps_the_state_before() -> None:
    first = on_input(_logic(), b"s1", None, _frames(SNAPSHOT), now_ms=0)
    gap = {"seq": 5, "type": "update", "rows": []}
    step = on_input(_logic(), b"s1", first.row, _frames(gap), now_ms=10)
    assert step.events["kind"].tolist() == [VIOLATION]
    assert orjson.loads(step.events["detail"][0])["expected"] is not None
    assert step.row is not None and step.row[3] == 0  # still at seq 0


def test_a_fired_timer_drops_the_state_only_when_idle_long_enough() -> None:
    row = on_input(_logic(), b"s1", None, _frames(SNAPSHOT), now_ms=0).row
    # The run started half an hour ago: idle time counts from then.
    assert on_timer(_logic(run_started_ms=HOUR // 2), row, now_ms=HOUR + 10) == 3 * HOUR // 2
    assert on_timer(_logic(), row, now_ms=HOUR) is None
    assert on_timer(_logic(), None, now_ms=HOUR) is None


def test_the_processor_keeps_one_timer_per_session_and_expires_idle_sessions() -> None:
    tester = TwsTester(SessionProcessor(_logic()), timeMode="ProcessingTime")
    out = tester.testInPandas(b"s1", _frame(UPDATE, SNAPSHOT))
    assert out["kind"].tolist() == [ROW, ROW]
    assert list(tester.handle.listTimers()) == [HOUR]
    tester.setProcessingTime(HOUR // 2)
    tester.testInPandas(b"s1", _frame({"seq": 2, "type": "update", "rows": []}))
    assert list(tester.handle.listTimers()) == [HOUR // 2 + HOUR]  # the old one is gone
    stored = tester.peekValueState(STATE_VAR, b"s1")
    assert stored is not None and stored[3] == 2
    assert len(tester.setProcessingTime(HOUR + 1)) == 0  # the deleted timer does not fire
    assert tester.peekValueState(STATE_VAR, b"s1") is not None
    tester.setProcessingTime(HOUR // 2 + HOUR)
    assert tester.peekValueState(STATE_VAR, b"s1") is None
    assert list(tester.handle.listTimers()) == []


def test_a_fired_timer_is_set_again_when_the_run_started_later() -> None:
    tester = TwsTester(
        SessionProcessor(_logic(run_started_ms=HOUR // 2)), timeMode="ProcessingTime"
    )
    tester.testInPandas(b"s1", _frame(SNAPSHOT))
    tester.setProcessingTime(HOUR)
    assert tester.peekValueState(STATE_VAR, b"s1") is not None
    assert list(tester.handle.listTimers()) == [3 * HOUR // 2]
