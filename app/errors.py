"""One exception root for the job; every exception carries its facts.

The command line prints :class:`TablecastError` messages as one line and
exits non-zero, so each message names what was wrong and where.

An error raised in one of Spark's Python workers (an executor's task, or the
driver's planner process that runs the source's reader) reaches the driver
only as the text of its traceback. Every :class:`TablecastError` therefore
carries its :class:`ErrorMarker` as a note, one line at the end of that
traceback, from which the driver rebuilds the same error with its facts
(:mod:`app.worker_errors`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Self

# Every TablecastError class by qualified name: what a marker line can name.
_CLASSES: dict[str, type[TablecastError]] = {}


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class ExitCode(IntEnum):
    """Every exit code of ``tablecast`` and ``tablecast-ops``: the one documented table.

    Each error class names its code here; the commands' ``--help`` and the
    README print :func:`exit_code_table`, so the three cannot drift apart.
    """

    OK = 0
    CHECK_FAILED = 1
    INTEGRITY = 2
    DATA_LOSS = 3
    START_REFUSED = 4
    UNAVAILABLE = 5
    STATE = 6
    OWNERSHIP_LOST = 7
    DAMAGED_OUTPUT = 8
    PROCESSOR = 9
    USAGE = 64  # EX_USAGE
    UNEXPECTED = 70  # EX_SOFTWARE
    STORAGE = 74  # EX_IOERR
    INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
    CLOSED_PIPE = 141  # 128 + SIGPIPE, as a shell reports `| head` closing early

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS: dict[ExitCode, str] = {
    ExitCode.OK: "done (verify: the output is exact; status: the job is healthy)",
    ExitCode.CHECK_FAILED: "a check found a fault: verify's output differs, status is "
    "unhealthy, a test run is not exact, an executor runs other code than the driver",
    ExitCode.INTEGRITY: "integrity violation (strict): the line names topic, partition, "
    "offset, session, expected and got",
    ExitCode.DATA_LOSS: "data loss: offsets neither Kafka nor the archive holds, a topic "
    "or archive that is not the one the checkpoint read, an archive file out of layout, a "
    "record whose Kafka timestamp no timestamp column holds",
    ExitCode.START_REFUSED: "start refused: output and checkpoint disagree, or another job "
    "holds the output (the line says what to run)",
    ExitCode.UNAVAILABLE: "no answer in time: Kafka's brokers, the job's heartbeat, or a "
    "command on the driver",
    ExitCode.STATE: "a partition's state version that the ledger records is missing or damaged",
    ExitCode.OWNERSHIP_LOST: "another writer took the output over; this one changed nothing",
    ExitCode.DAMAGED_OUTPUT: "a published file or the output's table cannot be read (the "
    "line names what mends it)",
    ExitCode.PROCESSOR: "the processor (--processor, your code) failed: the line names the "
    "step, the message and the line of its code; nothing of the batch is visible",
    ExitCode.USAGE: "bad usage: an option, a path or a setting (the line names it)",
    ExitCode.UNEXPECTED: "unexpected error (the line names the file holding its traceback)",
    ExitCode.STORAGE: "the storage refused a read or a write (full disk, denied, read-only); "
    "nothing committed is lost",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C, SIGINT); what was committed stays",
    ExitCode.CLOSED_PIPE: "the reader of the output went away (a pipe that `head` closed)",
}


def exit_code_table(*, markdown: bool = False) -> str:
    """The exit codes as the commands' ``--help`` ends (or as the README's table)."""
    if markdown:
        rows = [f"| {int(code)} | {code.meaning} |" for code in ExitCode]
        return "\n".join(["| exit code | meaning |", "|---|---|", *rows])
    return "exit codes:\n" + "\n".join(f"  {int(code):<4} {code.meaning}" for code in ExitCode)


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Name: the first line of its message`` (``Name`` alone for an empty one): how an
    error line quotes an exception that is not ours, whose message may run to many lines."""
    text = str(exc).strip()
    first = text.splitlines()[0][:limit] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


class TablecastError(Exception):
    """Root of every error the job reports to its operator.

    ``facts`` are what the message says, as fields (topic, partition,
    offset, path...): JSON logs carry them, so an alert can key on them
    without parsing the message.
    """

    exit_code: ExitCode = ExitCode.CHECK_FAILED

    def __init__(self, message: str, **facts: str | int) -> None:
        super().__init__(message)
        self.facts: dict[str, str | int] = facts
        # Spark gives the driver a worker's error as its traceback text, which
        # ends with the notes: this one brings the error back whole.
        self.add_note(ErrorMarker.of(self).line())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _CLASSES[_qualified(cls)] = cls

    @classmethod
    def from_facts(cls, message: str, facts: Mapping[str, str | int]) -> Self:
        """The error again, from what its marker line carries.

        A subclass whose constructor takes other arguments overrides this;
        one that does not comes back from a worker as an unexpected error.
        """
        return cls(message, **facts)


_CLASSES[_qualified(TablecastError)] = TablecastError

MARKER = "tablecast-error "


@dataclass(frozen=True, slots=True)
class ErrorMarker:
    """A :class:`TablecastError` as one line of text, to cross from a worker to the driver.

    The line is ``tablecast-error `` and a JSON object (ASCII, on one line):
    ``{"error": "app.errors.DataLossError", "message": "...", "facts": {...}}``,
    the error's class by qualified name, its message and its facts.
    """

    error: str
    message: str
    facts: Mapping[str, str | int]

    @classmethod
    def of(cls, error: TablecastError) -> ErrorMarker:
        return cls(_qualified(type(error)), str(error), dict(error.facts))

    def line(self) -> str:
        doc = {"error": self.error, "message": self.message, "facts": dict(self.facts)}
        return MARKER + json.dumps(doc, ensure_ascii=True, separators=(",", ":"))

    @classmethod
    def find(cls, text: str) -> ErrorMarker | None:
        """The last marker line in ``text`` (Spark's wrappers repeat the worker's text)."""
        decoder = json.JSONDecoder()
        for line in reversed(text.splitlines()):
            at = line.find(MARKER)
            if at < 0:
                continue
            try:
                doc, _ = decoder.raw_decode(line, at + len(MARKER))
            except json.JSONDecodeError:
                continue
            marker = cls._from_json(doc)
            if marker is not None:
                return marker
        return None

    @classmethod
    def _from_json(cls, doc: Any) -> ErrorMarker | None:
        if not isinstance(doc, dict):
            return None
        error, message, facts = doc.get("error"), doc.get("message"), doc.get("facts")
        if not (isinstance(error, str) and isinstance(message, str) and isinstance(facts, dict)):
            return None
        if not all(
            isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool))
            for v in facts.values()
        ):
            return None
        return cls(error, message, facts)

    def rebuild(self) -> TablecastError | None:
        """The error this line names, with its message and facts; None if not one of ours."""
        cls = _CLASSES.get(self.error)
        if cls is None:
            return None
        try:
            return cls.from_facts(self.message, self.facts)
        except (TypeError, KeyError, ValueError):  # a constructor from_facts cannot call
            return None


class EnvelopeError(ValueError):
    """A record value breaks the envelope or its table schema (rule 7); raised without location.

    Never leaves the engine: the machine turns it into a rule-7 violation
    with the record's location, once per bad record, on the hot path. So it
    stays outside :class:`TablecastError`, whose marker note costs a JSON
    encoding per instance. A row that breaks its schema names the
    ``column``, what was ``expected`` and what arrived (``got``).
    """

    def __init__(
        self, message: str, *, column: str = "", expected: str = "", got: str = ""
    ) -> None:
        super().__init__(message)
        self.column = column
        self.expected = expected
        self.got = got


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
    column: str = ""  # where a row broke its table schema (rule 7)

    def describe(self) -> str:
        column = f", column {self.column!r}" if self.column else ""
        return (
            f"integrity violation (rule {int(self.rule)}) at topic {self.topic} "
            f"partition {self.partition} offset {self.offset}, session {self.session!r}"
            f"{column}: expected {self.expected}, got {self.got}"
        )


class IntegrityViolationError(TablecastError):
    """A strict run stopped on the first violation of its micro-batch."""

    exit_code = ExitCode.INTEGRITY

    def __init__(self, violation: Violation) -> None:
        super().__init__(
            violation.describe(),
            topic=violation.topic,
            partition=violation.partition,
            offset=violation.offset,
            session=violation.session,
            rule=int(violation.rule),
            expected=violation.expected,
            got=violation.got,
            column=violation.column,
        )
        self.violation = violation

    @classmethod
    def from_facts(cls, message: str, facts: Mapping[str, str | int]) -> Self:
        """The violation again from its facts (its message is made from them)."""
        violation = Violation(
            topic=str(facts["topic"]),
            partition=int(facts["partition"]),
            offset=int(facts["offset"]),
            session=str(facts["session"]),
            rule=Rule(int(facts["rule"])),
            expected=str(facts["expected"]),
            got=str(facts["got"]),
            column=str(facts.get("column", "")),
        )
        return cls(violation)


class DataLossError(TablecastError):
    """Offsets the job must read are gone (like Kafka's failOnDataLoss).

    Facts, as the message names them: ``source`` (the backend's description),
    ``topic``, ``partition``, ``offset`` (the next one to read),
    ``first_missing`` and ``last_missing`` (inclusive), ``earliest`` and
    ``latest`` (what the source holds, ``latest`` exclusive), ``path``.
    """

    exit_code = ExitCode.DATA_LOSS


class UnreadableRecordError(TablecastError):
    """A record the source holds that the Kafka source's columns cannot hold (CONTRACT.md 4).

    Kafka checks nothing of a producer's CreateTime unless the brokers bound it
    (``log.message.timestamp.after.max.ms``); Spark's Kafka source fails the
    query on one it cannot make microseconds, and so does the job, rather than
    write a wrapped time. Facts: ``topic``, ``partition``, ``offset``,
    ``timestamp_ms``.
    """

    exit_code = ExitCode.DATA_LOSS


class ArchiveLayoutError(TablecastError):
    """A file in the raw archive does not follow CONTRACT.md section 4.

    Facts: ``path``, ``topic`` and ``partition`` (when the path names them).
    """

    exit_code = ExitCode.DATA_LOSS


class OutputStateError(TablecastError):
    """Output and checkpoint disagree; the job refuses to start.

    Facts: ``output``, ``checkpoint``, and ``batch``, ``topic``, ``partition``
    when the message names them.
    """

    exit_code = ExitCode.START_REFUSED


class StateError(TablecastError):
    """A partition's state in the checkpoint is missing or damaged.

    Facts, when the message names a version: ``topic``, ``partition``,
    ``version`` (the offset it reaches), ``digest`` (the one the ledger
    records) and ``path``.
    """

    exit_code = ExitCode.STATE


class SourceUnavailableError(TablecastError):
    """The source (Kafka's brokers) could not be reached or read in the time allowed."""

    exit_code = ExitCode.UNAVAILABLE


class ConfigurationError(TablecastError):
    """A command-line option or setting is invalid."""

    exit_code = ExitCode.USAGE


class OwnershipLostError(TablecastError):
    """Another writer took the output over while this one ran: it stops, changing nothing.

    A lost ownership is not a damaged state: the writer that took over carries
    on, and nothing needs repairing. Facts: ``output``, ``claim`` (this
    writer's), ``by`` (the entry or owner that superseded it), and ``host``,
    ``checkpoint`` when the message names them.
    """

    exit_code = ExitCode.OWNERSHIP_LOST


class DamagedOutputError(TablecastError):
    """A published file or the output's table cannot be read: it must be mended.

    Facts: ``output``, ``path``, and ``command`` (what mends it) when known.
    """

    exit_code = ExitCode.DAMAGED_OUTPUT


class ProcessorError(TablecastError):
    """A processor (``--processor``, the user's code) failed: it raised, returned what is not
    a state and its changes, rows its output schema refuses, or it cannot be loaded.

    Facts: ``processor`` (its name), ``step`` (apply, start, end, timeout, migrate,
    output), and ``topic``, ``partition``, ``offset``, ``session`` where it was.
    """

    exit_code = ExitCode.PROCESSOR


class StorageAccessError(TablecastError):
    """The machine refused a read or a write: a full disk, a denied permission, a
    read-only filesystem. Nothing committed is lost; run again once it is fixed.

    Facts: ``path`` and ``cause``.
    """

    exit_code = ExitCode.STORAGE
