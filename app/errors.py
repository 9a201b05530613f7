"""One exception root for the job; every exception carries its facts.

The command line prints :class:`TablecastError` messages as one line and
exits non-zero, so each message names what was wrong and where.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class TablecastError(Exception):
    """Root of every error the job reports to its operator.

    ``facts`` are what the message says, as fields (topic, partition,
    offset, path...): JSON logs carry them, so an alert can key on them
    without parsing the message.
    """

    exit_code = 1

    def __init__(self, message: str, **facts: str | int) -> None:
        super().__init__(message)
        self.facts: dict[str, str | int] = facts


class EnvelopeError(ValueError):
    """A record value breaks the envelope (rule 7); raised without location."""


class Rule(IntEnum):
    """The integrity rules of CONTRACT.md section 2."""

    FIRST_MESSAGE = 1
    SEQUENCE = 2
    RESYNC = 3
    DELETE_UNKNOWN_ROW = 4
    AFTER_END = 5
    ONE_PARTITION = 6
    ENVELOPE = 7


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken integrity rule, located by topic, partition and offset."""

    topic: str
    partition: int
    offset: int
    session: str
    rule: Rule
    expected: str
    got: str

    def describe(self) -> str:
        return (
            f"integrity violation (rule {int(self.rule)}) at topic {self.topic} "
            f"partition {self.partition} offset {self.offset}, session {self.session!r}: "
            f"expected {self.expected}, got {self.got}"
        )


class IntegrityViolationError(TablecastError):
    """A strict run stopped on the first violation of its micro-batch."""

    exit_code = 2

    def __init__(self, violation: Violation) -> None:
        super().__init__(
            violation.describe(), topic=violation.topic, partition=violation.partition,
            offset=violation.offset, session=violation.session, rule=int(violation.rule),
            expected=violation.expected, got=violation.got,
        )  # fmt: skip
        self.violation = violation


class DataLossError(TablecastError):
    """Offsets the job must read are gone (like Kafka's failOnDataLoss).

    Facts, as the message names them: ``source`` (the backend's description),
    ``topic``, ``partition``, ``offset`` (the next one to read),
    ``first_missing`` and ``last_missing`` (inclusive), ``earliest`` and
    ``latest`` (what the source holds, ``latest`` exclusive), ``path``.
    """

    exit_code = 3


class ArchiveLayoutError(TablecastError):
    """A file in the raw archive does not follow CONTRACT.md section 4.

    Facts: ``path``, ``topic`` and ``partition`` (when the path names them).
    """

    exit_code = 3


class OutputStateError(TablecastError):
    """Output and checkpoint disagree; the job refuses to start.

    Facts: ``output``, ``checkpoint``, and ``batch``, ``topic``, ``partition``
    when the message names them.
    """

    exit_code = 4


class StateError(TablecastError):
    """A partition's state in the checkpoint is missing or damaged."""

    exit_code = 4


class SourceUnavailableError(TablecastError):
    """The source (Kafka's brokers) could not be reached or read in the time allowed."""

    exit_code = 5


class ConfigurationError(TablecastError):
    """A command-line option or setting is invalid."""

    exit_code = 64
