"""The compiled converter of output rows to Arrow (app/engine/_columns.c) against pyarrow's.

Whatever rows it takes, its columns are exactly pyarrow's conversion of them (values,
nulls, types); rows holding anything but each column's exact type, as the output holds
it, it leaves to pyarrow's conversion and the output's checks (None).
"""

from __future__ import annotations

import logging
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from decimal import Context, Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract.schema import TableSchema, parse_schema
from app.engine.output import _native_columns, _row_struct, native_converter_built
from app.spark.job import _say_compiled_parts

SCHEMA = parse_schema(
    """
    [key]
    columns = ["s"]
    [columns]
    s   = "string"
    i   = { type = "int64", nullable = true }
    f   = { type = "float64", nullable = true }
    b   = { type = "bool", nullable = true }
    t   = { type = "timestamp", nullable = true }
    d   = { type = "date", nullable = true }
    m   = { type = "decimal(8,3)", nullable = true }
    big = { type = "decimal(38,10)", nullable = true }
    z   = { type = "decimal(4,0)", nullable = true }
    """,
    "columns.toml",
)


def _pyarrow(schema: TableSchema, rows: list[tuple[Any, ...]]) -> list[pa.Array] | str:
    try:
        return list(pa.array(rows, _row_struct(schema)).flatten())
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        return f"refused: {exc}"


def _same(schema: TableSchema, rows: list[tuple[Any, ...]]) -> bool:
    """The converter's columns are pyarrow's (when it takes the rows); whether it took them."""
    native = _native_columns(schema, rows)
    if native is None:
        return False
    expected = _pyarrow(schema, rows)
    assert not isinstance(expected, str), expected
    for column, ours, theirs in zip(schema.columns, native, expected, strict=True):
        ours.validate(full=True)
        assert ours.type == theirs.type, column.name
        assert ours.null_count == theirs.null_count, column.name
        assert ours.to_pylist() == theirs.to_pylist(), column.name
        assert ours.equals(theirs), column.name
    return True


def test_the_compiled_converter_is_built_here() -> None:
    """`make setup` builds it (gcc and Python's headers); without it the job is slower."""
    assert native_converter_built(), "app/engine/_columns.c is not built: run make setup"


_ZONES: list[tzinfo] = [
    UTC,
    timezone(timedelta(hours=5, minutes=30)),
    timezone(-timedelta(hours=8)),
]
_ZONES += [ZoneInfo("Europe/Paris"), ZoneInfo("America/New_York")]
_TIMES = st.builds(
    lambda naive, zone: naive.replace(tzinfo=zone),
    st.datetimes(min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31)),
    st.sampled_from(_ZONES),
)


_EXACT = Context(prec=80)  # the default 28 digits would round a decimal(38,10)'s ends


def _decimals(precision: int, scale: int) -> st.SearchStrategy[Decimal]:
    largest = _EXACT.subtract(_EXACT.power(10, precision - scale), Decimal(1).scaleb(-scale))
    exact = st.decimals(
        min_value=-largest,
        max_value=largest,
        places=scale,
        allow_nan=False,
        allow_infinity=False,
    )
    # The same values written otherwise: fewer or more (zero) decimals, an exponent.
    return st.one_of(
        exact,
        exact.map(lambda d: d.normalize()),
        exact.map(lambda d: d.quantize(Decimal(1).scaleb(-scale - 2), context=_EXACT)),
        st.decimals(allow_nan=False, allow_infinity=False, places=scale + 1),
    )


_ROWS = st.lists(
    st.tuples(
        st.text(),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)),
        st.one_of(st.none(), st.booleans()),
        st.one_of(st.none(), _TIMES),
        st.one_of(st.none(), st.dates()),
        st.one_of(st.none(), _decimals(8, 3)),
        st.one_of(st.none(), _decimals(38, 10)),
        st.one_of(st.none(), _decimals(4, 0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(_ROWS)
def test_rows_of_the_columns_types_convert_as_pyarrow_converts_them(
    rows: list[tuple[Any, ...]],
) -> None:
    """And what it leaves, pyarrow refuses too (a decimal beyond its column, here)."""
    if not _same(SCHEMA, rows):
        assert isinstance(_pyarrow(SCHEMA, rows), str)


def _row(**given: Any) -> tuple[Any, ...]:
    cells = {"s": "a", "i": None, "f": None, "b": None, "t": None, "d": None}
    cells |= {"m": None, "big": None, "z": None}
    return tuple({**cells, **given}.values())


# Rows the built-in processor writes: taken by the converter itself.
TAKEN: dict[str, list[Any]] = {
    "nulls": [_row()],
    "int64 ends": [_row(i=-(2**63)), _row(i=2**63 - 1)],
    "negative zero": [_row(f=-0.0)],
    "unicode": [_row(s="\u00e9\u65e5\U0001f642\x00")],
    "times in three zones": [
        _row(t=datetime(2026, 1, 1, tzinfo=UTC)),
        _row(t=datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=_ZONES[1])),
        _row(t=datetime(1, 1, 1, 8, tzinfo=_ZONES[2])),
        _row(t=datetime(2026, 3, 29, 2, 30, tzinfo=ZoneInfo("Europe/Paris"))),
    ],
    "dates at the ends": [_row(d=date(1, 1, 1)), _row(d=date(9999, 12, 31))],
    "decimals written otherwise": [
        _row(m=Decimal("1.5")),
        _row(m=Decimal("-0.000")),
        _row(m=Decimal("1.50000")),
        _row(m=Decimal("1E+2")),
        _row(m=Decimal("0E-10")),
        _row(m=Decimal("-99999.999")),
        _row(big=Decimal("9" * 28 + "." + "9" * 10)),
        _row(z=Decimal("-9999")),
    ],
    # Past 38 digits as written, within 128 bits, exact at the column's scale: pyarrow takes
    # them (Hypothesis found the first left to it).
    "39 digits as written": [
        _row(big=Decimal("1" + "0" * 26 + "." + "0" * 12)),
        _row(big=Decimal("-170141183460469231731687303.715884105700")),  # -(2**127 - 28) as written
    ],
}
# Rows the converter leaves to pyarrow and the checks of a user's rows.
LEFT: dict[str, list[Any]] = {
    "bool in int64": [_row(i=True)],
    "float in int64": [_row(i=1.0)],
    "int in float64": [_row(f=1)],
    "NaN": [_row(f=float("nan"))],
    "infinity": [_row(f=float("inf"))],
    "naive time": [_row(t=datetime(2026, 1, 1))],
    "datetime in date": [_row(d=datetime(2026, 1, 1, tzinfo=UTC))],
    "string subclass": [_row(s=type("S", (str,), {})("a"))],
    "decimal inexact at its scale": [_row(m=Decimal("1.0001"))],
    "decimal beyond its precision": [_row(m=Decimal("100000"))],
    # pyarrow refuses a Decimal whose digits as written pass 128 bits, even exact at the scale.
    "decimal past 128 bits as written": [
        _row(big=Decimal("170141183460469231731687303.715884105800")),  # as written: 2**127 + 72
        _row(z=Decimal("9." + "0" * 38)),
    ],
    "decimal NaN": [_row(m=Decimal("NaN"))],
    "int as decimal": [_row(m=5)],
    "lone surrogate": [_row(s="\ud800")],
    "int beyond int64": [_row(i=2**63)],
    "a list row": [list(_row())],
    "a short row": [_row()[:-1]],
}


@pytest.mark.parametrize("name", list(TAKEN))
def test_the_built_in_processors_values_are_converted_by_the_converter(name: str) -> None:
    assert _same(SCHEMA, TAKEN[name]), f"the converter left {name!r} to pyarrow"


@pytest.mark.parametrize("name", list(LEFT))
def test_values_of_other_types_are_left_to_pyarrow_and_the_checks(name: str) -> None:
    rows = [_row(), *LEFT[name]]
    assert _native_columns(SCHEMA, rows) is None


def test_the_job_says_which_compiled_parts_it_runs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="app.spark.job"):
        _say_compiled_parts()
    assert caplog.messages == [
        "compiled parts in use: the envelope's decoder and the rows' converter"
    ]
