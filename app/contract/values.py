"""A declared column's JSON value, checked against its type and converted (CONTRACT.md 1a).

Rows hold each value as Python and Arrow take it: ``string`` a str,
``int64`` an int, ``float64`` a float, ``bool`` a bool, ``timestamp`` an
aware :class:`~datetime.datetime` (equal, and hashed, by its instant:
``...T01:00:00+01:00`` is the key ``...T00:00:00Z`` is), ``date`` a
:class:`~datetime.date`, ``decimal(p,s)`` a :class:`~decimal.Decimal` with
exactly ``s`` decimals. Times and dates are read by msgspec's RFC 3339
parser in both of the envelope's parsers (:mod:`app.contract.envelope`),
decimals by the same patterns in both, so the fast parser and the checked
one agree on every value; :func:`check` says, for any JSON value, what was
expected and what arrived.

The typed decoding converts a message's rows a column at a time
(:func:`float_column`, :func:`timestamp_column`, :meth:`DecimalReader.raw_column`):
one call per column of a message, not per value, and what a column holds
in the common case converted by C loops (``map``) with the values' checks
behind them. A column they refuse sends the message to the full checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, InvalidOperation
from functools import partial
from itertools import repeat
from math import inf
from typing import Annotated, Any

import msgspec
import orjson

from app.contract.schema import Column, ColumnType
from app.errors import EnvelopeError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# Epoch milliseconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z: every reader's range.
MS_MIN, MS_MAX = -62_135_596_800_000, 253_402_300_799_999
FLOAT_MAX = 1.7976931348623157e308
# A time with an offset, as msgspec's RFC 3339 parser reads it (refused without one).
AwareTime = Annotated[datetime, msgspec.Meta(tz=True)]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Years whose times an offset may carry outside years 1 to 9999 in UTC.
_EDGE_YEARS = ("0001", "9999")
# The longest time the contract spells, ending in Z: YYYY-MM-DDTHH:MM:SS.ffffffZ (+HH:MM: 5 more).
_LONGEST_Z = 27
# A column's texts, epoch milliseconds and nulls, texts made times, in one C call.
_TIMES: Callable[[Sequence[Any]], list[Any]] = partial(
    msgspec.convert, type=list[int | AwareTime | None]
)
_DECIMAL_STRING = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_DECIMAL_QUOTED = re.compile(rb'"-?[0-9]+(?:\.[0-9]+)?"')
_DECIMAL_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
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


def timestamp_ms(column: Column, ms: int, where: str) -> datetime:
    """Epoch milliseconds as the aware time they name."""
    if not MS_MIN <= ms <= MS_MAX:
        raise _bad(column, where, f"number {ms} (epoch milliseconds outside years 1 to 9999)")
    return _EPOCH + timedelta(milliseconds=ms)


def timestamp_text(column: Column, text: str, where: str) -> datetime:
    """An RFC 3339 time with an offset, read as msgspec's typed decoding reads it, written
    as CONTRACT.md 1a spells it (``YYYY-MM-DDTHH:MM:SS[.ffffff]`` then ``Z`` or ``+HH:MM``)
    and within years 1 to 9999 in UTC, as every reader's times are. msgspec also reads
    ``+HHMM`` and a space for the ``T``, which RFC 3339 is not, and more than six decimals
    of a second, which it rounds to the microsecond the output holds: a value changed
    without a word (``23:59:59.9999995Z`` the next day)."""
    try:
        found = msgspec.convert(text, AwareTime)
    except msgspec.ValidationError:
        raise _bad(column, where, shown(text)) from None
    if not _offset_written(text):
        raise _bad(column, where, f"{shown(text)} (an offset is Z or +HH:MM)")
    if text[10] not in "Tt":
        raise _bad(column, where, f"{shown(text)} (the date and the time are joined by T)")
    if len(text) > (_LONGEST_Z if text[-1] in "Zz" else _LONGEST_Z + 5):
        raise _bad(column, where, f"{shown(text)} (at most six decimals of a second)")
    if text[:4] in _EDGE_YEARS:
        try:
            found.astimezone(UTC)
        except OverflowError:
            raise _bad(column, where, f"{shown(text)} (outside years 1 to 9999 in UTC)") from None
    return found


def _offset_written(text: str) -> bool:
    """Whether a time msgspec read ends in ``Z`` or ``+HH:MM``."""
    return text[-3] == ":" or text[-1] in "Zz"


def date_text(column: Column, text: str, where: str) -> date:
    try:
        return msgspec.convert(text, date)
    except msgspec.ValidationError:
        raise _bad(column, where, shown(text)) from None


def _literals(number: str, nullable: bool) -> re.Pattern[bytes]:
    """Comma-separated JSON texts, each ``number`` as a literal or a string (or null)."""
    item = f'(?:"{number}"|{number}{"|null" if nullable else ""})'
    return re.compile(f"{item}(?:,{item})*".encode())


class DecimalReader:
    """A ``decimal(p,s)`` column's values from their JSON text (a number literal or a string):
    the literal's exact value, with exactly ``s`` decimals, or refused."""

    def __init__(self, column: Column) -> None:
        self.column = column
        self.exponent = Decimal(1).scaleb(-column.scale)
        self.limit = Decimal(10) ** (column.precision - column.scale)
        # A literal that is exact at the scale and within the precision by its digits alone:
        # no leading zero, at most p-s digits before the point and s after it.
        whole, scale = column.precision - column.scale, column.scale
        integer = "-?" + ("0" if whole == 0 else f"(?:0|[1-9][0-9]{{0,{whole - 1}}})")
        plain = f"{integer}(?:\\.[0-9]{{1,{scale}}})?" if scale else integer
        self._plain_column = _literals(plain, column.nullable)
        # Written with exactly s decimals, a literal is its own stored form.
        self._scaled_column = _literals(
            f"{integer}\\.[0-9]{{{scale}}}" if scale else integer, column.nullable
        )

    def raw_column(self, given: Sequence[msgspec.Raw]) -> list[Decimal | None]:
        """A column of a message's rows from the JSON texts msgspec leaves raw: when every
        value is a plain literal within the column's scale and precision (or null), all of
        them at once; otherwise each through :meth:`raw`."""
        joined = b",".join(given)
        scaled = self._scaled_column.fullmatch(joined) is not None
        if not scaled and self._plain_column.fullmatch(joined) is None:
            return [self.raw(text, "rows") for text in given]
        literals = joined.replace(b'"', b"").decode("ascii").split(",")
        quantize, exponent = _EXACT.quantize, self.exponent
        if "null" in literals:
            if scaled:
                return [None if x == "null" else Decimal(x) for x in literals]
            return [None if x == "null" else quantize(Decimal(x), exponent) for x in literals]
        if scaled:
            return list(map(Decimal, literals))
        return list(map(quantize, map(Decimal, literals), repeat(exponent)))

    def raw(self, given: msgspec.Raw | bytes, where: str) -> Decimal | None:
        """From the JSON text msgspec leaves raw (``null`` included)."""
        if _DECIMAL_QUOTED.fullmatch(given) is not None:  # the common case first
            return self._exact(Decimal(bytes(given)[1:-1].decode("ascii")), where, given, True)
        raw = bytes(given)
        if raw[:1] == b'"':  # escapes too: the checks decide
            return self.text(orjson.loads(raw), where)
        if raw == b"null":
            if self.column.nullable:
                return None
            raise _bad(self.column, where, "null (the column is not nullable)")
        if _DECIMAL_NUMBER.fullmatch(raw) is None:
            kinds = {b"t": "true", b"f": "false", b"[": "an array", b"{": "an object"}
            raise _bad(self.column, where, kinds.get(raw[:1], f"{raw[:40]!r}"))
        return self._exact(Decimal(raw.decode("ascii")), where, raw, False)

    def text(self, text: Any, where: str) -> Decimal:
        """From a JSON string's content."""
        if not isinstance(text, str) or _DECIMAL_STRING.fullmatch(text) is None:
            raise _bad(self.column, where, shown(text))
        return self._exact(Decimal(text), where, text, True)

    def number(self, value: int | Decimal, where: str) -> Decimal:
        """From a JSON number read exactly (an int, or a Decimal of the literal)."""
        return self._exact(Decimal(value), where, value, False)

    def _exact(
        self,
        value: Decimal,
        where: str,
        given: str | bytes | msgspec.Raw | int | Decimal,
        quoted: bool,
    ) -> Decimal:
        try:
            scaled: Decimal | None = value.quantize(self.exponent, context=_EXACT)
        except InvalidOperation:
            scaled = None
        if scaled is None or scaled != value or not -self.limit < scaled < self.limit:
            if isinstance(given, msgspec.Raw):
                given = bytes(given)
            text = given.decode("utf-8", "replace") if isinstance(given, bytes) else str(given)
            got = shown(text.strip('"')) if quoted else f"number {text}"
            raise _bad(self.column, where, got)
        return scaled


def float_column(column: Column) -> Callable[[Sequence[msgspec.Raw]], list[float | None]]:
    """A ``float64`` column of a message's rows from the JSON texts msgspec leaves raw.

    orjson reads the whole column as one JSON array in one C call, each number
    correctly rounded as the full checks read it (an integer literal as an int made a
    float, so ``-0`` is 0.0 there as here); msgspec's own float decoding takes a slow
    path (tens of microseconds a value) for exponents beyond about 1e288 or below
    1e-307, and for literals its fast algorithm cannot round. A column orjson refuses
    (a number beyond a float64's range), or one holding anything but numbers and
    nulls, is read a value at a time by Python's ``float``, which refuses every JSON
    value but a number, and says which.
    """
    nullable = column.nullable
    kinds = {float, int, type(None)} if nullable else {float, int}

    def read(given: Sequence[msgspec.Raw]) -> list[float | None]:
        joined = b",".join(given)
        try:
            whole: list[float | int | None] = orjson.loads(b"[" + joined + b"]")
        except orjson.JSONDecodeError:
            whole = []
        found_kinds = set(map(type, whole))
        if len(whole) == len(given) and found_kinds <= kinds:
            if int not in found_kinds:
                return whole
            return [float(v) if type(v) is int else v for v in whole]
        texts = joined.split(b",")
        if len(texts) != len(given):  # a comma inside a value: a string, an array, an object
            raise _bad(column, "rows", "not a number")
        found: list[float | None]
        try:  # float() refuses every JSON value but a number (true, a string, ...)
            if nullable and b"null" in texts:
                found = [None if text == b"null" else float(text) for text in texts]
            else:
                found = list(map(float, texts))
        except ValueError:
            raise _bad(column, "rows", "not a number") from None
        if inf in found or -inf in found:
            raise _bad(column, "rows", "a number not finite as a float64")
        return found

    return read


def timestamp_column(column: Column) -> Callable[[Sequence[Any]], Sequence[Any]]:
    """A ``timestamp`` column of a message's rows as msgspec decodes it (RFC 3339 texts,
    epoch milliseconds, nulls): every text read at once by msgspec's RFC 3339 parser (as
    :func:`timestamp_text` reads one), the milliseconds made times. A column holding a
    text :func:`timestamp_text` refuses, or a time in year 1 or 9999 (which may be outside
    them in UTC), is read a value at a time by it, which says which."""

    def read(given: Sequence[Any]) -> Sequence[Any]:
        try:
            found: list[Any] = _TIMES(given)
        except msgspec.ValidationError:
            raise _bad(column, "rows", "not an RFC 3339 time") from None
        # Read by msgspec, so at least 20 characters: the offset, the T and the year are where
        # they are. timestamp_text's tests, inline: a call per value costs as much.
        if not all(
            type(v) is not str
            or (
                (
                    (v[-1] in "Zz" and len(v) <= _LONGEST_Z)
                    or (v[-3] == ":" and len(v) <= _LONGEST_Z + 5)
                )
                and v[10] in "Tt"
                and v[:4] not in _EDGE_YEARS
            )
            for v in given
        ):
            found = [timestamp_text(column, v, "rows") if type(v) is str else v for v in given]
        millis = [v for v in found if type(v) is int]
        if not millis:
            return found
        if min(millis) < MS_MIN or max(millis) > MS_MAX:  # each refused where it is
            return [timestamp_ms(column, v, "rows") if type(v) is int else v for v in found]
        epoch, ms = _EPOCH, timedelta(milliseconds=1)
        return [epoch + v * ms if type(v) is int else v for v in found]

    return read


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
        return DecimalReader(column).text(value, where)
    elif isinstance(value, int | Decimal) and not isinstance(value, bool):
        return DecimalReader(column).number(value, where)
    raise _bad(column, where, shown(value))
