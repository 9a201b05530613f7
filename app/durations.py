"""One duration syntax for every option of both tools: ``90s``, ``30 minutes``, ``1h``.

A whole number and a unit, with or without a space: ``ms``, ``s``, ``m``, ``h``,
``d`` or their names (``second``, ``minutes``, ...), at most ten years. ``--trigger``,
``--session-timeout``, ``--kafka-timeout``, ``--retire-grace`` and the
operator tools' waits all read it here, so a spelling one accepts every other
accepts too.
"""

from __future__ import annotations

import re

from app.errors import ConfigurationError

_UNITS_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "secs": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "mins": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}
EXAMPLES = "'90s', '30 minutes' or '1h'"
# Longer than any wait or timeout means: beyond it, a session timeout overflowed the
# idle clock's int64 arithmetic and a trigger Spark's interval (both unexpected errors).
MAX_MS = 3650 * 86_400_000


def parse_duration_ms(text: str, option: str = "") -> int:
    """``1 hour``, ``30 minutes``, ``90s`` -> milliseconds; ``option`` names it in the error."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]+)\s*", text.lower())
    shown = f"{option} {text!r}" if option else repr(text)
    if match is None or match.group(2) not in _UNITS_MS:
        raise ConfigurationError(f"{shown} is not a duration like {EXAMPLES}")
    ms = int(match.group(1)) * _UNITS_MS[match.group(2)]
    if ms > MAX_MS:
        raise ConfigurationError(f"{shown} is longer than ten years (3650 days)")
    return ms


def spark_interval(ms: int) -> str:
    """``ms`` as Spark's interval strings spell it (``15 minutes``), in the largest exact unit."""
    for unit, size in (("days", 86_400_000), ("hours", 3_600_000), ("minutes", 60_000)):
        if ms and ms % size == 0:
            count = ms // size
            return f"{count} {unit[:-1] if count == 1 else unit}"
    if ms % 1000 == 0:
        return f"{ms // 1000} {'second' if ms == 1000 else 'seconds'}"
    return f"{ms} {'millisecond' if ms == 1 else 'milliseconds'}"
