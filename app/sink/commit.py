"""The sink's commit protocol: exactly once for any Parquet reader.

Spark's file sink promises exactly-once only to readers of its
``_spark_metadata`` log, and keys that log by batch number, which means
nothing to another checkpoint. This sink keeps no batch numbers: visible
files are named after the offsets their batch ends at, and the output's
ledger (:mod:`app.sink.ledger`) records which offsets are published.

A micro-batch is committed in these steps (``foreachBatch`` on the driver):

1. Read the batch's end offsets (and its start: the previous batch's end)
   from the checkpoint's offset log, which Spark writes before running it.
2. Check them against the ledger's head. The head's end equal to this end:
   the batch was published before a crash, before Spark recorded its commit;
   run it (the state store must advance) but publish nothing. The head's end
   different from this start: output and checkpoint disagree; stop.
3. Run the micro-batch once: every task writes its rows under
   ``_tablecast/staging/<key>/`` (hidden), with names derived from the end
   offsets and the task's partition, and reports files, violations and
   trace lines.
4. Strict mode with a violation: delete the staging directory and fail;
   nothing of the batch becomes visible.
5. Write ``pending.json`` listing the files about to appear. If a pending
   list from a crashed attempt of the same batch names files this attempt
   did not stage, delete those first.
6. Publish: move each staged file to its visible name (a rename locally, an
   atomic copy on S3). A redone batch replaces files; it never adds any.
7. Append the ledger entry with the end offsets.
8. Clear ``pending.json`` and the staging directory. Spark then writes its
   commit to the checkpoint.

A crash anywhere before step 7 leaves Spark to redo the batch with the same
offsets and state, which stages and publishes the same names; after step 7,
step 2 recognises the batch. At no step is a visible file broken or empty.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from app import offsets as offsets_mod
from app.checkpoint import CheckpointLog
from app.errors import IntegrityViolationError, OutputStateError, Rule, Violation
from app.offsets import Offsets
from app.session import IntegrityMode
from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger, LedgerEntry, Pending
from app.sink.writer import FILE, REPORT_DDL, StagingWriter
from app.stateful import TRACE, VIOLATION
from app.storage import resolve

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchReport:
    """What one committed micro-batch did, for progress and metrics."""

    batch_id: int
    end: Offsets
    published: bool
    files: int
    rows: int
    quarantined: int
    bytes: int
    violations: int
    trace: tuple[str, ...] = ()


@dataclass
class ExactlyOnceSink:
    """The ``foreachBatch`` function of the job."""

    output_uri: str
    checkpoint: CheckpointLog
    mode: IntegrityMode
    max_rows_per_file: int = 2_000_000
    on_batch: Callable[[BatchReport], None] | None = None
    failure: IntegrityViolationError | OutputStateError | None = field(default=None, init=False)

    def __call__(self, frame: Any, batch_id: int) -> None:
        try:
            self._commit(frame, batch_id)
        except (IntegrityViolationError, OutputStateError) as exc:
            self.failure = exc  # the CLI prints it as one line
            raise

    def _commit(self, frame: Any, batch_id: int) -> None:
        location = resolve(self.output_uri)
        ledger = Ledger(location)

        # Step 1
        end = self.checkpoint.offsets(batch_id)
        if end is None:
            raise OutputStateError(
                f"checkpoint {self.checkpoint.uri} has no offsets for batch {batch_id}"
            )
        start = self.checkpoint.offsets(batch_id - 1) if batch_id > 0 else None

        # Step 2
        head = ledger.head()
        already_published = head is not None and head.end == end
        if head is not None and not already_published and start is not None and start != head.end:
            raise OutputStateError(
                f"output {self.output_uri} ends at {offsets_mod.describe(head.end)} but batch "
                f"{batch_id} of checkpoint {self.checkpoint.uri} starts at "
                f"{offsets_mod.describe(start)}; run `tablecast repair` to realign them"
            )

        # Step 3
        key = offsets_mod.fingerprint(end)
        staging = f"{ledger_mod.STAGING_DIR}/{key}"
        location.delete_dir(location.child(staging))
        writer = StagingWriter(self.output_uri, staging, key, self.max_rows_per_file)
        reports = frame.mapInArrow(writer, REPORT_DDL).collect()
        files = sorted(r["path"] for r in reports if r["kind"] == FILE)
        violations = sorted(
            (_violation(r) for r in reports if r["kind"] == VIOLATION),
            key=lambda v: (v.topic, v.partition, v.offset),
        )
        trace = tuple(
            f"{r['topic']}:{r['partition']}@{r['offset']} session {r['session']}: {r['detail']}"
            for r in sorted(reports, key=lambda r: (r["topic"] or "", r["partition"] or 0,
                                                    r["offset"] or 0))
            if r["kind"] == TRACE
        )  # fmt: skip
        rows = sum(r["rows"] for r in reports if r["kind"] == FILE and not _quarantine(r["path"]))
        quarantined = sum(
            r["rows"] for r in reports if r["kind"] == FILE and _quarantine(r["path"])
        )
        size = sum(r["bytes"] for r in reports if r["kind"] == FILE)

        # Step 4
        if violations and self.mode is IntegrityMode.STRICT:
            location.delete_dir(location.child(staging))
            raise IntegrityViolationError(violations[0])
        if already_published:
            location.delete_dir(location.child(staging))
            log.info("batch %d was published before a restart; not publishing again", batch_id)
            self._report(BatchReport(batch_id, end, False, 0, 0, 0, 0, len(violations), trace))
            return

        # Step 5
        previous = ledger.pending()
        if previous is not None and previous.end_key == key:
            for stale in set(previous.files) - set(files):
                location.delete_file(location.child(stale))
        ledger.set_pending(Pending(key, tuple(files)))

        # Step 6
        for relative in files:
            location.move(location.child(staging, relative), location.child(relative))

        # Step 7
        number = 0 if head is None else head.number + 1
        ledger.append(
            LedgerEntry(
                number=number,
                kind=ledger_mod.BATCH,
                end=end,
                files=tuple(files),
                rows=rows,
                checkpoint=self.checkpoint.uri,
                checkpoint_id=self.checkpoint.query_id(),
                batch_id=batch_id,
            )
        )

        # Step 8
        ledger.clear_pending()
        location.delete_dir(location.child(staging))
        self._report(
            BatchReport(
                batch_id, end, True, len(files), rows, quarantined, size, len(violations), trace
            )
        )

    def _report(self, report: BatchReport) -> None:
        if self.on_batch is not None:
            self.on_batch(report)


def _quarantine(path: str) -> bool:
    return path.startswith("_quarantine/")


def _violation(report: Any) -> Violation:
    detail = orjson.loads(report["detail"])
    return Violation(
        report["topic"],
        report["partition"],
        report["offset"],
        report["session"],
        Rule(detail["rule"]),
        detail["expected"],
        detail["got"],
    )
