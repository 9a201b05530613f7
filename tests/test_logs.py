"""JSON log lines carry an error's facts as fields."""

from __future__ import annotations

import logging

import orjson

from app import logs
from app.errors import DataLossError


def _line(record: logging.LogRecord) -> dict[str, object]:
    doc = orjson.loads(logs.JsonFormatter().format(record))
    assert isinstance(doc, dict)
    return doc


def test_an_errors_facts_become_fields_of_its_json_line() -> None:
    error = DataLossError(
        "data loss in the archive: topic s partition 2 offsets 10 to 19 are missing",
        source="the archive",
        topic="s",
        partition=2,
        first_missing=10,
        last_missing=19,
        path="/a/s/2/x.parquet",
        level="a fact named like a field",
        logger="neither",
    )
    record = logging.LogRecord(
        "tablecast", logging.ERROR, __file__, 1, "tablecast run: %s", (error,), None
    )
    record.__dict__[logs.FACTS] = error.facts  # what logging's extra= does
    doc = _line(record)
    assert {
        k: doc[k] for k in ("topic", "partition", "first_missing", "last_missing", "path", "source")
    } == {
        "topic": "s",
        "partition": 2,
        "first_missing": 10,
        "last_missing": 19,
        "path": "/a/s/2/x.parquet",
        "source": "the archive",
    }
    # The line's own fields stay what they are.
    assert doc["message"] == f"tablecast run: {error}"
    assert (doc["level"], doc["logger"]) == ("ERROR", "tablecast")


def test_a_line_without_an_error_has_only_its_own_fields() -> None:
    record = logging.LogRecord("app.sink", logging.INFO, __file__, 1, "batch %d", (3,), None)
    assert sorted(_line(record)) == ["level", "logger", "message", "ts"]
