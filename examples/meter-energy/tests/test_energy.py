"""The processor over sessions of readings, as the job runs it (``tablecast.process``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from meter_energy import HourlyEnergy, Meter, Site

import tablecast

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MIN = 60_000


def reading(meter: str, kwh: float, minute: int) -> dict[str, Any]:
    return {"meter": meter, "kwh": kwh, "read_at": T0 + minute * MIN}


def message(
    seq: int, kind: str, *rows: dict[str, Any], minute: int, session: str = "site-1"
) -> dict[str, Any]:
    return {"session": session, "seq": seq, "type": kind, "ts": T0 + minute * MIN, "rows": rows}


def hour(n: int) -> datetime:
    return datetime.fromtimestamp((T0 + n * 60 * MIN) / 1000, UTC)


SNAPSHOT = message(0, "snapshot", reading("m1", 100.0, 5), reading("m2", 50.0, 5), minute=5)
SAME_HOUR = message(1, "update", reading("m1", 102.5, 40), minute=40)
NEXT_HOUR = message(2, "update", reading("m1", 104.0, 65), reading("m2", 51.0, 70), minute=70)
HOUR_AFTER = message(3, "update", reading("m1", 107.0, 130), minute=130)
END = {"session": "site-1", "seq": 4, "type": "end", "ts": T0 + 131 * MIN}
SESSION = [SNAPSHOT, SAME_HOUR, NEXT_HOUR, HOUR_AFTER, END]


def run(messages: list[dict[str, Any]], integrity: str = "ordered") -> tablecast.Outcome:
    """The processor over ``messages``, as a job with a three-hour session timeout runs it."""
    return tablecast.process(
        HourlyEnergy(), messages, integrity=integrity, session_timeout_ms=180 * MIN
    )


def used(outcome: tablecast.Outcome) -> list[tuple[Any, ...]]:
    """offset, type, meter, hour, kWh used, readings, complete: each row written."""
    return [
        (r["offset"], r["type"], r["meter"], r["hour"], r["kwh_used"], r["readings"], r["complete"])
        for r in outcome.rows.to_pylist()
    ]


def test_an_hour_is_written_when_a_later_reading_closes_it_the_open_ones_at_the_end() -> None:
    outcome = run(SESSION)
    assert used(outcome) == [
        (2, "update", "m1", hour(0), 2.5, 2, True),  # 102.5 - 100.0, closed by 104.0 at 01:05
        (2, "update", "m2", hour(0), 0.0, 1, True),
        (3, "update", "m1", hour(1), 1.5, 1, True),  # 104.0 - 102.5
        (4, "end", "m1", hour(2), 3.0, 1, False),  # 107.0 - 104.0, the session ended
        (4, "end", "m2", hour(1), 1.0, 1, False),
    ]
    assert (outcome.dropped, outcome.missing, outcome.violations) == (0, 0, [])
    assert outcome.states == {}  # an ended session's state is dropped


def test_ordered_drops_a_repeat_that_would_take_a_reading_back() -> None:
    repeated = [SNAPSHOT, SAME_HOUR, NEXT_HOUR, SAME_HOUR, HOUR_AFTER, END]
    outcome = run(repeated)
    clean = run(SESSION)
    # Its rows are the clean session's (at offsets one later after the repeat).
    assert [row[1:] for row in used(outcome)] == [row[1:] for row in used(clean)]
    assert (outcome.dropped, outcome.missing) == (1, 0)
    # Applied as it arrives (integrity none), the repeat counts as a second reading of hour 1.
    applied = run(repeated, "none")
    assert (4, "update", "m1", hour(1), 1.5, 2, True) in used(applied)


def test_ordered_counts_a_lost_message_and_a_late_one_is_dropped() -> None:
    late = run([SNAPSHOT, NEXT_HOUR, SAME_HOUR])
    assert used(late) == [
        (1, "update", "m1", hour(0), 0.0, 1, True),  # 102.5 never applied: seq 1 came late
        (1, "update", "m2", hour(0), 0.0, 1, True),
    ]
    assert (late.dropped, late.missing) == (1, 1)
    # Strict refuses the same capture at the late message.
    strict = run([SNAPSHOT, NEXT_HOUR, SAME_HOUR], "strict")
    assert strict.violations and "rule 2" in strict.violations[0]


def test_a_session_idle_past_the_timeout_writes_its_open_hours_where_it_went_idle() -> None:
    other = message(0, "snapshot", reading("x", 1.0, 200), minute=200, session="site-2")
    outcome = tablecast.process(HourlyEnergy(), [SNAPSHOT, SAME_HOUR, other], integrity="ordered")
    # site-1's last message was at 00:40; site-2's at 03:20 puts the clock past its timeout
    # (the job's default, an hour).
    assert used(outcome) == [
        (2, "timeout", "m1", hour(0), 2.5, 2, False),
        (2, "timeout", "m2", hour(0), 0.0, 1, False),
    ]
    assert outcome.states == {"site-2": Site({"x": Meter(_ms(hour(3)), 1.0, 1.0)})}


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)
