"""Log lines for people (text) or for CloudWatch Logs Insights (JSON lines).

On the cluster the job runs with ``--log-format json``: every line is one
JSON object with ``ts``, ``level``, ``logger`` and ``message``, plus an
error's facts (``topic``, ``partition``, ``offset``, ``path``...: see
:class:`app.errors.TablecastError`) when the line reports one, so a query can
find every failure of a partition without parsing messages.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson

# The log record's attribute that holds an error's facts: log with ``extra={FACTS: error.facts}``.
FACTS = "facts"


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        facts = getattr(record, FACTS, None)
        if isinstance(facts, dict):
            for name, value in facts.items():
                doc.setdefault(name, value)  # a fact never hides the line's own fields
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def _not_py4j(record: logging.LogRecord) -> bool:
    """py4j logs on the root logger, with a traceback, a call that Ctrl-C interrupted (the
    command says "interrupted" itself) or that failed because the JVM went away (the
    command's own error says what happened): none of it is for the operator."""
    return f"{os.sep}py4j{os.sep}" not in record.pathname


def configure(log_format: LogFormat, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_not_py4j)
    if log_format is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # py4j logs every gateway call at INFO, and repeats as an ERROR with a
    # traceback each exception our foreachBatch raises, which the CLI reports.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
