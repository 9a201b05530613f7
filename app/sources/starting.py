"""Where a fresh checkpoint starts: Spark's ``startingOffsets`` (and ``startingTimestamp``).

``earliest`` (the default) reads every partition from its earliest offset,
``latest`` from the offsets at the job's first trigger (a new deployment
need not replay what the brokers keep), a time from each partition's first
record at or after it (Kafka's ListOffsets by timestamp). Only the first
trigger of a checkpoint uses it; a checkpoint with offsets continues from
them, and a partition that appears later is read from its earliest offset.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import StrEnum

from app.contract.values import MS_MAX
from app.errors import ConfigurationError

__all__ = ["TIME_NEEDS_KAFKA", "StartKind", "StartingPosition"]

TIME_NEEDS_KAFKA = (
    "--starting-offsets with a time needs Kafka (--bootstrap-servers): the archive "
    "alone starts at earliest or latest"
)


class StartKind(StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class StartingPosition:
    kind: StartKind = StartKind.EARLIEST
    timestamp_ms: int = 0  # TIMESTAMP only: milliseconds since the Unix epoch

    @classmethod
    def parse(cls, text: str) -> StartingPosition:
        """``earliest``, ``latest``, milliseconds since the epoch, or an ISO 8601 time (UTC)."""
        value = text.strip()
        if value in (StartKind.EARLIEST, StartKind.LATEST):
            return cls(kind=StartKind(value))
        if value.isascii() and value.isdigit():  # not "²", which isdigit() takes
            timestamp_ms = int(value)
            if timestamp_ms > MS_MAX:
                raise ConfigurationError(
                    f"--starting-offsets {text!r} is past 9999-12-31T23:59:59.999Z "
                    f"({MS_MAX} milliseconds since the epoch)"
                )
            return cls(kind=StartKind.TIMESTAMP, timestamp_ms=timestamp_ms)
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ConfigurationError(
                f"--starting-offsets {text!r} is neither earliest, latest, milliseconds since "
                "the epoch nor an ISO 8601 time"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return cls(kind=StartKind.TIMESTAMP, timestamp_ms=round(moment.timestamp() * 1000))

    def option(self) -> str:
        """The data source option's text (parsed back by :meth:`parse`)."""
        return str(self.timestamp_ms) if self.kind is StartKind.TIMESTAMP else self.kind.value

    def __str__(self) -> str:
        if self.kind is StartKind.TIMESTAMP:
            moment = dt.datetime.fromtimestamp(self.timestamp_ms / 1000, tz=dt.UTC)
            return f"the first offsets at or after {moment.isoformat()}"
        return f"the {self.kind.value} offsets"
