"""The executor half of the engine: one task per topic-partition range, or per group of them.

Spark runs :class:`PartitionTask` with ``mapInArrow`` over a micro-batch's
ranges, one task per Spark partition of the source, with no shuffle: a
topic-partition, or a group of small ones
(:func:`~app.sources.stream.task_groups`), run one after another in name
order. For each of its partitions a task:

1. reads the records of the range with the reader the driver planned
   (:mod:`app.sources.ranges`: the records go from the archive or Kafka
   straight into the worker that processes them; a source that gives
   records is taken as it is), in offset order (it sorts them if a source
   ever gives them otherwise, and refuses records outside the range);
2. loads the state version the driver named, offset and digest (from the
   worker's cache when it holds that very version), after checking that its
   records are those an earlier pass of the batch read. The load starts
   before the first record arrives, on a thread (:class:`_EarlyLoad`): the
   task knows its partitions from its Spark partition's index
   (:func:`~app.sources.stream.task_groups`), so on a new Python worker
   the state's read (on the cluster: libhdfs starting its JVM, then HDFS)
   runs while the source's worker makes its consumer, signs in and fetches,
   instead of after the last record;
3. runs the :class:`~app.engine.machine.PartitionMachine` over the records,
   a slice at a time, staging output and quarantine files as they fill; a
   group's partitions stage theirs together, one file per day after the
   last of them (:func:`~app.engine.segments.group_block`), rows in
   topic-partition and offset order;
4. saves the state at the range's end (not when a strict run found a
   violation: that batch fails), and keeps it in the worker's cache, frozen
   out of the garbage collector's walks (:mod:`app.engine.gc_pause`);
5. returns report rows (:mod:`app.engine.reports`), never output rows: among
   them its partition's summary, with the version it saved, its records'
   fingerprint and the records each source tier served; violations as a
   count and a sample (every violating record is in a quarantine file);
   under the integrity classes ordered and once, the messages dropped and
   the seqs missing as counts, and where once found its gaps as a sample.

Everything a task does depends only on the plan and the records, so a
retried or speculative attempt stages the same files and saves the same
state.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.code_version import check_code, code_digest
from app.contract.offsets import TopicPartition
from app.contract.processor import Processor
from app.engine.gc_pause import cyclic_gc_paused
from app.engine.machine import (
    IntegrityMode,
    PartitionMachine,
    PartitionResult,
    RecordColumns,
    Rules,
)
from app.engine.output import RowColumns, quarantine_table
from app.engine.reports import PartitionSummary, Reports, StagedFile, to_batch
from app.engine.segments import Segment, group_block, plan_segments
from app.engine.state import PartitionState, StateVersion
from app.engine.store import StateCache, StateStore
from app.engine.writer import QUARANTINE_DIR, DayLayout, stage_table
from app.errors import DataLossError, StateError, TablecastError
from app.sources import ranges
from app.sources.records import served_counts
from app.sources.stream import task_groups
from app.storage import Location, resolve

# Records converted to Python objects at a time: bounds the task's memory.
SLICE = 8192
# Partitions whose last state a Python worker keeps between tasks.
CACHE_CAPACITY = int(os.environ.get("TABLECAST_STATE_CACHE_PARTITIONS", "64"))
_CACHE = StateCache(CACHE_CAPACITY)
# Violations a task reports one by one; the rest are counted (and quarantined in resync).
VIOLATION_SAMPLE = 20


@dataclass(frozen=True)
class BatchPlan:
    """Everything the tasks of one micro-batch need (pickled to the executors)."""

    processor: Processor[Any]
    rules: Rules
    state_root: str
    output_uri: str
    staging_dir: str  # relative to the output
    start: Mapping[TopicPartition, int]  # a partition absent here is new in this batch
    end: Mapping[TopicPartition, int]
    versions: Mapping[TopicPartition, StateVersion]  # the state version each partition loads
    foreign: Mapping[TopicPartition, Mapping[str, TopicPartition]] = field(default_factory=dict)
    # The records' fingerprints of the batch's first pass: a later pass must read the same.
    records: Mapping[TopicPartition, str] = field(default_factory=dict)
    code_digest: str = field(default_factory=code_digest)  # the driver's code
    # The source's groupOffsets: which partitions share a task (app.sources.stream.task_groups).
    group_offsets: int = 0
    # The output's layout of days, read once on the driver (None: each task reads its record).
    layout: DayLayout | None = None


class PartitionTask:
    """The ``mapInArrow`` function of one micro-batch."""

    def __init__(self, plan: BatchPlan) -> None:
        self.plan = plan

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        check_code(self.plan.code_digest)
        index = _spark_partition()
        in_worker = index is not None  # a Spark worker: it keeps the state it saves
        early = self._load_early(index)
        try:
            by_tp: dict[TopicPartition, list[pa.RecordBatch]] = {}
            for batch in _records(batches):
                for tp, part in _split_by_partition(batch):
                    by_tp.setdefault(tp, []).append(part)
            # A group's partitions share one file per day (app.engine.segments).
            group = (
                _GroupFiles(self.plan.layout)
                if self.plan.group_offsets > 0 and len(by_tp) > 1
                else None
            )
            for tp in sorted(by_tp):
                loaded = early.take(tp) if early is not None else None
                with cyclic_gc_paused(freeze=in_worker):
                    rows = self._run(tp, pa.Table.from_batches(by_tp[tp]), loaded, group)
                if rows:
                    yield to_batch(rows)
            if group is not None:
                rows = group.stage(resolve(self.plan.output_uri), self.plan.staging_dir)
                if rows:
                    yield to_batch(rows)
        finally:
            if early is not None:
                early.wait()  # a partition without records: its state is not used

    def _load_early(self, index: int | None) -> _EarlyLoad | None:
        """Start loading the states of the partitions Spark's ``index`` reads, if it has any."""
        if index is None:
            return None
        plan = self.plan
        groups = task_groups(plan.start, plan.end, plan.group_offsets)
        if not 0 <= index < len(groups):
            return None
        members = [(tp, plan.start[tp]) for tp in groups[index] if tp in plan.start]
        if not members:
            return None
        return _EarlyLoad(
            members, lambda tp, start: self._load(StateStore(plan.state_root), tp, start)
        )

    def _run(
        self,
        tp: TopicPartition,
        records: pa.Table,
        early: _Loaded | None = None,
        group: _GroupFiles | None = None,
    ) -> list[dict[str, Any]]:
        plan = self.plan
        reports = Reports(tp)
        if tp not in plan.end:
            raise TablecastError(f"{tp} is not part of this micro-batch (its end offsets)")
        end = plan.end[tp]
        records = _in_offset_order(records)
        offsets = records.column("offset")
        first, last = offsets[0].as_py(), offsets[-1].as_py()
        start = plan.start.get(tp, first)
        if first < start or last >= end:
            raise TablecastError(
                f"{tp}: the source gave offsets {first} to {last}, outside the micro-batch's "
                f"range {start} to {end - 1}"
            )

        read = records_fingerprint(records)
        if tp in plan.records and plan.records[tp] != read:
            raise DataLossError(
                f"the source gave other records for {tp.key()} offsets {start} to {end - 1} than "
                "in the micro-batch's first pass: it changed between passes (retention or "
                "compaction); the batch is redone from the source",
                topic=tp.topic,
                partition=tp.partition,
                offset=start,
            )
        store = StateStore(plan.state_root)
        if early is not None and early.start == start:
            state, cache = early.result()
        else:
            state, cache = self._load(store, tp, start)
        machine = PartitionMachine(plan.processor, plan.rules, plan.foreign.get(tp))
        location = resolve(plan.output_uri)
        result = PartitionResult(RowColumns(tp, plan.processor.output, plan.processor.name))
        offsets_np = records.column("offset").to_numpy()
        for segment in plan_segments(offsets_np, [(start, end)], tp):
            run_segment(machine, state, records, segment, result)
            if segment.name is not None and group is not None:
                group.add(result, segment.name)
            elif segment.name is not None:
                for staged in stage_segment(
                    location, plan.staging_dir, result, segment.name, plan.layout
                ):
                    reports.file(staged.path, staged.rows, staged.bytes, staged.quarantine)
            if result.violations and plan.rules.mode is IntegrityMode.STRICT:
                break

        saved: StateVersion | None = None
        size = 0
        if not (result.violations and plan.rules.mode is IntegrityMode.STRICT):
            state.offset = end
            saved, size = store.save(state, plan.processor)
            _CACHE.put(plan.state_root, saved, state)
        for violation in result.violations[:VIOLATION_SAMPLE]:
            reports.violation(violation)
        for event in result.trace:
            reports.trace(event)
        for claim in result.claims:
            reports.claim(claim)
        for drop in result.dropped:
            reports.dropped(drop)
        for gap in result.gap_reports[:VIOLATION_SAMPLE]:
            reports.gap(gap)
        summary = PartitionSummary(
            tp=tp,
            start=start,
            end=-1 if saved is None else saved.offset,
            messages=result.messages,
            sessions=len(state.sessions),
            state_bytes=size,
            cache=cache,
            served=served_counts(records),
            digest="" if saved is None else saved.digest,
            records=read,
            violations=len(result.violations),
            repeats=result.repeats,
            gaps=result.gaps,
        )
        reports.partition(summary)
        return reports.rows

    def _load(
        self, store: StateStore, tp: TopicPartition, start: int
    ) -> tuple[PartitionState[Any], str]:
        version = self.plan.versions.get(tp)
        if version is None:
            return PartitionState.empty(tp, start), "new"
        if version.offset > start:
            raise StateError(
                f"state of {tp.key()} version {version.offset} is past the micro-batch's start "
                f"{start}",
                topic=tp.topic,
                partition=tp.partition,
                version=version.offset,
                path=store.uri(tp, version),
            )
        cached = _CACHE.take(self.plan.state_root, tp, version)
        state = cached if cached is not None else store.load(tp, version, self.plan.processor)
        # A version older than the start: the partition had no records in between.
        state.offset = start
        return state, "hit" if cached is not None else "miss"


@dataclass
class _Loaded:
    """One partition's state as loaded early, or what failed."""

    start: int
    loaded: tuple[PartitionState[Any], str] | None = None
    error: BaseException | None = None

    def result(self) -> tuple[PartitionState[Any], str]:
        if self.error is not None:
            raise self.error
        assert self.loaded is not None
        return self.loaded


class _EarlyLoad:
    """The states of a task's partitions, loaded in order on a thread while it waits for records."""

    def __init__(
        self,
        members: list[tuple[TopicPartition, int]],
        load: Callable[[TopicPartition, int], tuple[PartitionState[Any], str]],
    ) -> None:
        self._members = members
        self._load = load
        self._done: dict[TopicPartition, threading.Event] = {
            tp: threading.Event() for tp, _ in members
        }
        self._loaded: dict[TopicPartition, _Loaded] = {}
        self._thread = threading.Thread(target=self._run, name="tablecast-state-load", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for tp, start in self._members:
            found = _Loaded(start)
            try:
                found.loaded = self._load(tp, start)
            except BaseException as exc:  # raised where the state is used, in the task
                found.error = exc
            self._loaded[tp] = found
            self._done[tp].set()

    def take(self, tp: TopicPartition) -> _Loaded | None:
        """``tp``'s state once loaded; None: not one of the task's planned partitions."""
        done = self._done.get(tp)
        if done is None:
            return None
        done.wait()
        return self._loaded.pop(tp)

    def wait(self) -> None:
        self._thread.join()


class _GroupFiles:
    """The rows of a group's partitions, staged together as one file per day."""

    def __init__(self, layout: DayLayout | None) -> None:
        self.layout = layout
        self.first: str | None = None  # the first partition's block
        self.last: TopicPartition | None = None
        self.rows: list[pa.Table] = []
        self.quarantined: list[pa.Table] = []

    def add(self, result: PartitionResult, name: str) -> None:
        """Take the segment's rows and quarantined records out of ``result``."""
        if not name.endswith("-000"):
            raise AssertionError(f"a group's partition has more than one block: {name}")
        tp = result.rows.tp
        self.first = self.first or name
        self.last = tp
        if len(result.rows):
            self.rows.append(result.rows.to_table())
        if result.quarantined:
            self.quarantined.append(quarantine_table(result.quarantined))
        result.rows = result.rows.emptied()
        result.quarantined = []

    def stage(self, location: Location, staging_dir: str) -> list[dict[str, Any]]:
        """Stage the rows as the group's files; their report rows."""
        if self.first is None or self.last is None:
            return []
        name = group_block(self.first, self.last)
        staged: list[StagedFile] = []
        if self.rows:
            rows = pa.concat_tables(self.rows)
            staged += stage_table(location, staging_dir, "", rows, "ts", name, self.layout)
        if self.quarantined:
            held = pa.concat_tables(self.quarantined)
            staged += stage_table(
                location, staging_dir, QUARANTINE_DIR, held, "timestamp", name, self.layout
            )
        reports = Reports(self.last)
        for f in staged:
            reports.file(f.path, f.rows, f.bytes, f.quarantine)
        return reports.rows


def _spark_partition() -> int | None:
    """The index of the Spark partition this task runs for; None outside a Spark task."""
    from pyspark import TaskContext

    context = TaskContext.get()
    return None if context is None else context.partitionId()


def records_fingerprint(records: pa.Table) -> str:
    """What identifies a range's records cheaply: their offsets, and their keys' and values' sizes.

    Retention and compaction remove offsets, so two reads of a range that
    differ differ here (Kafka never changes a record in place).
    """
    digest = hashlib.sha256(records.column("offset").to_numpy().tobytes())
    for name in ("key", "value"):
        sizes = pc.binary_length(records.column(name)).fill_null(-1)
        digest.update(sizes.to_numpy().tobytes())
    return digest.hexdigest()


def run_segment(
    machine: PartitionMachine[Any],
    state: PartitionState[Any],
    records: pa.Table,
    segment: Segment,
    result: PartitionResult,
) -> None:
    """Apply one segment's records, a slice at a time (the slice bounds the task's memory)."""
    for lo in range(segment.lo, segment.hi, SLICE):
        batch = records.slice(lo, min(SLICE, segment.hi - lo))
        machine.run(state, RecordColumns.from_arrow(batch), result)
        if result.violations and machine.rules.mode is IntegrityMode.STRICT:
            return


def stage_segment(
    location: Location,
    staging_dir: str,
    result: PartitionResult,
    name: str,
    layout: DayLayout | None = None,
) -> list[StagedFile]:
    """Stage the segment's rows and quarantined records as its files (in the output's
    ``layout``; None: its record, read here); empty the result's."""
    staged = stage_table(location, staging_dir, "", result.rows.to_table(), "ts", name, layout)
    if result.quarantined:
        table = quarantine_table(result.quarantined)
        staged += stage_table(
            location, staging_dir, QUARANTINE_DIR, table, "timestamp", name, layout
        )
    result.rows = result.rows.emptied()
    result.quarantined = []
    return staged


def _records(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The records of the task's input: records as given, or each range's as its reader reads them.

    The job's source gives ranges (:mod:`app.sources.ranges`): the records
    are read here, in the worker that processes them, and never pass
    through Spark's JVM.
    """
    for batch in batches:
        if ranges.is_ranges(batch):
            for planned in ranges.planned(batch):
                yield from planned.reader.read()
        else:
            yield batch


def _split_by_partition(batch: pa.RecordBatch) -> Iterator[tuple[TopicPartition, pa.RecordBatch]]:
    """The batch per topic-partition (our sources give one per Spark partition)."""
    if not batch.num_rows:
        return
    topics, partitions = batch.column("topic"), batch.column("partition")
    topic_range, partition_range = pc.min_max(topics), pc.min_max(partitions)
    if (
        not topics.null_count
        and topic_range["min"] == topic_range["max"]
        and partition_range["min"] == partition_range["max"]
    ):
        yield TopicPartition(topics[0].as_py(), partitions[0].as_py()), batch
        return
    pairs = pa.table({"t": topics, "p": partitions}).group_by(["t", "p"]).aggregate([]).to_pylist()
    for pair in pairs:
        mask = pc.and_(pc.equal(topics, pair["t"]), pc.equal(partitions, pair["p"]))
        yield TopicPartition(pair["t"], pair["p"]), batch.filter(mask)


def _in_offset_order(records: pa.Table) -> pa.Table:
    """The records sorted by offset (the contract: never trust arrival order)."""
    offsets = records.column("offset").to_numpy()
    if len(offsets) > 1 and not bool((offsets[1:] > offsets[:-1]).all()):
        records = records.sort_by("offset")
        sorted_offsets = records.column("offset").to_numpy()
        if bool((sorted_offsets[1:] == sorted_offsets[:-1]).any()):
            raise TablecastError("the source gave the same offset twice in one micro-batch")
    return records
