"""The executor half of a recompute: one task per :class:`~app.recompute.plan.PartitionWork`.

A task reads its partition from the archive, a batch at a time, from the
epoch's start with empty state, runs the live job's
:class:`~app.engine.machine.PartitionMachine` over every record and stages
the files of the ranges it recomputes under the recompute's staging
directory, cut exactly as the live job cuts them
(:func:`~app.engine.segments.plan_segments`). Records before and between
those ranges only rebuild the state: their rows are dropped. Memory is
bounded by one block's rows, as in the live job.

A replay with a time window stages only the blocks holding a record whose
timestamp falls in it; a correction stages every block of its ranges. A
range a repair cut short stages only its own rows
(:class:`~app.recompute.plan.RangeRows`): those the repair left.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from app.code_version import check_code, code_digest
from app.contract.offsets import TopicPartition
from app.contract.processor import Processor
from app.contract.schema import TableSchema
from app.contract.table_processor import TableProcessor
from app.engine.machine import IntegrityMode, PartitionMachine, PartitionResult, Rules
from app.engine.output import RowColumns, quarantine_table
from app.engine.reports import StagedFile
from app.engine.segments import OFFSETS_PER_FILE, Segment, plan_segments
from app.engine.state import PartitionState
from app.engine.task import run_segment, stage_segment
from app.engine.writer import QUARANTINE_DIR, stage_table
from app.errors import Violation
from app.recompute.plan import ForeignRange, PartitionWork, RangeRows, SchemaRange
from app.sources.archive import read_range
from app.storage import Location, resolve


@dataclass(frozen=True)
class RecomputePlan:
    """What every task of one recompute shares (pickled to the executors)."""

    processor: Processor[Any]
    rules: Rules
    archive_uri: str
    output_uri: str
    staging_dir: str  # relative to the output
    window_ms: tuple[int, int] | None = None  # replay: stage blocks with a record in it
    # The table schemas the live job's ranges ran with, by digest (each work's ``schemas``
    # says which range ran with which); {}: the processor's, for every offset.
    schemas: Mapping[str, TableSchema] = field(default_factory=dict)
    code_digest: str = field(default_factory=code_digest)


@dataclass
class WorkResult:
    """What one task did (collected on the driver)."""

    tp: TopicPartition
    messages: int = 0
    staged: list[StagedFile] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # block names whose files it replaces
    violations: list[Violation] = field(default_factory=list)


def run_work(plan: RecomputePlan, work: PartitionWork) -> WorkResult:
    check_code(plan.code_digest)
    tp = work.tp
    output = resolve(plan.output_uri)
    processors = _processors(plan)
    machine = PartitionMachine(plan.processor, plan.rules)
    state: PartitionState[Any] = PartitionState.empty(tp, work.begin)
    result = PartitionResult(RowColumns(tp, plan.processor.output, plan.processor.name))
    done = WorkResult(tp)
    strict = plan.rules.mode is IntegrityMode.STRICT
    block: str | None = None  # the block whose rows ``result`` holds
    wanted = False  # the block holds a record in the window

    owned = work.owned()

    def finish_block() -> None:
        if block is not None and (plan.window_ms is None or wanted):
            rows = owned.get(block.rsplit("-", 1)[0])
            if rows is None or rows.whole:
                done.staged += stage_segment(output, plan.staging_dir, result, block)
            else:
                done.staged += _stage_own(output, plan.staging_dir, result, block, rows)
            done.blocks.append(block)
        else:  # rows of records read only to rebuild the state
            result.rows = RowColumns(tp, machine.processor.output, machine.processor.name)
            result.quarantined = []

    archive = resolve(plan.archive_uri)
    for batch in read_range(archive, list(work.files), work.begin, work.read_end):
        records = pa.Table.from_batches([batch])
        offsets = records.column("offset").to_numpy()
        for segment in plan_segments(offsets, work.ranges, tp):
            if segment.name != block:
                finish_block()
                block, wanted = segment.name, False
            for piece, foreign in _with_foreign(offsets, segment, work.foreign):
                machine.foreign = foreign
                for part in _by_schema(offsets, piece, work.schemas):
                    at = int(offsets[part.lo])
                    _use_schema(machine, state, result, processors, work, at, block is None)
                    run_segment(machine, state, records, part, result)
                    if result.violations and strict:
                        done.messages, done.violations = result.messages, list(result.violations)
                        return done
            if plan.window_ms is not None and block is not None and not wanted:
                wanted = _in_window(
                    records.slice(segment.lo, segment.hi - segment.lo), plan.window_ms
                )
    finish_block()
    done.messages, done.violations = result.messages, list(result.violations)
    return done


def _stage_own(
    location: Location, staging_dir: str, result: PartitionResult, name: str, rows: RangeRows
) -> list[StagedFile]:
    """Stage the block's own rows and quarantined records only (a range a repair cut)."""
    tp = result.rows.tp
    everything = (0, rows.end + OFFSETS_PER_FILE)  # the block's offsets are all in it
    table = result.rows.to_table()
    staged = stage_table(
        location, staging_dir, "", table.filter(rows.mask(table, tp, *everything)), "ts", name
    )
    if result.quarantined:
        held = quarantine_table(result.quarantined)
        held = held.filter(rows.mask(held, tp, *everything))
        staged += stage_table(location, staging_dir, QUARANTINE_DIR, held, "timestamp", name)
    result.rows = result.rows.emptied()
    result.quarantined = []
    return staged


def _processors(plan: RecomputePlan) -> dict[str, Processor[Any]]:
    """A processor per table schema the ranges ran with: the plan's for its own (the built-in
    processor's; a user's processor gives no schemas, and runs every range itself)."""
    own = plan.processor.output.digest
    return {
        digest: plan.processor if digest == own else TableProcessor(schema)
        for digest, schema in plan.schemas.items()
    }


def _use_schema(
    machine: PartitionMachine[Any],
    state: PartitionState[Any],
    result: PartitionResult,
    processors: Mapping[str, Processor[Any]],
    work: PartitionWork,
    offset: int,
    unstaged: bool,
) -> None:
    """Apply the records from ``offset`` on with the schema the live job read them with.

    Schemas change only where a live batch began (a restart), where a staged block
    begins too; the sessions' tables carry on, read as the new schema reads a state
    saved before (its added columns null). ``unstaged``: the rows held so far only
    rebuilt the state, and are dropped.
    """
    found = next((r.digest for r in work.schemas if r.start <= offset < r.end), None)
    processor = processors.get(found) if found is not None else None
    if processor is None or processor is machine.processor:
        return
    machine.switch(state, processor)
    if len(result.rows) and not unstaged:
        raise AssertionError(f"{work.tp}: the table schema changes inside a block at {offset}")
    result.rows = RowColumns(result.rows.tp, processor.output, processor.name)


def _by_schema(
    offsets: np.ndarray, piece: Segment, schemas: tuple[SchemaRange, ...]
) -> Iterator[Segment]:
    """The piece cut where the live job's table schema changes (``schemas`` in offset order)."""
    lo = piece.lo
    changes = [b.start for a, b in itertools.pairwise(schemas) if a.digest != b.digest]
    for cut in changes:
        at = int(np.searchsorted(offsets, cut))
        if lo < at < piece.hi:
            yield Segment(lo, at, piece.name)
            lo = at
    if lo < piece.hi:
        yield Segment(lo, piece.hi, piece.name)


def _with_foreign(
    offsets: np.ndarray, segment: Segment, foreign: tuple[ForeignRange, ...]
) -> Iterator[tuple[Segment, dict[str, TopicPartition]]]:
    """The segment cut where the live job's rule 6 owners change, with the owners of each
    piece: the sessions the batch of its offsets treated as another partition's."""
    lo = segment.lo
    while lo < segment.hi:
        at = int(offsets[lo])
        found = next((f for f in foreign if f.start <= at < f.end), None)
        until: int | None = None
        owners: dict[str, TopicPartition] = {}
        if found is not None:
            until, owners = found.end, dict(found.sessions)
        else:
            until = min((f.start for f in foreign if f.start > at), default=None)
        hi = segment.hi if until is None else min(segment.hi, int(np.searchsorted(offsets, until)))
        yield Segment(lo, hi, segment.name), owners
        lo = hi


def _in_window(records: pa.Table, window_ms: tuple[int, int]) -> bool:
    """Whether a record's timestamp falls in ``[since, until)``."""
    micros = records.column("timestamp").cast(pa.int64())
    since, until = window_ms
    inside = pc.and_(pc.greater_equal(micros, since * 1000), pc.less(micros, until * 1000))
    return bool(pc.any(inside).as_py())
