"""Energy used per meter per hour, from the cumulative readings a site's session sends.

A session is one site's capture: a snapshot of every meter's reading (kWh
since the meter was installed, and when it was read), then updates of the
meters read again. The hour a meter used energy in closes when a reading of
a later hour arrives: the processor writes the hour's use, the last reading
in it less the last before it (the hour's first, for a meter's first hour).
An hour still open when the session ends or goes idle is written too, as
not complete. Readings only grow, so the job runs it under ``--integrity
ordered``: a message at or below the last one applied (a repeat, or one
that arrived late) is dropped before it could take a reading back, and a
lost message only means fewer readings.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

import tablecast

HOUR_MS = 3_600_000

INPUT = tablecast.schema(
    """
    [key]
    columns = ["meter"]

    [columns]
    meter = "string"
    kwh = "float64"
    read_at = "timestamp"
    """,
    "meter_energy.INPUT",
)

OUTPUT = tablecast.schema(
    """
    [key]
    columns = ["meter", "hour"]

    [columns]
    meter = "string"
    hour = "timestamp"
    kwh_used = "float64"
    readings = "int64"
    complete = "bool"
    """,
    "meter_energy.OUTPUT",
)


class Meter(msgspec.Struct):
    """One meter's open hour."""

    hour: int  # its start, ms since the epoch
    base: float  # the reading before the hour (its first reading, for the first hour)
    last: float  # the last reading in the hour
    readings: int = 1


class Site(msgspec.Struct):
    """A session's state: each meter's open hour."""

    meters: dict[str, Meter] = msgspec.field(default_factory=dict)


class HourlyEnergy(tablecast.Processor[Site]):
    input = INPUT
    output = OUTPUT

    def apply(self, state: Site, message: tablecast.Message) -> tuple[Site, tablecast.Changes]:
        closed: list[tablecast.Row] = []
        for meter, kwh, read_at in message.rows:
            hour = _hour(read_at)
            open_hour = state.meters.get(meter)
            if open_hour is None:
                state.meters[meter] = Meter(hour, kwh, kwh)
            elif hour > open_hour.hour:
                closed.append(_row(meter, open_hour, complete=True))
                state.meters[meter] = Meter(hour, open_hour.last, kwh)
            else:
                open_hour.last = max(open_hour.last, kwh)
                open_hour.readings += 1
        for meter in message.deleted:  # a meter taken out: its open hour, as it stands
            gone = state.meters.pop(meter, None)
            if gone is not None:
                closed.append(_row(meter, gone, complete=False))
        return state, tablecast.Changes(closed)

    def end(self, state: Site, message: tablecast.Message) -> tablecast.Changes:
        return _open_hours(state)

    def timeout(self, state: Site, session: str) -> tablecast.Changes:
        return _open_hours(state)


def _open_hours(state: Site) -> tablecast.Changes:
    return tablecast.Changes(
        [_row(meter, open_hour, complete=False) for meter, open_hour in state.meters.items()]
    )


def _hour(read_at: datetime) -> int:
    ms = int(read_at.timestamp() * 1000)
    return ms - ms % HOUR_MS


def _row(meter: str, open_hour: Meter, *, complete: bool) -> tablecast.Row:
    hour = datetime.fromtimestamp(open_hour.hour / 1000, UTC)
    used = round(open_hour.last - open_hour.base, 6)
    return (meter, hour, used, open_hour.readings, complete)
