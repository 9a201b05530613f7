"""The alarm's state machine over device sessions, as the job runs it (``tablecast.process``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from alarm_states import Device, OverheatAlarm, Phase

import tablecast

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MIN = 60_000


def readings(seq: int, minute: int, *celsius: float, device: str = "d1") -> dict[str, Any]:
    rows = [{"sensor": f"s{i}", "celsius": c} for i, c in enumerate(celsius)]
    kind = "snapshot" if seq == 0 else "update"
    return {"session": device, "seq": seq, "type": kind, "ts": T0 + minute * MIN, "rows": rows}


def at(minute: int) -> datetime:
    return datetime.fromtimestamp((T0 + minute * MIN) / 1000, UTC)


def transitions(outcome: tablecast.Outcome) -> list[tuple[Any, ...]]:
    """offset, type, device, at, before, after, hottest: each row written."""
    return [
        (r["offset"], r["type"], r["device"], r["at"], r["before"], r["after"], r["hottest"])
        for r in outcome.rows.to_pylist()
    ]


def test_two_hot_messages_in_a_row_raise_the_alarm_and_a_cool_one_clears_it() -> None:
    session = [
        readings(0, 0, 40.0, 41.0),
        readings(1, 1, 85.0),  # one strike
        readings(2, 2, 60.0),  # strikes start again
        readings(3, 3, 81.0, 20.0),
        readings(4, 4, 90.0),  # second strike in a row: hot
        readings(5, 5, 75.0),  # not below 70: still hot
        readings(6, 6, 69.5),  # cool again
        {"session": "d1", "seq": 7, "type": "end", "ts": T0 + 7 * MIN},
    ]
    outcome = tablecast.process(OverheatAlarm(), session)
    assert transitions(outcome) == [
        (0, "snapshot", "d1", at(0), "new", "normal", 41.0),
        (4, "update", "d1", at(4), "normal", "hot", 90.0),
        (6, "update", "d1", at(6), "hot", "normal", 69.5),
        (7, "end", "d1", at(7), "normal", "retired", None),
    ]
    assert outcome.violations == [] and outcome.states == {}


def test_a_device_gone_quiet_goes_offline_where_its_partition_s_clock_passed_the_timeout() -> None:
    outcome = tablecast.process(
        OverheatAlarm(),
        [readings(0, 0, 85.0), readings(1, 1, 86.0), readings(0, 90, 20.0, device="d2")],
    )
    assert transitions(outcome) == [
        (0, "snapshot", "d1", at(0), "new", "normal", 85.0),
        (1, "update", "d1", at(1), "normal", "hot", 86.0),
        (2, "snapshot", "d2", at(90), "new", "normal", 20.0),
        # d2's message put the partition's clock an hour past d1's last one.
        (2, "timeout", "d1", at(1), "hot", "offline", None),
    ]
    assert outcome.states == {"d2": Device(Phase.NORMAL, T0 + 90 * MIN, 0, T0 + 90 * MIN)}


def test_a_reading_below_absolute_zero_is_refused_as_the_integrity_class_says() -> None:
    bad = [readings(0, 0, 40.0), readings(1, 1, -300.0), readings(2, 2, 85.0)]
    strict = tablecast.process(OverheatAlarm(), bad)
    assert len(strict.violations) == 1
    assert strict.violations[0] == (
        "integrity violation (rule 7) at topic sensor-test partition 0 offset 1, session 'd1': "
        "expected a temperature above absolute zero, got -300.0 for sensor 's0'"
    )
    # Under resync the session waits for a snapshot; under none only the message is set aside.
    assert tablecast.process(OverheatAlarm(), bad, integrity="resync").quarantined == [1, 2]
    applied = tablecast.process(OverheatAlarm(), bad, integrity="none")
    assert applied.quarantined == [1]
    assert applied.states["d1"].strikes == 1


def test_a_version_1_state_is_migrated() -> None:
    version_1 = msgspec.msgpack.encode({"phase": "hot", "since": T0})
    alarm = OverheatAlarm()
    assert alarm.migrate(1, alarm.decode_old(version_1)) == Device(Phase.HOT, T0, 0, T0)
    state = Device(Phase.NORMAL, T0, 1, T0 + MIN)
    assert alarm.decode_state(alarm.encode_state(state)) == state
