"""A declared column's JSON value, checked against its type and converted (CONTRACT.md 1a).

Rows hold each value as the output stores it: ``string`` a str, ``int64``
an int, ``float64`` a float, ``bool`` a bool, ``timestamp`` an int of
microseconds since the epoch (UTC), ``date`` an int of days since the
epoch, ``decimal(p,s)`` a :class:`~decimal.Decimal` with exactly ``s``
decimals. Both of the envelope's parsers (:mod:`app.contract.envelope`)
convert through here, so the fast one and the checked one agree on every
value; :func:`check` says, for any JSON value, what was expected and what
arrived.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import orjson

from app.contract.schema import Column, ColumnType
from app.errors import EnvelopeError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Epoch milliseconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z: every reader's range.
MS_MIN, MS_MAX = -62_135_596_800_000, 253_402_300_799_999
FLOAT_MAX = 1.7976931348623157e308
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_MICRO = timedelta(microseconds=1)
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DECIMAL_STRING = re.compile(r"-?\d+(?:\.\d+)?")
_DECIMAL_NUMBER = re.compile(rb"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
# Exact arithmetic for any literal a decimal128 can hold, and refusal beyond.
_EXACT = Context(prec=80, Emax=999_999, Emin=-999_999)

EXPECTED = {
    ColumnType.STRING: "a string",
    ColumnType.INT64: "an integer in the signed 64-bit range",
    ColumnType.FLOAT64: "a finite number",
    ColumnType.BOOL: "true or false",
    ColumnType.TIMESTAMP: "an RFC 3339 time with an offset or integer epoch milliseconds",
    ColumnType.DATE: "a date YYYY-MM-DD",
}


def expected(column: Column) -> str:
    """What a column's value must be, in a violation's words."""
    if column.type is ColumnType.DECIMAL:
        return (
            f"a decimal({column.precision},{column.scale}): a number or string with at most "
            f"{column.scale} decimals and {column.precision} digits"
        )
    return EXPECTED[column.type]


def shown(value: Any) -> str:
    """A JSON value as a violation shows what arrived (kind and value, cut short)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = repr(value)
        return f"string {text if len(text) <= 60 else text[:57] + '...'}"
    if isinstance(value, int | float | Decimal):
        return f"number {value}"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _bad(column: Column, where: str, got: str) -> EnvelopeError:
    want = expected(column)
    return EnvelopeError(
        f"{where}.{column.name} is {got}, must be {want}",
        column=column.name,
        expected=want,
        got=f"{got} in {where}",
    )


def timestamp_ms(column: Column, ms: int, where: str) -> int:
    if not MS_MIN <= ms <= MS_MAX:
        raise _bad(column, where, f"number {ms} (epoch milliseconds outside years 1 to 9999)")
    return ms * 1000


def timestamp_text(column: Column, text: str, where: str) -> int:
    """An RFC 3339 time with an offset, as microseconds since the epoch."""
    if _RFC3339.fullmatch(text) is None:
        raise _bad(column, where, shown(text))
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _bad(column, where, f"{shown(text)} (not a valid time)") from None
    return (moment - _EPOCH) // _MICRO


def date_days(value: date) -> int:
    return value.toordinal() - _EPOCH_DAY


def date_text(column: Column, text: str, where: str) -> int:
    if _DATE.fullmatch(text) is None:
        raise _bad(column, where, shown(text))
    try:
        return date_days(date.fromisoformat(text))
    except ValueError:
        raise _bad(column, where, f"{shown(text)} (not a valid date)") from None


def decimal_raw(column: Column, raw: bytes, where: str) -> Decimal | None:
    """A decimal from its JSON text (a number literal or a string): the literal's exact value."""
    if raw == b"null":
        return None
    if raw[:1] == b'"':
        text = orjson.loads(raw)  # escapes decoded, as the checked parser decodes them
        if _DECIMAL_STRING.fullmatch(text) is None:
            raise _bad(column, where, shown(text))
        return _scaled(column, Decimal(text), where, shown(text))
    if _DECIMAL_NUMBER.fullmatch(raw) is None:
        kinds = {b"t": "true", b"f": "false", b"[": "an array", b"{": "an object"}
        raise _bad(column, where, kinds.get(raw[:1], f"{raw[:40]!r}"))
    text = raw.decode("ascii")
    return _scaled(column, Decimal(text), where, f"number {text}")


def _scaled(column: Column, value: Decimal, where: str, got: str) -> Decimal:
    """``value`` with exactly the column's scale; refused when that rounds or overflows."""
    try:
        scaled = value.quantize(Decimal(1).scaleb(-column.scale), context=_EXACT)
    except InvalidOperation:
        raise _bad(column, where, got) from None
    if scaled != value or len(scaled.as_tuple().digits) > column.precision:
        raise _bad(column, where, got)
    return scaled


def check(column: Column, value: Any, where: str) -> Any:
    """A JSON value (as :func:`json.loads` with exact decimals gives it) converted, or the
    :class:`EnvelopeError` naming the column, what was expected and what arrived."""
    kind = column.type
    if value is None:
        if column.nullable:
            return None
        raise _bad(column, where, "null (the column is not nullable)")
    if kind is ColumnType.STRING:
        if isinstance(value, str):
            return value
    elif kind is ColumnType.INT64:
        if isinstance(value, int) and not isinstance(value, bool):
            if INT64_MIN <= value <= INT64_MAX:
                return value
            raise _bad(column, where, f"number {value} (outside the signed 64-bit range)")
    elif kind is ColumnType.FLOAT64:
        if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
            number = float(value)
            if -FLOAT_MAX <= number <= FLOAT_MAX:
                return number
            raise _bad(column, where, f"number {value} (not finite as a float64)")
    elif kind is ColumnType.BOOL:
        if isinstance(value, bool):
            return value
    elif kind is ColumnType.TIMESTAMP:
        if isinstance(value, str):
            return timestamp_text(column, value, where)
        if isinstance(value, int) and not isinstance(value, bool):
            return timestamp_ms(column, value, where)
    elif kind is ColumnType.DATE:
        if isinstance(value, str):
            return date_text(column, value, where)
    elif isinstance(value, str):
        if _DECIMAL_STRING.fullmatch(value) is None:
            raise _bad(column, where, shown(value))
        return _scaled(column, Decimal(value), where, shown(value))
    elif isinstance(value, int | Decimal) and not isinstance(value, bool):
        return _scaled(column, Decimal(value), where, shown(value))
    raise _bad(column, where, shown(value))
