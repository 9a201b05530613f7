"""A device's overheating alarm as a state machine, its transitions written as rows.

A session is one device's capture: each message holds its temperature
sensors' readings (a snapshot: every sensor; an update: those read again).
The device is ``normal`` until two messages in a row hold a reading of at
least :data:`HOT` degrees; then ``hot`` until a message's hottest reading
is below :data:`COOL` (the gap between the two keeps it from flapping). It
goes ``offline`` when its session goes idle and ``retired`` when it ends.
The state is the machine (its phase, since when, the strikes towards
``hot``), not a table; the output is one row per transition.

State version 2 added ``strikes`` and ``seen``: :meth:`OverheatAlarm.migrate`
reads a version 1 state (``phase`` and ``since`` only), so the job carries
on from a checkpoint the first version wrote.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import msgspec

import tablecast

HOT = 80.0  # degrees Celsius: two messages in a row at or above it raise the alarm
COOL = 70.0  # a message whose hottest reading is below it clears it
ABSOLUTE_ZERO = -273.15

INPUT = tablecast.schema(
    """
    [key]
    columns = ["sensor"]

    [columns]
    sensor = "string"
    celsius = "float64"
    """,
    "alarm_states.INPUT",
)

OUTPUT = tablecast.schema(
    """
    [key]
    columns = ["device", "at"]

    [columns]
    device = "string"
    at = "timestamp"
    before = "string"
    after = "string"
    hottest = { type = "float64", nullable = true }
    """,
    "alarm_states.OUTPUT",
)


class Phase(StrEnum):
    NEW = "new"
    NORMAL = "normal"
    HOT = "hot"
    OFFLINE = "offline"
    RETIRED = "retired"


class Device(msgspec.Struct):
    """The machine: its phase, since when (ms), strikes towards hot, its last message (ms)."""

    phase: Phase = Phase.NEW
    since: int = 0
    strikes: int = 0
    seen: int = 0


class OverheatAlarm(tablecast.Processor[Device]):
    input = INPUT
    output = OUTPUT
    state_version = 2

    def apply(self, state: Device, message: tablecast.Message) -> tuple[Device, tablecast.Changes]:
        readings = [celsius for _, celsius in message.rows]
        for sensor, celsius in message.rows:
            if celsius < ABSOLUTE_ZERO:
                raise tablecast.Reject(
                    "a temperature above absolute zero", f"{celsius} for sensor {sensor!r}"
                )
        hottest = max(readings) if readings else None
        state.seen = message.ts
        if hottest is None:
            return state, tablecast.NO_CHANGES
        if state.phase is Phase.HOT:
            after = Phase.NORMAL if hottest < COOL else Phase.HOT
        else:
            state.strikes = state.strikes + 1 if hottest >= HOT else 0
            after = Phase.HOT if state.strikes >= 2 else Phase.NORMAL
        if after is state.phase:
            return state, tablecast.NO_CHANGES
        row = _transition(message.session, message.ts, state.phase, after, hottest)
        state.phase, state.since = after, message.ts
        if after is Phase.HOT:
            state.strikes = 0
        return state, tablecast.Changes([row])

    def end(self, state: Device, message: tablecast.Message) -> tablecast.Changes:
        return _last(message.session, message.ts, state, Phase.RETIRED)

    def timeout(self, state: Device, session: str) -> tablecast.Changes:
        return _last(session, state.seen, state, Phase.OFFLINE)

    def migrate(self, version: int, old: Any) -> Device:
        if version != 1:
            raise ValueError(f"no migration from state version {version}")
        # Version 1 kept the phase and since when; the strikes start again from none.
        phase, since = Phase(old["phase"]), int(old["since"])
        return Device(phase=phase, since=since, strikes=0, seen=since)


def _last(device: str, at: int, state: Device, after: Phase) -> tablecast.Changes:
    return tablecast.Changes([_transition(device, at, state.phase, after, None)])


def _transition(
    device: str, at: int, before: Phase, after: Phase, hottest: float | None
) -> tablecast.Row:
    return (device, datetime.fromtimestamp(at / 1000, UTC), before.value, after.value, hottest)
