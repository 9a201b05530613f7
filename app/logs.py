"""Log lines for people (text) or for CloudWatch Logs Insights (JSON lines).

On the cluster the job runs with ``--log-format json``: every line is one
JSON object with ``ts``, ``level``, ``logger`` and ``message``, plus the
location fields (``topic``, ``partition``, ``offset``, ``session``) when an
error carries them, so a query can find every failure of a partition.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import orjson

LOCATION_FIELDS = ("topic", "partition", "offset", "session", "rule", "expected", "got")


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
        for name in LOCATION_FIELDS:
            if hasattr(record, name):
                doc[name] = getattr(record, name)
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure(log_format: LogFormat, level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
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
