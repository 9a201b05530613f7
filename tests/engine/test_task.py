"""The partition task without Spark: staged files, saved state, redo, cache, refusals."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import TaskContext
from pyspark.sql.streaming.datasource import ReadAllAvailable

from app.contract.offsets import TopicPartition
from app.contract.table_processor import TableProcessor
from app.engine import task as task_mod
from app.engine.machine import IntegrityMode, Rules
from app.engine.reports import BatchOutcome
from app.engine.state import StateVersion
from app.engine.store import StateCache, StateStore
from app.engine.task import BatchPlan, PartitionTask
from app.engine.writer import DayLayout, record_layout
from app.errors import TablecastError
from app.sources import archive, ranges
from app.sources.archive import ArchiveBackend
from app.sources.stream import OffsetStreamReader
from app.storage import resolve
from app.tools import generate as gen
from app.tools.verify import expected_output

SPEC = gen.CaptureSpec(topics=1, partitions=1, sessions=4, updates=40, records_per_file=50, seed=3)
TP = TopicPartition("sensor-0", 0)


@pytest.fixture
def capture(tmp_path: Path) -> tuple[str, int]:
    uri = str(tmp_path / "archive")
    gen.write_archive(gen.generate(SPEC), uri, SPEC)
    index = archive.scan(resolve(uri), "^sensor-.+")
    return uri, index.latest(TP)


def records(uri: str, start: int, end: int) -> list[pa.RecordBatch]:
    location = resolve(uri)
    index = archive.scan(location, "^sensor-.+")
    table = pa.Table.from_batches(
        archive.read_range(location, index.covering(TP, start, end), start, end)
    )
    batches: list[pa.RecordBatch] = table.to_batches(max_chunksize=17)  # as Spark cuts them
    return batches


def plan(
    tmp_path: Path, start: int | None, end: int, version: StateVersion | None, **kw: object
) -> BatchPlan:
    return BatchPlan(
        processor=TableProcessor(),
        rules=Rules(**kw),  # type: ignore[arg-type]
        state_root=str(tmp_path / "ckpt" / "state"),
        output_uri=str(tmp_path / "out"),
        staging_dir="_tablecast/staging/k",
        start={} if start is None else {TP: start},
        end={TP: end},
        versions={} if version is None else {TP: version},
    )


def run(p: BatchPlan, batches: list[pa.RecordBatch]) -> BatchOutcome:
    return BatchOutcome.parse(r for b in PartitionTask(p)(iter(batches)) for r in b.to_pylist())


def staged_rows(tmp_path: Path) -> pa.Table:
    files = sorted((tmp_path / "out" / "_tablecast" / "staging" / "k").rglob("part-*.parquet"))
    tables = [pq.read_table(f, partitioning=None) for f in files if "_quarantine" not in str(f)]
    return pa.concat_tables(tables)


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@contextmanager
def spark_task(partition: int) -> Iterator[None]:
    """This process as Spark's Python worker makes it for a task of ``partition``."""
    TaskContext._setTaskContext(None)
    TaskContext(
        stageId=1,
        partitionId=partition,
        attemptNumber=0,
        taskAttemptId=1,
        cpus=1,
        resources={},
        localProperties={},
    )
    try:
        yield
    finally:
        TaskContext._setTaskContext(None)


def saved(outcome: BatchOutcome) -> StateVersion:
    version = outcome.partitions[TP].version
    assert version is not None
    return version


def test_two_ranges_produce_the_expected_rows_and_state(
    tmp_path: Path, capture: tuple[str, int]
) -> None:
    uri, last = capture
    middle = last // 2
    first = run(plan(tmp_path, None, middle, None), records(uri, 0, middle))
    assert first.partitions[TP].end == middle and first.partitions[TP].cache == "new"
    assert StateStore(str(tmp_path / "ckpt" / "state")).versions(TP) == [saved(first)]
    names = {f.path.rsplit("/", 1)[-1] for f in first.files}
    assert names == {f"part-sensor-0-0-{0:020d}-{middle:020d}-000.parquet"}
    second = run(plan(tmp_path, middle, last, saved(first)), records(uri, middle, last))
    assert second.violations == [] and second.partitions[TP].end == last
    order = [("offset", "ascending"), ("row_id", "ascending"), ("deleted", "ascending")]
    expected = expected_output(uri, "^sensor-.+").rows
    assert staged_rows(tmp_path).sort_by(order).to_pylist() == expected.sort_by(order).to_pylist()


def test_a_task_given_the_sources_ranges_reads_them_and_stages_what_records_stage(
    tmp_path: Path, capture: tuple[str, int]
) -> None:
    uri, last = capture
    by_records = run(plan(tmp_path, 0, last, None), records(uri, 0, last))
    given = digests(tmp_path / "out") | digests(tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "out")
    shutil.rmtree(tmp_path / "ckpt")
    # What the job's source gives Spark: one row per range, the planned reader inside.
    reader = OffsetStreamReader(
        ArchiveBackend(uri, "^sensor-.+"), max_offsets=0, starting={}, deliver=ranges.RANGES
    )
    start = reader.initialOffset()
    parts = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    rows = [batch for part in parts for batch in reader.read(part)]
    assert [b.num_rows for b in rows] == [1] and rows[0].schema == ranges.SCHEMA
    by_ranges = run(plan(tmp_path, 0, last, None), rows)
    # The same summary, with the tier that served the records (the reader adds it).
    assert by_ranges.partitions[TP] == replace(by_records.partitions[TP], served={"archive": last})
    assert by_ranges.messages == last == by_records.messages
    assert digests(tmp_path / "out") | digests(tmp_path / "ckpt") == given


def clear_staging(tmp_path: Path) -> None:
    shutil.rmtree(tmp_path / "out" / "_tablecast" / "staging", ignore_errors=True)


def test_a_redone_range_stages_identical_files_and_state_on_a_cold_worker(
    tmp_path: Path, capture: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, last = capture
    first = run(plan(tmp_path, None, 60, None), records(uri, 0, 60))
    p = plan(tmp_path, 60, last, saved(first))  # the redone range loads a version
    clear_staging(tmp_path)
    done = run(p, records(uri, 60, last))
    assert done.partitions[TP].cache == "hit" and done.files  # this worker had it
    before = digests(tmp_path)
    clear_staging(tmp_path)  # the redo must stage every file again
    monkeypatch.setattr(task_mod, "_CACHE", StateCache(8))  # another worker: nothing cached
    redone = run(p, records(uri, 60, last))
    assert redone.partitions[TP].cache == "miss" and saved(redone) == saved(done)
    assert digests(tmp_path) == before


def test_the_next_range_takes_the_state_from_the_workers_cache(
    tmp_path: Path, capture: tuple[str, int]
) -> None:
    uri, last = capture
    first = run(plan(tmp_path, None, 60, None), records(uri, 0, 60))
    again = run(plan(tmp_path, 60, last, saved(first)), records(uri, 60, last))
    assert again.partitions[TP].cache == "hit"
    # The cache gave up its state to the task: a retry of the same range loads the file.
    retry = run(plan(tmp_path, 60, last, saved(first)), records(uri, 60, last))
    assert retry.partitions[TP].cache == "miss" and saved(retry) == saved(again)


def test_records_out_of_offset_order_are_put_in_order(
    tmp_path: Path, capture: tuple[str, int]
) -> None:
    uri, last = capture
    ordered = run(plan(tmp_path, None, last, None), records(uri, 0, last))
    rows = staged_rows(tmp_path)
    shuffled = list(reversed(records(uri, 0, last)))
    again = run(plan(tmp_path, None, last, None), shuffled)
    assert again.rows == ordered.rows and staged_rows(tmp_path).equals(rows)


def test_records_outside_the_range_are_refused(tmp_path: Path, capture: tuple[str, int]) -> None:
    uri, _ = capture
    with pytest.raises(TablecastError, match="outside the micro-batch's range 10 to 19"):
        run(plan(tmp_path, 10, 20, None), records(uri, 5, 20))


def test_a_strict_violation_saves_no_state(tmp_path: Path) -> None:
    spec = gen.CaptureSpec(
        topics=1, partitions=1, sessions=2, updates=20, seed=3, faults=(gen.Fault.SEQ_GAP,)
    )
    uri = str(tmp_path / "archive")
    capture = gen.generate(spec)
    gen.write_archive(capture, uri, spec)
    last = capture.messages
    outcome = run(plan(tmp_path, None, last, None), records(uri, 0, last))
    fault = capture.faults[0]
    assert [(v.offset, int(v.rule)) for v in outcome.violations] == [(fault.offset, 2)]
    assert outcome.partitions[TP].end == -1
    assert StateStore(str(tmp_path / "ckpt" / "state")).versions(TP) == []
    resync = run(plan(tmp_path, None, last, None, mode=IntegrityMode.RESYNC), records(uri, 0, last))
    assert resync.quarantined >= 1 and resync.partitions[TP].end == last


def test_a_spark_task_starts_loading_its_state_before_its_first_record_arrives(
    tmp_path: Path, capture: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a new worker the state's read overlaps the source's consumer, sign-in and fetch.

    The stand-in source gives its first record only once the task has asked for its state
    (the worker's cache counts the asking), or after 10 s: a task that loads its state
    only after its records have come asks too late.
    """
    import time

    uri, last = capture
    version = saved(run(plan(tmp_path, None, 60, None), records(uri, 0, 60)))
    cache = StateCache(8)
    monkeypatch.setattr(task_mod, "_CACHE", cache)  # a new worker: nothing cached
    asked_before_the_first_record: list[bool] = []

    def source() -> Iterator[pa.RecordBatch]:
        deadline = time.monotonic() + 10
        while not cache.misses and time.monotonic() < deadline:
            time.sleep(0.01)
        asked_before_the_first_record.append(cache.misses == 1)
        yield from records(uri, 60, last)

    with spark_task(partition=0):  # the micro-batch's first partition
        p = plan(tmp_path, 60, last, version)
        outcome = BatchOutcome.parse(r for b in PartitionTask(p)(source()) for r in b.to_pylist())
    assert asked_before_the_first_record == [True]
    assert outcome.partitions[TP].cache == "miss" and outcome.partitions[TP].end == last
    assert saved(outcome).offset == last and (cache.hits, cache.misses) == (0, 1)


def _tracked_ids() -> set[int]:
    import gc

    return {id(o) for o in gc.get_objects()}  # the generations the collector walks


def test_a_spark_task_freezes_the_state_it_caches_and_collects_its_garbage_first(
    tmp_path: Path, capture: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark's worker collects after every task: the cached state must not be walked again.

    A processor that leaves one reference cycle per snapshot shows the collection
    before the freeze: the cycles are gone, not frozen for the worker's life.
    """
    import gc
    import weakref

    uri, last = capture
    cache = StateCache(8)
    monkeypatch.setattr(task_mod, "_CACHE", cache)
    cycles: list[weakref.ref[object]] = []

    class Cyclic(TableProcessor):
        def apply(self, state, message):  # type: ignore[no-untyped-def]
            class Node:
                pass

            node = Node()
            node.me = node  # type: ignore[attr-defined]
            cycles.append(weakref.ref(node))
            return super().apply(state, message)

    try:
        with spark_task(partition=0):
            p = replace(plan(tmp_path, None, last, None), processor=Cyclic())
            outcome = BatchOutcome.parse(
                r for b in PartitionTask(p)(iter(records(uri, 0, last))) for r in b.to_pylist()
            )
            assert gc.isenabled()
            state = cache.take(p.state_root, TP, saved(outcome))
            assert state is not None and state.sessions
            walked = _tracked_ids()
            kept = [state.sessions, *state.sessions.values()]
            assert not any(id(o) in walked for o in kept), "the cached state is frozen"
            assert cycles and all(ref() is None for ref in cycles), "cycles collected, not frozen"
    finally:
        gc.unfreeze()  # this test process is not a worker


def test_outside_a_spark_task_nothing_is_frozen(tmp_path: Path, capture: tuple[str, int]) -> None:
    import gc

    uri, last = capture
    frozen = gc.get_freeze_count()
    run(plan(tmp_path, None, last, None), records(uri, 0, last))
    assert gc.get_freeze_count() == frozen and gc.isenabled()


def test_a_groups_partitions_are_staged_as_one_file_a_day_and_a_redo_stages_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = gen.CaptureSpec(topics=3, partitions=1, sessions=6, updates=20, seed=4)
    uri = str(tmp_path / "archive")
    gen.write_archive(gen.generate(spec), uri, spec)
    location = resolve(uri)
    index = archive.scan(location, "^sensor-.+")
    tps = sorted(index.files)
    ends = {tp: index.latest(tp) for tp in tps}
    batches = [
        b
        for tp in tps
        for b in archive.read_range(location, index.covering(tp, 0, ends[tp]), 0, ends[tp])
    ]
    group = BatchPlan(
        processor=TableProcessor(),
        rules=Rules(),
        state_root=str(tmp_path / "ckpt" / "state"),
        output_uri=str(tmp_path / "out"),
        staging_dir="_tablecast/staging/k",
        start={},
        end=ends,
        versions={},
        group_offsets=sum(ends.values()) + 1,  # one group of the three
    )
    outcome = run(group, batches)
    first_block = f"{tps[0].topic}-0-{0:020d}-{ends[tps[0]]:020d}-000"
    name = f"part-{first_block}+{tps[-1].topic}-0.parquet"
    days = {f.path.split("/")[0] for f in outcome.files}
    assert {f.path for f in outcome.files} == {f"{day}/{name}" for day in days}
    # Every partition's state, as if each had its own task.
    assert {tp: s.end for tp, s in outcome.partitions.items()} == ends
    order = [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    order += [("row_id", "ascending"), ("deleted", "ascending")]
    expected = expected_output(uri, "^sensor-.+").rows
    assert staged_rows(tmp_path).sort_by(order).to_pylist() == expected.sort_by(order).to_pylist()
    given = digests(tmp_path / "out") | digests(tmp_path / "ckpt")
    # A redo on a cold worker, as Spark's task of the group (its states loaded early).
    shutil.rmtree(tmp_path / "out")
    shutil.rmtree(tmp_path / "ckpt")
    monkeypatch.setattr(task_mod, "_CACHE", StateCache(4))
    with spark_task(0):
        again = run(group, batches)
    assert again.files == outcome.files
    assert digests(tmp_path / "out") | digests(tmp_path / "ckpt") == given


def test_a_task_stages_in_the_layout_its_plan_names_without_reading_the_outputs_record(
    tmp_path: Path, capture: tuple[str, int]
) -> None:
    uri, last = capture
    output = resolve(str(tmp_path / "out"))
    record_layout(output, DayLayout.DATE_COLUMN)
    # The driver read the layout for the batch: the task takes the plan's, not the record's.
    given = replace(plan(tmp_path, None, last, None), layout=DayLayout.HIVE_KEY)
    outcome = run(given, records(uri, 0, last))
    assert outcome.files and all(f.path.startswith("date=") for f in outcome.files)
    # Without one in the plan, the task reads the record itself.
    shutil.rmtree(tmp_path / "ckpt")
    again = run(plan(tmp_path, None, last, None), records(uri, 0, last))
    assert {f.path.split("/")[0] for f in again.files} == {
        f.path.split("/")[0].removeprefix("date=") for f in outcome.files
    }
