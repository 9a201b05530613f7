"""Python workers started, with the job's code imported, while the query starts.

A streaming query's start is a chain of waits (the checkpoint and the table
read, the source's Python planners started one after another, its first
listing), and the executors' cores idle through it. The first micro-batch's
tasks then each waited for their Python worker: Spark starts the daemon
(:mod:`tablecast_preload`) at the first Python task and forks a worker for
each, which imports the job's modules before its first record; on the heavy
bench each first task ran a second longer than the next ones.

:func:`warm_workers` runs one small Spark job in the background as the job
starts: a DataFrame task per core that imports the modules the job's tasks
import. Spark keeps the workers it forked for the next Python tasks (worker
reuse is on by default), so the first micro-batch finds them ready. It is
best effort: a failure is logged and changes nothing, since each task
imports what it needs itself.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa

log = logging.getLogger(__name__)

# What the job's Python tasks import: the partition task (engine, sink writer,
# processor) and the source's range reader with its backends.
MODULES: Final = (
    "app.engine.task",
    "app.sources.stream",
    "app.sources.archive",
    "app.sources.kafka",
    "app.sources.tiered",
)


@dataclass
class Warming:
    """The background warm-up: its thread, and the workers it warmed once done."""

    thread: threading.Thread | None = None
    workers: list[int] = field(default_factory=list)  # their process ids


def _import_modules(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for name in MODULES:
        importlib.import_module(name)
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]}, pa.schema([("pid", pa.int64())]))


def warm_workers(spark: Any) -> Warming:
    """Start a Python worker per core of the executors, in the background."""
    slots = max(1, int(spark.sparkContext.defaultParallelism))
    warming = Warming()

    def run() -> None:
        try:
            # A DataFrame's Python task, as the job's are: Spark pools the workers of
            # SQL's Python functions apart from those of the RDD API's.
            rows = spark.range(0, slots, 1, slots).mapInArrow(_import_modules, "pid long")
            warming.workers = sorted({row.pid for row in rows.collect()})
        except Exception as exc:  # best effort: the tasks import what they need themselves
            log.debug("warming the Python workers failed: %s", exc)

    warming.thread = threading.Thread(target=run, name="tablecast-warm-workers", daemon=True)
    warming.thread.start()
    return warming
