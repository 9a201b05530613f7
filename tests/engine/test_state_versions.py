"""A processor's state across versions of its code: migrated, or refused in one line.

The state files beside the checkpoint name their processor and its state
version. ``examples/alarm-states`` is at state version 2 with a migration
from 1; its version 1 is written here as its author had it (same name, the
state without ``strikes`` and ``seen``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest
from alarm_states import Device, OverheatAlarm, Phase
from alarm_states.alarm import OUTPUT

import tablecast
from app.contract.offsets import TopicPartition
from app.engine.state import PartitionState, SessionState
from app.engine.store import decode, encode
from app.errors import ProcessorError, StateError

TP = TopicPartition("devices", 3)
T0 = 1_767_225_600_000
WHERE = "ckpt/_tablecast/state/devices-3/120.state"


class DeviceV1(msgspec.Struct):
    phase: str = "new"
    since: int = 0


class AlarmV1(tablecast.Processor[DeviceV1]):
    """The alarm's first release: state version 1."""

    name: ClassVar[str] = OverheatAlarm.name
    output = OUTPUT

    def apply(
        self, state: DeviceV1, message: tablecast.Message
    ) -> tuple[DeviceV1, tablecast.Changes]:
        return state, tablecast.NO_CHANGES


class AlarmV2Unmigrated(tablecast.Processor[Device]):
    """Version 2 as it would be without its migrate()."""

    name: ClassVar[str] = OverheatAlarm.name
    output = OUTPUT
    state_version = 2

    def apply(self, state: Device, message: tablecast.Message) -> tuple[Device, tablecast.Changes]:
        return state, tablecast.NO_CHANGES


class Brittle(OverheatAlarm):
    name: ClassVar[str] = OverheatAlarm.name

    def migrate(self, version: int, old: Any) -> Device:
        return Device(Phase(old["phase"].upper()))


def _file(processor: tablecast.Processor[Any], **states: Any) -> bytes:
    state: PartitionState[Any] = PartitionState(TP, 120, T0)
    for session, user in states.items():
        opened: SessionState[Any] = SessionState.opened(session, 7, 119, T0, T0)
        opened.user = user
        state.sessions[session] = opened
    return encode(state, processor)


def test_a_version_1_state_file_is_read_through_the_migration() -> None:
    data = _file(AlarmV1(), d1=DeviceV1("hot", T0), d2=DeviceV1("normal", T0 + 5))
    state = decode(data, OverheatAlarm(), WHERE)
    assert {s: v.user for s, v in state.sessions.items()} == {
        "d1": Device(Phase.HOT, T0, 0, T0),
        "d2": Device(Phase.NORMAL, T0 + 5, 0, T0 + 5),
    }
    assert state.sessions["d1"].last_seq == 7  # the framework's part is untouched
    # Written again, the file is version 2's: read as it is.
    again = decode(encode(state, OverheatAlarm()), OverheatAlarm(), WHERE)
    assert again.sessions["d1"].user == Device(Phase.HOT, T0, 0, T0)


def test_without_a_migration_the_new_version_is_refused_in_one_line_naming_both() -> None:
    data = _file(AlarmV1(), d1=DeviceV1("hot", T0))
    with pytest.raises(StateError) as info:
        decode(data, AlarmV2Unmigrated(), WHERE)
    assert str(info.value) == (
        f"processor {OverheatAlarm.name} has state version 2 but the checkpoint holds version "
        "1, and it has no migrate() from version 1: write one, or start it on a new output "
        "and checkpoint"
    )


def test_older_code_than_the_states_is_refused_in_one_line() -> None:
    data = _file(OverheatAlarm(), d1=Device(Phase.HOT, T0, 0, T0))
    with pytest.raises(StateError) as info:
        decode(data, AlarmV1(), WHERE)
    assert str(info.value) == (
        f"the checkpoint holds states of version 2 of processor {OverheatAlarm.name}, newer "
        "than this code's state version 1: run the code that wrote them, or a newer one"
    )


def test_another_processor_s_states_are_refused() -> None:
    data = _file(OverheatAlarm(), d1=Device(Phase.HOT, T0, 0, T0))

    class Other(OverheatAlarm):
        pass

    with pytest.raises(StateError) as info:
        decode(data, Other(), WHERE)
    assert str(info.value) == (
        f"state file {WHERE} holds the states of processor {OverheatAlarm.name}, not of "
        f"{Other.name}: a processor's checkpoint is its own"
    )


def test_a_migration_that_raises_is_a_processor_failure_naming_the_file() -> None:
    data = _file(AlarmV1(), d1=DeviceV1("hot", T0))
    with pytest.raises(ProcessorError) as info:
        decode(data, Brittle(), WHERE)
    assert str(info.value) == (
        f"processor {OverheatAlarm.name} failed to migrate a state of version 1 to 2 in "
        f"{WHERE}: ValueError: 'HOT' is not a valid Phase"
    )
    assert info.value.exit_code == 9


class DeviceRetyped(msgspec.Struct):
    phase: str = "new"
    since: str = ""  # an int in version 1, changed without a new state_version


class AlarmRetyped(tablecast.Processor[DeviceRetyped]):
    name: ClassVar[str] = OverheatAlarm.name
    output = OUTPUT

    def apply(
        self, state: DeviceRetyped, message: tablecast.Message
    ) -> tuple[DeviceRetyped, tablecast.Changes]:
        return state, tablecast.NO_CHANGES


def test_a_state_type_changed_without_a_new_version_is_one_line_naming_the_session() -> None:
    data = _file(AlarmV1(), d1=DeviceV1("hot", T0))
    with pytest.raises(ProcessorError) as info:
        decode(data, AlarmRetyped(), WHERE)
    assert str(info.value) == (
        f"processor {OverheatAlarm.name} cannot read the state of session 'd1' in {WHERE}: "
        "ValidationError: Expected `str`, got `int` - at `$.since`; where the state's type "
        "changed, raise state_version and write migrate()"
    )
    assert info.value.exit_code == 9
    assert info.value.facts["step"] == "state"


class Sloppy(OverheatAlarm):
    name: ClassVar[str] = OverheatAlarm.name

    def migrate(self, version: int, old: Any) -> Device:
        return Device(Phase(old["phase"]), since=old["since"] / 1000)  # seconds: a float


def test_a_migration_that_returns_a_state_that_would_not_save_is_named_at_the_migration() -> None:
    data = _file(AlarmV1(), d1=DeviceV1("hot", T0))
    with pytest.raises(ProcessorError) as info:
        decode(data, Sloppy(), WHERE)
    assert str(info.value) == (
        f"processor {OverheatAlarm.name} failed to migrate a state of version 1 to 2 in "
        f"{WHERE}: ValueError: it does not read back as Device: Expected `int`, got `float` - "
        "at `$.since`"
    )
