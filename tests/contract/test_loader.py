"""``--processor package.module:Class``: loaded, or refused in one line before anything runs."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import msgspec
import pytest

import tablecast
from app.contract import loader
from app.contract.schema import DEFAULT_SCHEMA
from app.errors import ConfigurationError

OUTPUT = tablecast.schema('[key]\ncolumns = ["sid"]\n[columns]\nsid = "string"')


class Window:
    """A plain class: msgspec encodes none of it."""

    def __init__(self) -> None:
        self.values: list[float] = []


@dataclasses.dataclass
class Windowed:
    count: int = 0
    window: Window = dataclasses.field(default_factory=Window)


class Unencodable(tablecast.Processor[Windowed]):
    output = OUTPUT

    def apply(
        self, state: Windowed, message: tablecast.Message
    ) -> tuple[Windowed, tablecast.Changes]:
        return state, tablecast.NO_CHANGES


class Counted(msgspec.Struct):
    count: int


class WithoutDefaults(tablecast.Processor[Counted]):
    """A state type without defaults: start() makes it, so it is not tried at load."""

    output = OUTPUT

    def start(self, message: tablecast.Message) -> Counted:
        return Counted(0)

    def apply(
        self, state: Counted, message: tablecast.Message
    ) -> tuple[Counted, tablecast.Changes]:
        return state, tablecast.NO_CHANGES


class Locked(WithoutDefaults):
    """Holds a lock, which no pickler takes: Spark could not send it to its workers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


class WithLambda(WithoutDefaults):
    """Holds a lambda, which Spark's pickler takes (the standard one does not)."""

    def __init__(self) -> None:
        self.key: Callable[[tuple[str]], str] = lambda row: row[0]


class PosingAsTheBuiltIn(WithoutDefaults):
    """Named as the built-in: the ledger would record it so, and a replay, a correction or
    verify would then run the built-in where this one wrote the rows."""

    name = "table"


HERE = __name__


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            f"{HERE}:Unencodable",
            f"--processor {HERE}:Unencodable: its state Windowed cannot be encoded: Encoding "
            "objects of type Window is unsupported",
        ),
        (
            f"{HERE}:Locked",
            f"--processor {HERE}:Locked: Spark cannot send it to its workers: TypeError: cannot "
            "pickle '_thread.lock' object (hold only what pickles; make the rest where it is "
            "first used, in start() or apply())",
        ),
        (
            "no_such_package.energy:Hourly",
            "--processor no_such_package.energy:Hourly: no module named 'no_such_package' "
            "(install the processor's package where tablecast runs)",
        ),
        (
            f"{HERE}:PosingAsTheBuiltIn",
            f"--processor {HERE}:PosingAsTheBuiltIn: its name 'table' is the built-in's; the "
            "ledger names the processor that wrote each range by it (leave name out: "
            "module:Class)",
        ),
        (f"{HERE}:Hourly", f"--processor {HERE}:Hourly: {HERE} has no Hourly"),
        (
            f"{HERE}:Window",
            f"--processor {HERE}:Window: Window is not a subclass of tablecast.Processor",
        ),
    ],
)
def test_a_processor_the_job_cannot_run_is_refused_in_one_line(name: str, line: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        loader.load(name, DEFAULT_SCHEMA)
    assert str(info.value) == line
    assert info.value.exit_code == 64


def test_a_state_type_without_defaults_is_left_to_start() -> None:
    processor = loader.load(f"{HERE}:WithoutDefaults", DEFAULT_SCHEMA)
    assert isinstance(processor, WithoutDefaults)


def test_what_spark_pickles_is_taken() -> None:
    processor = loader.load(f"{HERE}:WithLambda", DEFAULT_SCHEMA)
    assert isinstance(processor, WithLambda) and processor.key(("a",)) == "a"
