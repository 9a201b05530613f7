"""The sink's commit protocol: exactly once for any Parquet reader.

Spark's file sink promises exactly-once only to readers of its
``_spark_metadata`` log, and keys that log by batch number, which means
nothing to another checkpoint. This sink keeps no batch numbers: visible
files are named after the topic-partition and offset range their rows come
from, and the output's ledger (:mod:`app.sink.ledger`) records which offsets
are published.

A micro-batch is committed in these steps (``foreachBatch`` on the driver),
by the writer that claimed the output at start (:mod:`app.sink.fencing`):

1. Read the batch's end offsets (and its start: the previous batch's end)
   from the checkpoint's offset log, which Spark writes before running it.
2. Check them against the ledger's head. The head's end equal to this end:
   the batch was published before a crash, before Spark recorded its commit;
   run it (the partitions' state must advance) but publish nothing. The
   head's end different from this start: output and checkpoint disagree; stop.
   The state versions the tasks load are those the ledger recorded last.
3. Check that the output is still this writer's (one small request: the
   ledger's next number is free), then run the batch's partition tasks
   (:mod:`app.engine`): each task writes its
   partition's rows under ``_tablecast/staging/<claim>/<key>/`` (hidden),
   saves its partition's state at the range's end (named by offset and
   digest), and reports files, violations, trace lines and the sessions it
   claimed; the driver settles rule 6 across partitions (in resync mode a
   later pass reads each range again and must read the records the first
   pass read).
4. Strict mode with a violation: delete the staging directory and fail;
   nothing of the batch becomes visible.
5. Check that the output is still this writer's (one small request: the
   ledger's next number is free), then delete what is no longer needed:
   state versions older than the last few published, a dead rewrite whose
   grace has run out (:func:`app.sink.rewrite.finish_abandoned`), and files
   that a crashed attempt of this same batch published but this attempt did
   not stage (its pending list says which). Write this writer's pending list
   of the files about to appear.
6. Publish: move each staged file to its visible name (a rename locally, an
   atomic copy on S3). A redone batch replaces files; it never adds any.
7. Create the ledger entry under this writer's next number, with the end
   offsets and every partition's last state version (offset and digest):
   the next batch loads exactly those. Another writer took the number: this
   one has lost the output and stops (:class:`~app.errors.OwnershipLostError`).
8. Clear the pending lists of this batch and this writer's staging; record
   the batch's sessions. Spark then writes its commit to the checkpoint.

Then the upkeep that keeps what a batch costs flat however long the job runs
(steps 9 to 13, each after a check of the fence before it deletes): the
table's commit at step 7 expired the snapshots older than the history
(:mod:`app.table.history`); step 9 deletes the table's metadata files that
no snapshot has referenced for the metadata's grace (30 s: a query's
planning, :func:`app.table.history.metadata_grace`); steps 10 to 13 fold old
ledger entries into a few parts (:mod:`app.sink.fold`). A crash in them
leaves the next batch to finish them, and changes nothing a reader sees.

A crash anywhere before step 7 leaves Spark to redo the batch with the same
offsets, which loads the same state versions, stages the same files and
publishes the same names; after step 7, step 2 recognises the batch, and
the redo clears the pending list a crash before step 8 left. At no step is a
visible file broken or empty. A writer paused at any step while another took
the output over changes nothing when it wakes: its staging is gone (step 6
fails), its entry's number is taken (step 7 fails), step 5's check
stops it before it deletes anything, and the check that ends each batch
(:meth:`ExactlyOnceSink.hand_back`) before Spark records it in the
checkpoint's commit log.

Each decision is logged: published, recognised as published before, refused
(output and checkpoint disagree, or a strict violation). After each step,
and inside step 6 after each publish, the sink calls its step hook
(:data:`StepHook`), and inside steps 9 and 12 after each delete: nothing,
unless a test installed one (:func:`install_step_hook`;
:mod:`app.sink.crash_points` kills the driver there).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from app import defaults, worker_errors
from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets
from app.engine.driver import RETAIN_VERSIONS, EngineDriver, States
from app.engine.machine import IntegrityMode
from app.engine.reports import BatchOutcome
from app.errors import (
    IntegrityViolationError,
    OutputStateError,
    OwnershipLostError,
    TablecastError,
)
from app.sink import fold as fold_mod
from app.sink import ledger as ledger_mod
from app.sink import processors
from app.sink import rewrite as rewrite_mod
from app.sink.checkpoint import OffsetLog
from app.sink.fencing import Fence, LeaseKeeper
from app.sink.fold import LedgerFold
from app.sink.follower import TableUpkeep
from app.sink.ledger import Ledger, LedgerEntry, LiveRules, Pending
from app.storage import Location, resolve

log = logging.getLogger(__name__)

STEPS = 8
PUBLISH_STEP = 6
TABLE_TIDY_STEP = 9
LAST_STEP = fold_mod.MERGED  # steps 9 to 13: upkeep
# Steps whose hook is also called inside, after each file (a publish, a delete).
COUNTED_STEPS = (PUBLISH_STEP, TABLE_TIDY_STEP, fold_mod.ENTRIES_DELETED)


class StepHook(Protocol):
    """Called after each step of a batch, and inside steps 6, 9 and 12 after each file
    published or deleted (``files``: how many so far)."""

    def __call__(self, step: int, batch_id: int, files: int | None = None) -> None: ...


# The hook sinks made from now on call: only tests install one (app.sink.crash_points).
_step_hook: StepHook | None = None


def install_step_hook(hook: StepHook | None) -> None:
    """The step hook of every sink made from now on (None: none)."""
    global _step_hook  # noqa: PLW0603 (a test seam: one per process)
    _step_hook = hook


def _installed_step_hook() -> StepHook | None:
    return _step_hook


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
    messages: int = 0  # records the tasks read (the job's source gives Spark ranges, not records)
    state_bytes: int = 0
    sessions: int = 0
    # Records read per tier that served them ("archive", "kafka"): which
    # source served the batch (app.sources.tiered).
    served: Mapping[str, int] = field(default_factory=dict)
    # Integrity classes ordered and once: messages dropped for their seq, seqs that never
    # arrived, and (once) a sample of where sessions ended or timed out with seqs missing.
    dropped: int = 0
    missing: int = 0
    gaps: tuple[str, ...] = ()


@dataclass
class ExactlyOnceSink:
    """The ``foreachBatch`` function of the job."""

    output_uri: str
    checkpoint: OffsetLog  # Spark's checkpoint (app.sink.checkpoint.CheckpointLog)
    engine: EngineDriver
    mode: IntegrityMode
    table: TableUpkeep  # the output's Iceberg table: app.table.live.LiveTable
    fence: Fence  # this writer's claim on the output (app.sink.fencing)
    history_s: float = defaults.TABLE_HISTORY_S  # ledger entries older than this are folded
    lease: LeaseKeeper | None = None  # told of each commit, for a refused second job's line
    on_batch: Callable[[BatchReport], None] | None = None
    step_hook: StepHook | None = field(default_factory=_installed_step_hook)
    # Why the last batch failed, when it is ours: Spark's query fails with its
    # own exception, and the job raises this one instead (the CLI's one line).
    failure: TablecastError | None = field(default=None, init=False)
    fold: LedgerFold = field(init=False)

    def __post_init__(self) -> None:
        self.fold = LedgerFold(Ledger(resolve(self.output_uri)))

    def __call__(self, frame: Any, batch_id: int) -> None:
        try:
            with worker_errors.rebuilt():  # a task's, raised in an executor
                self._commit(frame, batch_id)
        except TablecastError as exc:
            self.failure = exc
            raise

    def hand_back(self, batch_id: int) -> None:
        """The fence, as the last thing ``foreachBatch`` does (after the commit, its upkeep
        and the scheduled compaction): Spark then records the batch in the checkpoint's
        commit log and plans the next batch. A driver that paused after its commit and woke
        after another took over would otherwise write the log entries the new driver is
        about to write, and the new driver's query fail on them. The source checks again
        before Spark records the next batch's offsets (:mod:`app.spark.planning`)."""
        try:
            self.fence.check(f"Spark records batch {batch_id} in the checkpoint")
        except OwnershipLostError as exc:
            self.failure = exc
            raise

    def _step_done(self, step: int, batch_id: int, files: int | None = None) -> None:
        if self.step_hook is not None:
            self.step_hook(step, batch_id, files)

    def _commit(self, frame: Any, batch_id: int) -> None:
        location = resolve(self.output_uri)
        ledger = Ledger(location)
        fence = self.fence

        # Step 1
        end = self.checkpoint.offsets(batch_id)
        if end is None:
            raise OutputStateError(
                f"checkpoint {self.checkpoint.uri} has no offsets for batch {batch_id}",
                checkpoint=self.checkpoint.uri,
                batch=batch_id,
            )
        start = (self.checkpoint.offsets(batch_id - 1) if batch_id > 0 else None) or {}
        self._step_done(1, batch_id)

        # Step 2
        head = ledger.head()
        # A repair's entry holds no batch: a batch ending where it does (nothing new since
        # the repair) is published as an empty batch, never recognised as published.
        already_published = head is not None and head.kind is ledger_mod.BATCH and head.end == end
        if head is not None and not already_published and start and start != head.end:
            fence.check(f"batch {batch_id}")  # the head moved on: another writer's, not ours
            message = (
                f"output {self.output_uri} ends at {offsets_mod.describe(head.end)} but batch "
                f"{batch_id} of checkpoint {self.checkpoint.uri} starts at "
                f"{offsets_mod.describe(start)}; run `tablecast repair` to realign them"
            )
            log.info("batch %d refused: %s", batch_id, message)  # INFO: the CLI prints the error
            raise OutputStateError(
                message, output=self.output_uri, checkpoint=self.checkpoint.uri, batch=batch_id
            )
        if not self.engine.prepared:  # the ledger's earlier entries are read once a run
            self.engine.prepare(start, *_recorded_states(ledger, head, already_published))
        self._step_done(2, batch_id)

        # Step 3
        fence.check(f"running batch {batch_id}")  # a writer woken from a pause writes nothing
        key = offsets_mod.fingerprint(end)
        staging = f"{ledger_mod.staging_dir(fence.claim)}/{key}"

        def clear_staging() -> None:
            location.delete_dir(location.child(staging))

        clear_staging()
        # Resync mode may run the tasks more than once (rule 6): each pass reads its ranges
        # again, and a later pass that reads other records than the first fails the batch.
        outcome = self.engine.run_batch(
            lambda task, ddl: frame.mapInArrow(task, ddl).collect(),
            start,
            end,
            staging,
            clear_staging,
        )
        files = [f.path for f in outcome.files]
        self._step_done(3, batch_id)

        # Step 4
        if outcome.violations and self.mode is IntegrityMode.STRICT:
            clear_staging()
            log.info(
                "batch %d (%s to %s) not published: %s",
                batch_id,
                offsets_mod.describe(_range_starts(start, end, outcome)),
                offsets_mod.describe(end),
                outcome.violations[0].describe(),
            )
            raise IntegrityViolationError(outcome.violations[0])
        self._step_done(4, batch_id)
        if already_published and head is not None:
            clear_staging()
            for previous in _same_batch(ledger, key, fence.claim):
                # A crash after step 7: every file it lists was published by step 6.
                ledger.clear_pending(previous.claim)
            recorded = head.states if head.states is not None else self.engine.states_after(outcome)
            self.engine.committed(outcome, recorded)
            self.table.catch_up(location)  # the Iceberg table follows the ledger
            log.info(
                "batch %d ends at %s, as ledger entry %d (batch %s) does: published before "
                "a restart, not publishing again",
                batch_id,
                offsets_mod.describe(end),
                head.number,
                head.batch_id,
            )
            self._report(self._batch_report(batch_id, end, outcome, published=False))
            return

        # Step 5
        fence.check(f"publishing batch {batch_id}")
        self.engine.collect_garbage()
        # A recompute that died mid-rewrite:
        rewrite_mod.finish_abandoned(location, snapshot=self.table.snapshot_rewrite)
        previous_lists = _same_batch(ledger, key, fence.claim)
        for previous in previous_lists:
            stale = set(previous.files) - set(files)
            for relative in stale:
                location.delete_file(location.child(relative))
            log.info(
                "batch %d: a crashed attempt's pending list found (claim %d); %d of its files "
                "not staged again were deleted",
                batch_id,
                previous.claim,
                len(stale),
            )
        ledger.set_pending(Pending(key, tuple(files), fence.claim))
        self._step_done(5, batch_id)

        # Step 6
        for done, relative in enumerate(files, start=1):
            try:
                location.move(location.child(staging, relative), location.child(relative))
            except OSError:
                # Gone from staging: another writer took the output over and removed it.
                fence.check(f"publishing {relative}")
                raise
            self._step_done(PUBLISH_STEP, batch_id, files=done)
        self._step_done(6, batch_id)

        # Step 7
        begins = _range_starts(start, end, outcome)
        states = self.engine.states_after(outcome)
        entry = fence.append(
            LedgerEntry(
                number=-1,  # the fence numbers it
                kind=ledger_mod.BATCH,
                end=end,
                files=tuple(files),
                rows=outcome.rows,
                checkpoint=self.checkpoint.uri,
                checkpoint_id=self.checkpoint.query_id(),
                batch_id=batch_id,
                start=begins,
                states=states,
                rules=LiveRules.of(self.engine.rules),
                foreign={tp: dict(sessions) for tp, sessions in outcome.foreign.items()},
                schema=self.engine.processor.output.digest,
                processor=processors.record(self.engine.processor),
            ),
            doing=f"recording batch {batch_id}",
        )
        if self.lease is not None:
            self.lease.committed(entry)
        self._step_done(7, batch_id)
        self.table.catch_up(location)  # the Iceberg table follows the ledger

        # Step 8
        for previous in [*previous_lists, Pending(key, (), fence.claim)]:
            ledger.clear_pending(previous.claim)
        clear_staging()
        self.engine.committed(outcome, states)
        log.info(
            "batch %d published as ledger entry %d: %d files, %d rows, %s to %s",
            batch_id,
            entry.number,
            len(files),
            outcome.rows,
            offsets_mod.describe(begins),
            offsets_mod.describe(end),
        )
        self._step_done(8, batch_id)
        self._upkeep(location, batch_id)
        self._report(self._batch_report(batch_id, end, outcome, published=True))

    def _upkeep(self, location: Location, batch_id: int) -> None:
        """Steps 9 to 13: what the table and the ledger no longer need. A storage's refusal
        here is logged and the next batch tries again; a lost output is not."""
        fence = self.fence

        def hook(step: int, done: int | None) -> None:
            self._step_done(step, batch_id, done)

        try:
            # Step 9
            self.table.tidy(
                location,
                before=lambda: fence.check("deleting the table's unreferenced files"),
                deleted=lambda done: hook(TABLE_TIDY_STEP, done),
            )
            self._step_done(TABLE_TIDY_STEP, batch_id)
            # Steps 10 to 13
            self.fold.fold(fence, self.history_s, hook)
        except OwnershipLostError:
            raise
        except (TablecastError, OSError) as exc:
            log.warning(
                "upkeep after batch %d of %s not done: %s; the next batch tries again",
                batch_id,
                self.output_uri,
                exc,
            )

    def _report(self, report: BatchReport) -> None:
        if self.on_batch is not None:
            self.on_batch(report)

    def _batch_report(
        self, batch_id: int, end: Offsets, outcome: BatchOutcome, published: bool
    ) -> BatchReport:
        trace = tuple(
            f"{tp.key()}@{t.offset} session {t.session}: seq {t.seq} {t.type}: {t.outcome}; "
            f"{t.rows} rows" + (f"; {t.keys}" if t.keys else "")
            for tp, t in outcome.trace
        )
        return BatchReport(
            batch_id=batch_id,
            end=end,
            published=published,
            files=len(outcome.files) if published else 0,
            rows=outcome.rows if published else 0,
            quarantined=outcome.quarantined if published else 0,
            bytes=outcome.bytes if published else 0,
            violations=outcome.violation_count,
            trace=trace,
            messages=outcome.messages,
            state_bytes=sum(self.engine.state_bytes.values()),
            sessions=sum(self.engine.sessions.values()),
            served=outcome.served,
            dropped=outcome.repeats,
            missing=outcome.gap_count,
            gaps=tuple(
                f"{tp.key()}@{g.offset} session {g.session}: {g.missing:,} seqs never "
                f"arrived ({g.seqs})"
                for tp, g in outcome.gaps
            ),
        )


def _same_batch(ledger: Ledger, key: str, claim: int) -> list[Pending]:
    """Pending lists of this batch by this writer or an earlier one (a crashed attempt)."""
    return [p for p in ledger.pending_lists() if p.end_key == key and p.claim <= claim]


def _recorded_states(
    ledger: Ledger, head: LedgerEntry | None, already_published: bool
) -> tuple[States | None, list[States]]:
    """The state versions a batch starts from, as the ledger records them, and the last few before.

    The head's, unless the batch is the head (published before a crash):
    then the data entry's before it. After a repair (or on a new output) no
    version: every partition starts anew. ``None``: a ledger from before
    versions were recorded (the driver takes the newest version present).
    Claims between entries are passed over.
    """
    at = head
    if head is not None and already_published:
        at = ledger.previous_data(head.number)
    if at is None or at.kind is not ledger_mod.BATCH:
        return {}, []
    history: list[States] = []
    earlier = [n for n in ledger.numbers() if n < at.number][-2 * RETAIN_VERSIONS :]
    for number in earlier:
        entry = ledger.read(number)
        if entry.kind is ledger_mod.WRITER:
            continue
        if entry.kind is not ledger_mod.BATCH:
            history = []
        elif entry.states is not None:
            history.append(entry.states)
    return at.states, history[-(RETAIN_VERSIONS - 1) :] if RETAIN_VERSIONS > 1 else []


def _range_starts(start: Offsets, end: Offsets, outcome: BatchOutcome) -> Offsets:
    """Where each partition's range of the batch began: the checkpoint's previous end,
    or for the first batch (whose start Spark does not record) what the tasks read from."""
    begins = {tp: summary.start for tp, summary in outcome.partitions.items()}
    return {tp: start.get(tp, begins.get(tp, end[tp])) for tp in end}
