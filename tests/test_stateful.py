"""The Spark wrapper's own logic: state rows, idle expiry, event frames.

``GroupState`` is Spark's; a small stand-in with the same methods drives the
wrapper here, and the Spark tests drive it for real.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pandas as pd

from app.processor import TableProcessor
from app.session import IntegrityMode
from app.stateful import OUTPUT_COLUMNS, ROW, StateFunction, idle_remaining_ms

HOUR = 3_600_000


class GroupStateStandIn:
    def __init__(self, now_ms: int, stored: tuple[Any, ...] | None = None, timed_out: bool = False):
        self.now_ms, self.stored, self.hasTimedOut = now_ms, stored, timed_out
        self.timeout_ms: int | None = None
        self.removed = False

    @property
    def exists(self) -> bool:
        return self.stored is not None

    @property
    def get(self) -> tuple[Any, ...]:
        assert self.stored is not None
        return self.stored

    def update(self, row: tuple[Any, ...]) -> None:
        self.stored = row

    def remove(self) -> None:
        self.removed, self.stored = True, None

    def setTimeoutDuration(self, ms: int) -> None:  # noqa: N802 (Spark's name)
        self.timeout_ms = ms

    def getCurrentProcessingTimeMs(self) -> int:  # noqa: N802 (Spark's name)
        return self.now_ms


def _frames(*docs: dict[str, Any]) -> Iterator[pd.DataFrame]:
    yield pd.DataFrame(
        {
            "key": [b"s1"] * len(docs),
            "value": [orjson.dumps({"session": "s1", "ts": 1, **d}) for d in docs],
            "topic": ["sensor-1"] * len(docs),
            "partition": [0] * len(docs),
            "offset": list(range(len(docs)))[::-1],  # arrives out of order
            "timestamp_ms": [1] * len(docs),
        }
    )


def _function(run_started_ms: int = 0) -> StateFunction:
    return StateFunction(TableProcessor(), IntegrityMode.STRICT, HOUR, run_started_ms)


def test_idle_time_counts_only_while_this_run_is_up() -> None:
    assert idle_remaining_ms(last_active_ms=0, run_started_ms=0, now_ms=HOUR, timeout_ms=HOUR) == 0
    # Idle for a day, but the job only restarted a minute ago: the session lives on.
    day = 24 * HOUR
    assert (
        idle_remaining_ms(0, run_started_ms=day, now_ms=day + 60_000, timeout_ms=HOUR)
        == HOUR - 60_000
    )


def test_state_round_trips_through_the_state_row_and_arms_the_timeout() -> None:
    snapshot = {"seq": 0, "type": "snapshot", "rows": [{"id": "a", "value": 1, "status": "ok"}]}
    update = {"seq": 1, "type": "update", "rows": [{"id": "b", "value": 2, "status": None}]}
    state = GroupStateStandIn(now_ms=500)
    frames = list(_function()((b"s1",), _frames(update, snapshot), state))
    assert state.timeout_ms == HOUR
    assert state.stored is not None and state.stored[3] == 1  # last seq
    [frame] = frames
    assert list(frame.columns) == OUTPUT_COLUMNS
    assert frame["kind"].tolist() == [ROW, ROW]
    assert frame["offset"].tolist() == [0, 1]  # applied in offset order
    more = {"seq": 2, "type": "update", "deleted": ["a"]}
    [frame] = list(_function()((b"s1",), _frames(more), state))
    assert frame["row_id"].tolist() == ["a"] and frame["deleted"].tolist() == [True]


def test_a_timed_out_session_is_removed_only_when_idle_long_enough() -> None:
    state = GroupStateStandIn(now_ms=0)
    snapshot = {"seq": 0, "type": "snapshot", "rows": []}
    list(_function()((b"s1",), _frames(snapshot), state))
    stored = state.stored
    fired = GroupStateStandIn(now_ms=HOUR // 2 + 10, stored=stored, timed_out=True)
    assert list(_function(run_started_ms=HOUR // 2)((b"s1",), iter(()), fired)) == []
    assert not fired.removed and fired.timeout_ms == HOUR - 10
    fired = GroupStateStandIn(now_ms=2 * HOUR, stored=stored, timed_out=True)
    list(_function()((b"s1",), iter(()), fired))
    assert fired.removed
