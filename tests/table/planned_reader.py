"""An Iceberg reader that plans its scan before a rewrite's snapshot and reads after it.

What pyiceberg, Spark, Athena or DuckDB do when a query starts just before a
rewrite commits: the scan is planned on the snapshot current then (its data
files listed from the manifests), and the files are opened afterwards. The
rewrite's step hooks place both moments: :meth:`plan` at ``recorded()``
(before the commit), :meth:`read_after_commit` at ``published()``. The read
starts once the rewrite has moved on from its commit: its record says when
the snapshot was published (the grace has begun), or the record is gone (the
rewrite retired its old names and ended).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from app.sink import rewrite as rewrite_mod
from app.storage import resolve
from app.table.catalog import threads_released
from app.table.compact import CompactionSteps
from tests.table.helpers import load_table

_GIVE_UP_S = 120.0  # a rewrite that never moves on fails the test, it does not hang it


class PlannedReader:
    def __init__(self, output: Path | str) -> None:
        self.output = str(output)
        self.snapshot_id: int | None = None
        self.rows: pa.Table | None = None
        self.errors: list[BaseException] = []
        self._scan: Any = None
        self._tasks: list[Any] = []
        self._thread: threading.Thread | None = None

    def plan(self) -> None:
        """The scan of the current snapshot, planned: its data files listed."""
        with threads_released():
            table = load_table(self.output)
            self.snapshot_id = table.current_snapshot().snapshot_id
            self._scan = table.scan(snapshot_id=self.snapshot_id)
            self._tasks = list(self._scan.plan_files())
        assert self._tasks

    def read_after_commit(self) -> None:
        """Start reading the planned files once the rewrite has moved on from its commit."""
        assert self._thread is None and self._tasks
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _moved_on(self) -> bool:
        location = resolve(self.output)
        paths = [
            location.child(rewrite_mod.REWRITES_DIR, i.base_name)
            for i in location.list_dir(location.child(rewrite_mod.REWRITES_DIR))
            if i.base_name.endswith(".json")
        ]
        for path in paths:
            try:
                record = orjson.loads(location.read_bytes(path))
            except FileNotFoundError:
                continue
            if not record.get("published_at"):
                return False
        return True

    def _read(self) -> None:
        from pyiceberg.io.pyarrow import ArrowScan

        try:
            deadline = time.monotonic() + _GIVE_UP_S
            while not self._moved_on():
                if time.monotonic() > deadline:
                    raise TimeoutError("the rewrite never moved on from its commit")
                time.sleep(0.01)
            scan = self._scan
            with threads_released():
                self.rows = ArrowScan(
                    scan.table_metadata,
                    scan.io,
                    scan.projection(),
                    scan.row_filter,
                    scan.case_sensitive,
                    scan.limit,
                ).to_table(self._tasks)
        except BaseException as exc:  # reported to the test, which asserts there was none
            self.errors.append(exc)


class ReadPlannedAfterCommit(CompactionSteps):
    """A rewrite's (or a compaction's) hooks placing a :class:`PlannedReader`: it plans at
    ``recorded()``, starts reading at ``published()``, and reads within the grace: the
    owner's first pause of the grace waits for the read to end. How long a read of a few
    small files takes is the machine's load (seconds on two shared cores); what is tested is
    that the planned files are all there for a read inside the grace, not how fast it is."""

    def __init__(self, reader: PlannedReader) -> None:
        self.reader = reader

    def recorded(self) -> None:
        self.reader.plan()

    def published(self) -> None:
        self.reader.read_after_commit()

    def waiting(self) -> None:
        self.reader.join()
