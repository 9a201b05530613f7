"""The driver half of a recompute: run the tasks on Spark, publish under new names, record it.

1. Stage: one Spark task per :class:`~app.recompute.plan.PartitionWork`
   (``parallelize(...).map``: no shuffle, no Spark SQL), each writing its
   files under ``_tablecast/recompute/<key>/`` (hidden from readers). First,
   a rewrite a crash interrupted is finished (:mod:`app.sink.rewrite`).
2. A strict recompute that met a violation stops here, having published
   nothing.
3. Publish (:func:`app.sink.rewrite.carry_out`): a staged file identical to
   the visible file of its range, block and day keeps that file; every other
   one is published under a new name (``part-<block>~<rewrite>.parquet``),
   and then the visible files of the recomputed blocks it replaces are
   retired. A block a compaction merged lives in its day's merged file
   (:func:`app.table.compact.merged_blocks`), and one of a group of small
   partitions in its group's file (:func:`app.recompute.plan.group_blocks`):
   that file is staged again with
   the block's recomputed rows in place of its old ones and, unless its bytes
   are the same, published under a new name in its place. A published object
   is never written again in place. Between the two, a plain-listing reader
   sees a rewritten block's messages in both files, never in neither; the
   rewrite's record in the ledger makes the live job, or the next recompute
   or repair, retire the old names if a crash came between (once the
   record's lease ran out: :mod:`app.sink.rewrite`).
4. Record the recompute in ``_tablecast/ledger/recomputes/`` (beside the
   ledger's numbered entries, which belong to the live job alone: a
   recompute never changes the ledger's head, so the live job runs on).

Running the same recompute again stages the same files and keeps the ones
it published; a crash anywhere leaves visible files whole, and running it
(or any recompute) again finishes the work. Steps 1 to 4 hold the output's
rewriter claim (:mod:`app.sink.rewriter`): no compaction or other rewrite
plans from the files a recompute is about to replace. Whatever must be
refused (other rules, a lagging archive, a rewrite still running, another
rewriter at work) is refused while
planning, before Spark starts and before other rewrites are finished
(:func:`check_startable`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import posixpath
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app import worker_errors
from app.code_version import JobVersion, job_version
from app.contract.offsets import TopicPartition
from app.engine.machine import IntegrityMode
from app.engine.output import QUARANTINE_SCHEMA
from app.engine.writer import QUARANTINE_DIR, file_day
from app.errors import IntegrityViolationError, OutputStateError
from app.recompute.plan import PartitionWork, RangeRows, group_blocks
from app.recompute.task import RecomputePlan, WorkResult, run_work
from app.sink import ledger as ledger_mod
from app.sink import processors
from app.sink import rewrite as rewrite_mod
from app.sink import rewriter as rewriter_mod
from app.sink.ledger import ProcessorRecord
from app.sink.visible import visible_files
from app.storage import Location, resolve
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.table.damage import read_published

log = logging.getLogger(__name__)

RECOMPUTE_DIR = posixpath.join(ledger_mod.CONTROL_DIR, "recompute")  # staging
RECORDS_DIR = posixpath.join(ledger_mod.LEDGER_DIR, "recomputes")


class RecomputeKind(StrEnum):
    REPLAY = "replay"
    CORRECTION = "correction"


REPLAY = RecomputeKind.REPLAY
CORRECTION = RecomputeKind.CORRECTION

Progress = Callable[[int, int], None]  # (tasks done, tasks)


@dataclass(frozen=True)
class RecomputeRecord:
    """What one recompute did: ``_tablecast/ledger/recomputes/<time>-<key>.json``."""

    kind: RecomputeKind
    selector: str  # what was asked: "version 1.2.0", "window 2026-01-01T00:00Z to ..."
    ranges: dict[str, list[tuple[int, int]]]  # "topic:partition" -> recomputed ranges
    published: tuple[str, ...]  # every file of the recomputed blocks after it
    removed: tuple[str, ...]
    rows: int
    messages: int
    job: JobVersion = field(default_factory=job_version)  # the code that recomputed
    written_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    kept: tuple[str, ...] = ()  # of ``published``: recomputed to the same bytes, kept
    # The processor that recomputed (None in older records): with ``job``, what a correction
    # selects the ranges by from now on (app.recompute.plan.last_computed).
    processor: ProcessorRecord | None = None

    @property
    def rewritten(self) -> tuple[str, ...]:
        """Of ``published``: the files written under new names."""
        return tuple(p for p in self.published if p not in set(self.kept))

    def to_json(self) -> bytes:
        doc = {
            "kind": self.kind,
            "selector": self.selector,
            "ranges": {k: [list(r) for r in v] for k, v in sorted(self.ranges.items())},
            "published": list(self.published),
            "removed": list(self.removed),
            "rows": self.rows,
            "messages": self.messages,
            "job": {"version": self.job.version, "commit": self.job.commit, "code": self.job.code},
            "written_at": self.written_at,
            "kept": list(self.kept),
            "processor": None if self.processor is None else self.processor.to_json(),
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, data: bytes) -> RecomputeRecord:
        doc = orjson.loads(data)
        return cls(
            kind=RecomputeKind(doc["kind"]),
            selector=doc["selector"],
            ranges={k: [(a, b) for a, b in v] for k, v in doc["ranges"].items()},
            published=tuple(doc["published"]),
            removed=tuple(doc["removed"]),
            rows=doc["rows"],
            messages=doc["messages"],
            job=JobVersion(**doc["job"]),
            written_at=doc["written_at"],
            kept=tuple(doc.get("kept", ())),
            processor=ProcessorRecord.from_json(doc.get("processor")),
        )


def records(location: Location) -> list[RecomputeRecord]:
    """Every recompute recorded in an output, oldest first."""
    directory = location.child(RECORDS_DIR)
    names = sorted(
        i.base_name for i in location.list_dir(directory) if i.base_name.endswith(".json")
    )
    return [
        RecomputeRecord.from_json(location.read_bytes(posixpath.join(directory, n))) for n in names
    ]


@dataclass(frozen=True)
class RecomputeReport:
    record: RecomputeRecord
    tasks: int
    # When step 3 began and ended (time.monotonic()): what readers may see mid-rewrite.
    publishing: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class Planned:
    """A recompute planned and found allowed: nothing has been done yet."""

    plan: RecomputePlan
    works: Sequence[PartitionWork]
    kind: RecomputeKind
    selector: str

    @property
    def ranges(self) -> dict[str, list[tuple[int, int]]]:
        """The offset ranges recomputed, by topic-partition (its record's ``ranges``)."""
        return {w.tp.key(): list(w.ranges) for w in self.works}

    @property
    def key(self) -> str:
        """The recompute's name: its staging folder, rewrite and record; the same for the
        same selection, so that a crashed one's staging is found by the next."""
        selected = [self.kind, self.selector, sorted(self.ranges.items())]
        return hashlib.sha256(orjson.dumps(selected)).hexdigest()[:20]


def check_startable(output_uri: str, now: float | None = None) -> None:
    """Refuse, before any work, a recompute beside a rewrite whose owner is still at it.

    :func:`app.sink.rewrite.finish_open` refuses it too, but only after Spark's tasks
    have run; this is the same check at planning."""
    location = resolve(output_uri)
    rewriter_mod.Claimant("recompute").refuse_if_held(location)
    now = time.time() if now is None else now
    for found in rewrite_mod.open_rewrites(location):
        if found.running(now):
            raise OutputStateError(
                f"rewrite {found.key} of {location.uri} is in progress "
                f"({found.describe_lease()}): wait until it ends, or, if its process is gone, "
                "until its lease runs out, and run again",
                output=location.uri,
                rewrite=found.key,
            )


def recompute(
    spark: Any,
    planned: Planned,
    progress: Progress | None = None,
    steps: rewrite_mod.RewriteSteps | None = None,
    retirement: rewrite_mod.Retirement | None = None,
    claimant: rewriter_mod.Claimant | None = None,
) -> RecomputeReport:
    """Steps 1 to 4 for ``planned``, holding the output's rewriter claim throughout
    (:mod:`app.sink.rewriter`); raises :class:`IntegrityViolationError` in step 2."""
    key = planned.key
    plan = replace(planned.plan, staging_dir=posixpath.join(RECOMPUTE_DIR, key))
    location = resolve(plan.output_uri)
    claimant = claimant or rewriter_mod.Claimant(_COMMANDS[planned.kind])
    with rewriter_mod.held(location, claimant) as claim:
        return _recompute(spark, planned, plan, key, claim, progress, steps, retirement)


_COMMANDS = {REPLAY: "replay", CORRECTION: "correct"}


def _recompute(
    spark: Any,
    planned: Planned,
    plan: RecomputePlan,
    key: str,
    claim: rewriter_mod.RewriterClaim,
    progress: Progress | None,
    steps: rewrite_mod.RewriteSteps | None,
    retirement: rewrite_mod.Retirement | None,
) -> RecomputeReport:
    works, kind, selector = planned.works, planned.kind, planned.selector
    location = resolve(plan.output_uri)
    staging = location.child(plan.staging_dir)

    # Step 1
    # A holder woken after a takeover stops here: it would drop the staging of a recompute
    # of the same selection that took over, which then could not publish it.
    claim.check("finishing what earlier rewriters left")
    # A crashed rewrite's staging may be this one's:
    rewrite_mod.finish_open(location, snapshot=table_commit.snapshot_rewrite, retirement=retirement)
    claim.check("dropping its selection's earlier staging")
    location.delete_dir(staging)
    results = _run_tasks(spark, plan, works, progress)

    # Step 2
    violations = sorted(
        (v for r in results for v in r.violations), key=lambda v: (v.topic, v.partition, v.offset)
    )
    if violations and plan.rules.mode is IntegrityMode.STRICT:
        location.delete_dir(staging)
        raise IntegrityViolationError(violations[0])

    # Step 3
    started = time.monotonic()
    # A holder woken after a takeover writes nothing more, not even its staging, which a
    # recompute of the same selection that took over would be using.
    claim.check("staging its rewrite")
    rewrite, kept = _rewrite(location, plan.staging_dir, results, works, key)
    rewrite = dataclasses.replace(rewrite, kind=str(kind), note=selector)
    claim.check("recording its rewrite")
    rewrite_mod.carry_out(
        location, rewrite, steps, snapshot=table_commit.snapshot_rewrite, retirement=retirement
    )
    publishing = (started, time.monotonic())

    # Step 4
    record = RecomputeRecord(
        kind=kind,
        selector=selector,
        ranges=planned.ranges,
        published=tuple(sorted([*kept, *(new for _, new in rewrite.publish)])),
        removed=rewrite.retire,
        rows=sum(f.rows for r in results for f in r.staged if not f.quarantine),
        messages=sum(r.messages for r in results),
        kept=tuple(sorted(kept)),
        processor=processors.record(plan.processor),
    )
    # Microseconds: the same recompute run twice in one second is recorded twice.
    stamp = re.sub(r"[^0-9T]", "", record.written_at.split("+")[0])
    location.write_bytes_atomic(
        location.child(RECORDS_DIR, f"{stamp}-{key}.json"), record.to_json()
    )
    if claim.holds():
        location.delete_dir(staging)
    else:
        # Paused past its lease after publishing: the staging folder may now hold the
        # staging of a recompute of the same selection that took over. Its work is done
        # and recorded, so it ends as it would have, without the delete.
        log.warning(
            "%s %s: published and recorded, but another rewriter took the claim over while "
            "this one paused; its staging %s is left to that one",
            kind,
            selector,
            staging,
        )
    log.info(
        "%s %s: %d files published under new names, %d kept, %d removed",
        kind,
        selector,
        len(rewrite.publish),
        len(kept),
        len(rewrite.retire),
    )
    return RecomputeReport(record, len(works), publishing)


# A recomputed block: its partition, its offsets [lo, hi) and whose rows they are.
_Owner = tuple[TopicPartition, int, int, RangeRows]


def _owners(works: Sequence[PartitionWork], blocks: set[str]) -> dict[str, _Owner]:
    return {
        name: (w.tp, lo, hi, rows)
        for w in works
        for rows in w.rows
        for name, lo, hi in rows.blocks(w.tp)
        if name in blocks
    }


def _rewrite(
    location: Location,
    staging_dir: str,
    results: Sequence[WorkResult],
    works: Sequence[PartitionWork],
    key: str,
) -> tuple[rewrite_mod.Rewrite, list[str]]:
    """What publishing the staged files takes: the rewrite, and the visible files it keeps.

    A staged file whose bytes equal a visible file of its block and day keeps
    that file (a replay with unchanged code changes nothing); one whose block
    and day hold no file takes the plain name (unless a compaction once merged
    the block: a name is never used twice); any other gets a new name, and
    every other visible file of the recomputed blocks retires. The merged
    files holding recomputed blocks are staged again with those blocks' new
    rows (the staged files of their day go into them, not beside them).
    """
    blocks = {b for r in results for b in r.blocks}
    owners = _owners(works, blocks)
    entries = ledger_mod.Ledger(location).entries()
    grouped = group_blocks(entries)
    visible = visible_files(location)
    staged_files = sorted({f.path for r in results for f in r.staged})
    days = _touched_days(location, blocks, grouped, entries, [*visible, *staged_files])
    every_merge = table_compact.merged_blocks(location, grouped, days)
    compacted = {b for held in every_merge.values() for b in held}
    merges = {m: held for m, held in every_merge.items() if held & blocks}
    current: dict[tuple[str, str], list[str]] = {}
    merged_files: list[str] = []
    for relative in visible:
        block = rewrite_mod.block_of(relative)
        if block in blocks:
            current.setdefault((posixpath.dirname(relative), block), []).append(relative)
        elif block in merges:
            merged_files.append(relative)
    name = hashlib.sha256(f"{key} {datetime.now(UTC).isoformat()}".encode()).hexdigest()[:12]
    publish: list[tuple[str, str]] = []
    kept: list[str] = []
    retire: list[str] = []
    consumed: set[str] = set()
    for merged in merged_files:
        held = merges[rewrite_mod.block_of(merged)]
        into = [
            p
            for p in staged_files
            if posixpath.dirname(p) == posixpath.dirname(merged) and rewrite_mod.block_of(p) in held
        ]
        consumed.update(into)
        restaged = posixpath.join(staging_dir, "_merged", merged)
        schema = _merged_schema(location, staging_dir, merged, into, grouped)
        rows = table_compact.remerge(
            location,
            merged,
            restaged,
            # Every block it holds recomputed: the merged file is not read (if damaged, mended).
            replaced=None if held <= blocks else _replaced([owners[b] for b in held & blocks]),
            # Each staged file in its own schema (the one its range ran with), conformed.
            added=[read_published(location, posixpath.join(staging_dir, p)) for p in into],
            schema=schema,
        )
        if rows and location.same_bytes(location.child(restaged), location.child(merged)):
            kept.append(merged)
            continue
        if rows:
            publish.append((restaged, rewrite_mod.renamed(merged, name)))
        retire.append(merged)
    for relative in staged_files:
        if relative in consumed:
            continue
        staged = posixpath.join(staging_dir, relative)
        slot = (posixpath.dirname(relative), rewrite_mod.block_of(relative))
        same = next(
            (
                p
                for p in current.get(slot, [])
                if location.same_bytes(location.child(staged), location.child(p))
            ),
            None,
        )
        if same is not None:
            kept.append(same)
        elif not current.get(slot) and slot[1] not in compacted:  # its plain name is new
            publish.append((staged, relative))
        else:
            publish.append((staged, rewrite_mod.renamed(relative, name)))
    retire += [p for found in current.values() for p in found if p not in kept]
    rewrite = rewrite_mod.Rewrite(name, tuple(publish), tuple(sorted(retire)))
    return rewrite, kept


def _touched_days(
    location: Location,
    blocks: set[str],
    grouped: Mapping[str, frozenset[str]],
    entries: Sequence[ledger_mod.LedgerEntry],
    files: Sequence[str],
) -> set[date]:
    """The days whose merged files can hold rows of ``blocks``: a compaction merges files
    of one day into a file of that day, so these are the days any file of the blocks (or
    of a group file holding one) was ever published on, by a batch (the ledger) or an
    earlier recompute (its record: a correction's rows may fall on other days), and the
    days of ``files`` (visible and staged) of the blocks."""
    holders = blocks | {group for group, held in grouped.items() if held & blocks}
    published = [relative for entry in entries for relative in entry.files]
    published += [relative for record in records(location) for relative in record.published]
    return {
        day
        for relative in [*published, *files]
        if rewrite_mod.block_of(relative) in holders and (day := file_day(relative)) is not None
    }


def _merged_schema(
    location: Location,
    staging_dir: str,
    merged: str,
    into: Sequence[str],
    grouped: Mapping[str, frozenset[str]],
) -> pa.Schema | None:
    """The schema a file holding several blocks is staged again in; None: the output's.

    A compaction's merged file takes the output's schema. A group's file holds one live
    batch's rows, all computed with its table schema: it keeps that one (the recomputed
    rows are staged in it), so that a recompute of unchanged rows keeps its bytes; a
    group's quarantine file keeps the quarantine's.
    """
    if merged.startswith(f"{QUARANTINE_DIR}/"):
        return QUARANTINE_SCHEMA
    if rewrite_mod.block_of(merged) not in grouped:
        return None
    source = location.child(staging_dir, into[0]) if into else location.child(merged)
    return pq.read_schema(source, filesystem=location.fs)


def _replaced(owners: list[_Owner]) -> Callable[[pa.Table], pa.ChunkedArray]:
    """Which rows of a merged file the recomputed blocks replace."""

    def mask(table: pa.Table) -> pa.ChunkedArray:
        found = pc.equal(pa.repeat(pa.scalar(True), len(table)), False)
        for tp, lo, hi, rows in owners:
            found = pc.or_(found, rows.mask(table, tp, lo, hi))
        return found

    return mask


def _run_tasks(
    spark: Any, plan: RecomputePlan, works: Sequence[PartitionWork], progress: Progress | None
) -> list[WorkResult]:
    if not works:
        return []
    from app.spark.code import ship

    ship(spark)
    context = spark.sparkContext
    # The longest partitions first, so that they do not finish last.
    ordered = sorted(works, key=lambda w: -w.offsets)
    context.setJobDescription(f"tablecast recompute: {len(ordered)} partition tasks")
    rdd = context.parallelize(ordered, len(ordered)).map(functools.partial(run_work, plan))
    stop = threading.Event()
    watcher = None
    if progress is not None:
        watcher = threading.Thread(
            target=_watch, args=(context, len(ordered), progress, stop), daemon=True
        )
        watcher.start()
    try:
        with worker_errors.rebuilt():  # a task's, raised in an executor
            results: list[WorkResult] = rdd.collect()
    finally:
        stop.set()
        if watcher is not None:
            watcher.join()
    if progress is not None:
        progress(len(ordered), len(ordered))
    return results


def _watch(context: Any, total: int, progress: Progress, stop: threading.Event) -> None:
    """Report finished tasks every few seconds while the job runs."""
    tracker = context.statusTracker()
    while not stop.wait(2.0):
        done = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
        progress(min(done, total), total)
