"""Our errors cross from a Spark worker to the driver as one marker line, and come back whole."""

from __future__ import annotations

import traceback

import pytest

from app.code_version import CodeMismatchError
from app.errors import (
    MARKER,
    ArchiveLayoutError,
    ConfigurationError,
    DataLossError,
    ErrorMarker,
    IntegrityViolationError,
    OutputStateError,
    Rule,
    SourceUnavailableError,
    StateError,
    TablecastError,
    Violation,
)
from app.ops.errors import HandoffError

VIOLATION = Violation("sensor-1", 3, 42, "s-9", Rule.SEQUENCE, "seq 5", "seq 7")
# One of each error a worker (a task, or the source's reader) can raise.
RAISED_IN_WORKERS: list[TablecastError] = [
    DataLossError(
        "data loss in the archive: topic sensor-1 partition 3 offsets 10 to 19 are missing",
        source="the archive",
        topic="sensor-1",
        partition=3,
        first_missing=10,
        last_missing=19,
        path="/a/sensor-1/3/x.parquet",
    ),
    ArchiveLayoutError(
        "archive file /a/x is not sorted by offset", path="/a/x", topic="t", partition=0
    ),
    StateError("state file /s/1.state fails its checksum: it is damaged"),
    SourceUnavailableError("Kafka at b:9092: could not list the topics within 3 s: timed out"),
    ConfigurationError("unknown source backend 'x'"),
    OutputStateError("refused", output="/o", checkpoint="/c", batch=4),
    TablecastError("the source gave the same offset twice in one micro-batch"),
    IntegrityViolationError(VIOLATION),
    CodeMismatchError(
        "this executor imported tablecast code 0123456789ab from /w, the driver "
        "runs ba9876543210: remove it"
    ),
]


def _worker_traceback(error: TablecastError, *, only_exception: bool = False) -> str:
    """``error`` raised and printed as PySpark's worker prints it, inside Spark's wrapping."""
    try:
        raise error
    except TablecastError as raised:
        printed = (
            traceback.format_exception_only(raised)  # SPARK_HIDE_TRACEBACK
            if only_exception
            else traceback.format_exception(raised)
        )
    return (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_EXCEPTION] An "
        f"exception was thrown from the Python worker: {''.join(printed)} SQLSTATE: 38000\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"
    )


@pytest.mark.parametrize("error", RAISED_IN_WORKERS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("only_exception", [False, True])
def test_a_workers_error_comes_back_as_itself_with_its_facts(
    error: TablecastError, only_exception: bool
) -> None:
    marker = ErrorMarker.find(_worker_traceback(error, only_exception=only_exception))
    assert marker is not None
    back = marker.rebuild()
    assert type(back) is type(error)
    assert str(back) == str(error) and back.facts == error.facts
    assert back.exit_code == error.exit_code
    if isinstance(error, IntegrityViolationError):
        assert isinstance(back, IntegrityViolationError) and back.violation == VIOLATION


def test_the_marker_is_one_ascii_line_of_json_after_a_fixed_prefix() -> None:
    error = DataLossError('two\nlines, é and "quotes"', topic="t\u00e9", partition=1)
    [line] = error.__notes__
    assert line.startswith(MARKER) and "\n" not in line and line.isascii()
    assert line == (
        'tablecast-error {"error":"app.errors.DataLossError",'
        '"message":"two\\nlines, \\u00e9 and \\"quotes\\"",'
        '"facts":{"topic":"t\\u00e9","partition":1}}'
    )
    back = ErrorMarker.find(f"noise\n{line}\nmore noise")
    assert back == ErrorMarker("app.errors.DataLossError", str(error), error.facts)


def test_what_is_not_one_of_ours_stays_unexpected() -> None:
    assert ErrorMarker.find("Traceback (most recent call last):\nValueError: boom") is None
    assert ErrorMarker.find(MARKER + "{not json") is None
    assert ErrorMarker.find(MARKER + '{"error": "x", "message": 1, "facts": {}}') is None
    assert ErrorMarker.find(MARKER + '{"error": "x", "message": "m", "facts": {"a": [1]}}') is None
    # Named, but not a TablecastError (or not one this driver knows).
    assert ErrorMarker("builtins.ValueError", "boom", {}).rebuild() is None
    assert ErrorMarker("app.nowhere.GoneError", "boom", {}).rebuild() is None
    # Ours, but its constructor takes other arguments and it has no from_facts of its own.
    handoff = HandoffError("dev", "driver-id", "missing")
    assert ErrorMarker.of(handoff).rebuild() is None


def test_a_foreign_exception_is_quoted_as_its_name_and_first_line() -> None:
    from app.errors import one_line

    many = ValueError("first line of it\n  File 'x.py', line 3\nsecond")
    assert one_line(many) == "ValueError: first line of it"
    assert one_line(KeyError()) == "KeyError"
    assert one_line(OSError("   \n  ")) == "OSError"
    assert one_line(RuntimeError("x" * 500), limit=10) == "RuntimeError: " + "x" * 10
