"""A start checked against the processor the output's ledger names, before anything is written:
another processor refused, a state version carried on by a migration or refused in one
line naming both; what a command runs on an output is the ledger's processor."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from alarm_states import Device, OverheatAlarm
from alarm_states.alarm import OUTPUT

import tablecast
from app.contract.offsets import TopicPartition
from app.errors import ConfigurationError
from app.sink import processors
from app.sink.ledger import BATCH, Ledger, LedgerEntry
from app.storage import resolve

TP = TopicPartition("devices", 0)


class Unmigrated(tablecast.Processor[Device]):
    """The alarm at state version 3, without a migration."""

    name: ClassVar[str] = OverheatAlarm.name
    output = OUTPUT
    state_version = 3

    def apply(self, state: Device, message: tablecast.Message) -> tuple[Device, tablecast.Changes]:
        return state, tablecast.NO_CHANGES


class AlarmV1(Unmigrated):
    name: ClassVar[str] = OverheatAlarm.name  # a subclass is a processor of its own name
    state_version = 1


def _output(tmp_path: Path, processor: tablecast.Processor[Any]) -> str:
    """An output whose one batch ``processor`` wrote."""
    (tmp_path / "out").mkdir()
    uri = str(tmp_path / "out")
    location = resolve(uri)
    processors.check_start(location, processor, "(test)")
    entry = LedgerEntry(
        number=0,
        kind=BATCH,
        end={TP: 10},
        schema=processor.output.digest,
        processor=processors.record(processor),
    )
    assert Ledger(location).append(entry)
    return uri


def test_the_ledger_names_the_processor_and_loads_it(tmp_path: Path) -> None:
    uri = _output(tmp_path, OverheatAlarm())
    location = resolve(uri)
    assert processors.resolve_name(location, None) == OverheatAlarm.name
    found = processors.current(location)
    assert isinstance(found, OverheatAlarm) and found.input is not None
    processors.check(location, OverheatAlarm(), "(test)")  # the same one carries on


def test_another_processor_is_refused_in_one_line(tmp_path: Path) -> None:
    uri = _output(tmp_path, OverheatAlarm())

    class Other(OverheatAlarm):
        pass

    with pytest.raises(ConfigurationError) as info:
        processors.check(resolve(uri), Other(), "(test)")
    assert str(info.value) == (
        f"output {uri} was written by processor {OverheatAlarm.name}, not {Other.name}: an "
        "output holds one processor's rows; give a new --output and --checkpoint"
    )


def test_a_new_state_version_carries_on_with_a_migration_and_is_refused_without(
    tmp_path: Path,
) -> None:
    uri = _output(tmp_path, AlarmV1())
    processors.check(resolve(uri), OverheatAlarm(), "(test)")  # 1 -> 2: migrate() is there
    with pytest.raises(ConfigurationError) as info:
        processors.check(resolve(uri), Unmigrated(), "(test)")
    assert str(info.value) == (
        f"processor {OverheatAlarm.name} has state version 3 but the checkpoint holds version "
        "1, and it has no migrate() from version 1: write one, or start it on a new output "
        "and checkpoint"
    )
