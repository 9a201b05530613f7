"""A user's processor in the engine: its hooks, its rows, its refusals and its failures."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

import tablecast
from app.errors import ProcessorError

OUTPUT = tablecast.schema(
    """
    [key]
    columns = ["sid", "step"]

    [columns]
    sid = "string"
    step = "string"
    n = { type = "int64", nullable = true }
    at = { type = "timestamp", nullable = true }
    """
)


class Tally(msgspec.Struct):
    starts: int = 0
    applied: int = 0


class Hooks(tablecast.Processor[Tally]):
    """Writes a row from every hook: what the engine called, and when."""

    output = OUTPUT

    def start(self, message: tablecast.Message) -> Tally:
        return Tally(starts=1)

    def apply(
        self, state: Tally, message: tablecast.Message
    ) -> tuple[Tally | None, tablecast.Changes]:
        state.applied += 1
        row = (message.session, f"apply {message.seq}", state.applied, None)
        if message.rows and message.rows[0][0] == "forget":
            return None, tablecast.Changes([row])
        return state, tablecast.Changes([row])

    def end(self, state: Tally, message: tablecast.Message) -> tablecast.Changes:
        return tablecast.Changes([(message.session, "end", state.applied, None)])

    def timeout(self, state: Tally, session: str) -> tablecast.Changes:
        return tablecast.Changes([(session, "timeout", state.applied, None)])


def msg(
    seq: int, kind: str = "update", ts: int = 1_000, session: str = "s", ids: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "session": session,
        "seq": seq,
        "type": kind,
        "ts": ts + seq,
        "rows": [{"id": i} for i in ids],
    }


def steps(outcome: tablecast.Outcome) -> list[tuple[Any, ...]]:
    return [(r["offset"], r["type"], r["sid"], r["step"], r["n"]) for r in outcome.rows.to_pylist()]


def test_start_apply_and_end_write_their_rows_with_their_messages_metadata() -> None:
    outcome = tablecast.process(Hooks(), [msg(0, "snapshot"), msg(1), msg(2, "end")])
    assert steps(outcome) == [
        (0, "snapshot", "s", "apply 0", 1),
        (1, "update", "s", "apply 1", 2),
        (2, "end", "s", "end", 2),
    ]
    row = outcome.rows.to_pylist()[0]
    assert (row["session"], row["seq"], row["deleted"]) == ("s", 0, False)
    assert row["ts"] == datetime.fromtimestamp(1.0, UTC)
    assert outcome.states == {}


def test_apply_returning_none_forgets_the_state_and_the_next_message_starts_again() -> None:
    outcome = tablecast.process(
        Hooks(), [msg(0, "snapshot"), msg(1, ids=("forget",)), msg(2)], integrity="strict"
    )
    assert [s[3:] for s in steps(outcome)] == [("apply 0", 1), ("apply 1", 2), ("apply 2", 1)]
    assert outcome.states == {"s": Tally(starts=1, applied=1)}


def test_a_timeout_writes_at_the_record_that_made_the_session_idle() -> None:
    idle = [
        msg(0, "snapshot"),
        msg(0, "snapshot", ts=9_000_000, session="t"),
        msg(1, session="t", ts=9_000_000),
    ]
    outcome = tablecast.process(Hooks(), idle)
    assert steps(outcome) == [
        (0, "snapshot", "s", "apply 0", 1),
        (1, "snapshot", "t", "apply 0", 1),
        (2, "update", "t", "apply 1", 2),
        # Found idle at the end of the records run, written where it went idle: t's first
        # message put the partition's clock past s's hour.
        (1, "timeout", "s", "timeout", 1),
    ]
    timed_out = outcome.rows.to_pylist()[3]
    assert (timed_out["seq"], timed_out["ts"]) == (0, datetime.fromtimestamp(1.0, UTC))


def test_a_reject_is_the_rule_it_names() -> None:
    class Picky(Hooks):
        def apply(
            self, state: Tally, message: tablecast.Message
        ) -> tuple[Tally | None, tablecast.Changes]:
            if message.seq == 1:
                raise tablecast.Reject("a calm message", "an angry one", rule=4)
            return super().apply(state, message)

    outcome = tablecast.process(Picky(), [msg(0, "snapshot"), msg(1), msg(2)])
    assert outcome.violations == [
        "integrity violation (rule 4) at topic sensor-test partition 0 offset 1, session 's': "
        "expected a calm message, got an angry one"
    ]
    with pytest.raises(ValueError, match=r"rule 9 is not one of CONTRACT\.md's rules 1 to 7"):
        tablecast.Reject("x", "y", rule=9)


def test_a_processor_that_raises_is_one_line_naming_the_step_the_message_and_its_code() -> None:
    class Broken(Hooks):
        def end(self, state: Tally, message: tablecast.Message) -> tablecast.Changes:
            return tablecast.Changes([(message.session, "end", 1 // 0, None)])

    with pytest.raises(ProcessorError) as info:
        tablecast.process(Broken(), [msg(0, "snapshot"), msg(1, "end")])
    line = str(info.value)
    assert line.startswith(
        f"processor {Broken.name} failed in end at topic sensor-test partition 0 offset 1, "
        "session 's': ZeroDivisionError: integer division or modulo by zero ("
    )
    assert __file__ in line and "\n" not in line
    assert info.value.exit_code == 9
    assert info.value.facts["step"] == "end"


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (("s", "x", "many", None), "column 'n': expected int64, got str 'many'"),
        (("s", None, 1, None), "column 'step': a key column is never null"),
        (
            ("s", "x"),
            "expected a tuple of the 4 output columns (sid, step, n, at), got a tuple of 2",
        ),
        (("s", "x", 1, "noon"), "column 'at': expected timestamp, got str 'noon'"),
        # Values Arrow would convert without a word: truncated, read as microseconds or days,
        # a naive time read as UTC, a dict's missing column left null.
        (("s", "x", 2.5, None), "column 'n': expected int64, got float 2.5"),
        (("s", "x", 2, 1_000), "column 'at': expected timestamp, got int 1000"),
        (
            ("s", "x", 2, datetime(2026, 1, 1, 12)),
            "column 'at': expected an aware datetime, got datetime.datetime(2026, 1, 1, 12, 0)",
        ),
        (
            {"sid": "s", "step": "x", "at": None},
            "expected a tuple of the 4 output columns (sid, step, n, at), got dict",
        ),
    ],
)
def test_a_row_the_output_schema_refuses_is_named_with_its_message_and_column(
    row: Any, problem: str
) -> None:
    class Wrong(Hooks):
        def apply(
            self, state: Tally, message: tablecast.Message
        ) -> tuple[Tally, tablecast.Changes]:
            return state, tablecast.Changes([row] if message.seq == 1 else [])

    with pytest.raises(ProcessorError) as info:
        tablecast.process(Wrong(), [msg(0, "snapshot"), msg(1)])
    assert str(info.value) == (
        f"processor {Wrong.name} wrote a row its output schema refuses at topic sensor-test "
        f"partition 0 offset 1, session 's': {problem}"
    )


def test_deleted_keys_write_their_deleted_rows_before_the_rows() -> None:
    class Deleting(Hooks):
        def apply(
            self, state: Tally, message: tablecast.Message
        ) -> tuple[Tally, tablecast.Changes]:
            return state, tablecast.Changes([("s", "kept", 1, None)], deleted=[("s", "gone")])

    rows = tablecast.process(Deleting(), [msg(0, "snapshot")]).rows.to_pylist()
    assert [(r["step"], r["n"], r["deleted"]) for r in rows] == [
        ("gone", None, True),
        ("kept", 1, False),
    ]


class Totals(msgspec.Struct):
    total: float = 0.0
    count: int = 0


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"total": Decimal("2.50")},  # a decimal column's value, kept in a float field
            "ValueError: it does not read back as Totals: Expected `float`, got `str` - at "
            "`$.total`",
        ),
        (
            {"count": np.int64(3)},
            "TypeError: Encoding objects of type numpy.int64 is unsupported",
        ),
    ],
)
def test_a_state_the_job_could_not_load_again_fails_where_it_is_saved(
    change: dict[str, Any], problem: str
) -> None:
    class Careless(tablecast.Processor[Totals]):
        output = OUTPUT

        def apply(
            self, state: Totals, message: tablecast.Message
        ) -> tuple[Totals, tablecast.Changes]:
            if message.seq == 1:
                for field, value in change.items():
                    setattr(state, field, value)
            return state, tablecast.NO_CHANGES

    with pytest.raises(ProcessorError) as info:
        tablecast.process(Careless(), [msg(0, "snapshot"), msg(1), msg(0, "snapshot", session="t")])
    assert str(info.value) == (
        f"processor {Careless.name} left a state that cannot be saved at topic sensor-test "
        f"partition 0 offset 1, session 's': {problem}"
    )
    assert info.value.exit_code == 9
    assert info.value.facts["step"] == "state"


def test_a_failure_inside_a_library_names_the_line_of_the_processor_that_called_it() -> None:
    class Parsing(Hooks):
        def apply(
            self, state: Tally, message: tablecast.Message
        ) -> tuple[Tally | None, tablecast.Changes]:
            at = datetime.strptime(message.rows[0][0], "%H:%M")  # _PARSE_LINE
            return state, tablecast.Changes([(message.session, "x", 1, at)])

    with pytest.raises(ProcessorError) as info:
        tablecast.process(Parsing(), [msg(0, "snapshot", ids=("noon",))])
    line = str(info.value)
    assert "ValueError: time data 'noon' does not match format '%H:%M'" in line
    parse_line = next(
        n
        for n, text in enumerate(Path(__file__).read_text().splitlines(), start=1)
        if text.endswith("# _PARSE_LINE")
    )
    assert line.endswith(f"({__file__} line {parse_line})"), line  # not _strptime.py's


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        (
            [("s", "x", 1, None), ("s", "y", 2, None)],  # would unpack as Changes(rows, deleted)
            "TypeError: it returned list [('s', 'x', 1, None), ('s', 'y', 2, None)] as its "
            "changes, not tablecast.Changes(rows, deleted) (or tablecast.NO_CHANGES)",
        ),
        (
            tablecast.Changes(r for r in [("s", "x", 1, None)]),  # type: ignore[arg-type]
            "TypeError: its Changes holds generator rows and tuple deleted keys: give each as "
            "a list",
        ),
    ],
)
def test_what_is_not_changes_is_named_without_pointing_into_the_engine(
    changes: Any, problem: str
) -> None:
    class Loose(Hooks):
        def apply(self, state: Tally, message: tablecast.Message) -> Any:
            return state, changes

    with pytest.raises(ProcessorError) as info:
        tablecast.process(Loose(), [msg(0, "snapshot")])
    assert str(info.value) == (
        f"processor {Loose.name} failed in apply at topic sensor-test partition 0 offset 0, "
        f"session 's': {problem}"
    )


@pytest.mark.parametrize("integrity", ["strict", "resync", "ordered", "once", "none"])
def test_a_processor_that_raises_stops_every_integrity_class_in_one_line(integrity: str) -> None:
    class Failing(Hooks):
        def apply(
            self, state: Tally, message: tablecast.Message
        ) -> tuple[Tally | None, tablecast.Changes]:
            state.applied += 1
            if message.seq == 2:
                raise KeyError("m9")
            return super().apply(state, message)

    with pytest.raises(ProcessorError) as info:
        tablecast.process(Failing(), [msg(0, "snapshot"), msg(1), msg(2)], integrity=integrity)
    assert str(info.value).startswith(
        f"processor {Failing.name} failed in apply at topic sensor-test partition 0 offset 2, "
        f"session 's': KeyError: 'm9' ({__file__} line "
    )


MEASURED = tablecast.schema(
    """
    [key]
    columns = ["sid"]

    [columns]
    sid = "string"
    mean = { type = "float64", nullable = true }
    price = { type = "decimal(8,2)", nullable = true }
    """
)


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (("s", math.nan, None), "column 'mean': expected float64, got float nan"),
        (("s", -math.inf, None), "column 'mean': expected float64, got float -inf"),
        (
            ("s", None, Decimal("NaN")),
            "column 'price': expected decimal(8,2), got Decimal Decimal('NaN')",
        ),
        (
            ("s", None, Decimal("1.005")),
            "column 'price': expected decimal(8,2), got Decimal Decimal('1.005')",
        ),
    ],
)
def test_a_value_the_columns_type_does_not_hold_is_refused_naming_it(
    row: tuple[Any, ...], problem: str
) -> None:
    class Measuring(tablecast.Processor[Tally]):
        output = MEASURED

        def apply(
            self, state: Tally, message: tablecast.Message
        ) -> tuple[Tally, tablecast.Changes]:
            return state, tablecast.Changes([row])

    with pytest.raises(ProcessorError) as info:
        tablecast.process(Measuring(), [msg(0, "snapshot")])
    assert str(info.value) == (
        f"processor {Measuring.name} wrote a row its output schema refuses at topic sensor-test "
        f"partition 0 offset 0, session 's': {problem}"
    )
