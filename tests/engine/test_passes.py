"""The driver and its tasks in one process: resync passes, workers' caches, bounded reports.

The tasks run here as Spark runs them (``PartitionTask`` over each
partition's record batches), with each Python worker's cache swapped in by
hand, so that a pass can run "on another worker" without a cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pytest

from app.contract.offsets import Offsets, TopicPartition
from app.contract.table_processor import TableProcessor
from app.engine import task as task_mod
from app.engine import writer
from app.engine.driver import EngineDriver
from app.engine.machine import IntegrityMode, Rules
from app.engine.reports import BatchOutcome
from app.engine.store import StateCache
from app.engine.task import PartitionTask
from app.engine.writer import DayLayout, record_layout
from app.errors import DataLossError
from app.sources.records import SCHEMA, no_headers
from app.storage import Location, resolve

A = TopicPartition("sensor-0", 0)
B = TopicPartition("sensor-0", 1)
DAY_MS = 1_767_225_600_000  # 2026-01-01


def _value(session: str, seq: int, kind: str, rows: int = 1) -> bytes:
    body = [{"id": f"r{i}", "value": float(seq), "status": "ok"} for i in range(rows)]
    doc = {"session": session, "seq": seq, "type": kind, "ts": DAY_MS + seq, "rows": body}
    return orjson.dumps(doc)


def _records(tp: TopicPartition, first: int, values: list[tuple[str, bytes]]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": [k.encode() for k, _ in values],
            "value": [v for _, v in values],
            "topic": [tp.topic] * n,
            "partition": [tp.partition] * n,
            "offset": list(range(first, first + n)),
            "timestamp": [DAY_MS * 1000 + 1000 * (first + i) for i in range(n)],
            "timestampType": [0] * n,
            "headers": no_headers(n),
        },
        schema=SCHEMA,
    )


class Workers:
    """Python workers, each with its own state cache; ``run`` runs one pass on one of them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.caches = {name: StateCache(8) for name in ("w1", "w2")}
        self.monkeypatch = monkeypatch
        self.schedule: list[str] = []  # the worker of each coming pass
        self.records: dict[TopicPartition, pa.RecordBatch] = {}
        self.loads: list[dict[str, str]] = []  # per pass: partition -> "hit", "miss" or "new"
        self.after_pass: Callable[[list[dict[str, Any]]], None] = lambda rows: None

    def run(self, task: PartitionTask, _ddl: str) -> list[dict[str, Any]]:
        # The last worker named runs every pass after it.
        worker = self.schedule.pop(0) if len(self.schedule) > 1 else self.schedule[0]
        self.monkeypatch.setattr(task_mod, "_CACHE", self.caches[worker])
        rows: list[dict[str, Any]] = []
        for tp in sorted(self.records):
            rows += [r for b in task(iter([self.records[tp]])) for r in b.to_pylist()]
        self.loads.append(
            {
                f"{r['topic']}:{r['partition']}": orjson.loads(r["detail"])["cache"]
                for r in rows
                if r["kind"] == "partition"
            }
        )
        self.after_pass(rows)
        return rows


def _driver(tmp_path: Path, mode: IntegrityMode = IntegrityMode.RESYNC) -> EngineDriver:
    return EngineDriver(
        TableProcessor(), Rules(mode=mode), str(tmp_path / "ckpt" / "state"), str(tmp_path / "out")
    )


def _batch(
    driver: EngineDriver, workers: Workers, start: Offsets, end: Offsets, tmp_path: Path
) -> BatchOutcome:
    driver.prepare(start, {})  # once per run: the first batch's
    staging = tmp_path / "out" / "_tablecast" / "staging" / "k"

    def clear() -> None:
        import shutil

        shutil.rmtree(staging, ignore_errors=True)

    outcome = driver.run_batch(workers.run, start, end, "_tablecast/staging/k", clear)
    driver.committed(outcome, driver.states_after(outcome))
    return outcome


# Session s1 opens in A; its update at B:1 trespasses (rule 6), so a resync batch runs
# twice: the first pass sees s1 in B as a new session, the second as A's.
BATCH_1 = {
    A: [("s1", _value("s1", 0, "snapshot")), ("s1", _value("s1", 1, "update"))],
    B: [("s2", _value("s2", 0, "snapshot")), ("s1", _value("s1", 2, "update"))],
}
BATCH_2 = {B: [("s2", _value("s2", 1, "update")), ("s1", _value("s1", 3, "snapshot"))]}


def _run_two_batches(tmp_path: Path, workers: Workers, schedule: list[str]) -> BatchOutcome:
    driver = _driver(tmp_path)
    workers.schedule = schedule
    workers.records = {tp: _records(tp, 0, v) for tp, v in BATCH_1.items()}
    _batch(driver, workers, {}, {A: 2, B: 2}, tmp_path)
    assert len(workers.schedule) == 1, "the first batch must have run two passes"
    workers.records = {B: _records(B, 2, BATCH_2[B])}
    return _batch(driver, workers, {A: 2, B: 2}, {A: 2, B: 4}, tmp_path)


def test_a_pass_on_another_worker_leaves_no_stale_state_in_the_first_workers_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference: every pass and batch on one worker whose cache is emptied before each.
    cold = Workers(monkeypatch)
    cold.caches["w1"] = StateCache(0)
    expected = _run_two_batches(tmp_path / "cold", cold, ["w1", "w1", "w1"])
    # Pass 1 of batch 1 on w1, pass 2 on w2, batch 2 on w1 again: w1 still holds pass 1's state.
    workers = Workers(monkeypatch)
    second = _run_two_batches(tmp_path / "warm", workers, ["w1", "w2", "w1"])
    # No pass of batch 2 on w1 takes pass 1's state from w1's cache: it is not the committed one.
    assert [load["sensor-0:1"] for load in workers.loads[2:]] == ["miss"] * len(workers.loads[2:])
    assert second.violations == expected.violations
    assert second.quarantined == expected.quarantined and second.rows == expected.rows
    # The state batch 2 left in B: the same file as the cold run's.
    warm, cold_dir = (
        tmp_path / run / "ckpt" / "state" / "sensor-0" / "1" for run in ("warm", "cold")
    )
    newest = [max(d.iterdir()).read_bytes() for d in (warm, cold_dir)]
    assert newest[0] == newest[1]


def test_every_pass_of_a_batch_reads_the_same_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = _driver(tmp_path)
    workers = Workers(monkeypatch)
    workers.schedule = ["w1", "w1"]
    workers.records = {tp: _records(tp, 0, v) for tp, v in BATCH_1.items()}

    def compacted_between_passes(_: list[dict[str, Any]]) -> None:
        # Retention or compaction: the source gives B's range with a record fewer.
        workers.records[B] = _records(B, 1, BATCH_1[B][1:])

    workers.after_pass = compacted_between_passes
    with pytest.raises(DataLossError, match=r"sensor-0:1 .*changed between passes") as changed:
        _batch(driver, workers, {}, {A: 2, B: 2}, tmp_path)
    assert changed.value.facts["topic"] == "sensor-0" and changed.value.facts["partition"] == 1


def test_bad_records_reach_the_driver_as_counts_and_a_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = 500
    values = [("s1", _value("s1", 0, "snapshot"))] + [("s1", b"{not json")] * bad
    workers = Workers(monkeypatch)
    workers.schedule = ["w1"]
    workers.records = {A: _records(A, 0, values)}
    shipped: list[int] = []
    workers.after_pass = lambda rows: shipped.append(sum(r["kind"] == "violation" for r in rows))
    outcome = _batch(_driver(tmp_path), workers, {}, {A: bad + 1}, tmp_path)
    assert shipped[0] <= task_mod.VIOLATION_SAMPLE < bad
    assert outcome.violation_count == bad and outcome.quarantined == bad
    assert [v.offset for v in outcome.violations] == list(range(1, task_mod.VIOLATION_SAMPLE + 1))


def test_a_batchs_tasks_are_given_the_outputs_layout_read_once_on_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_layout(resolve(str(tmp_path / "out")), DayLayout.DATE_COLUMN)
    driver, workers = _driver(tmp_path), Workers(monkeypatch)
    workers.schedule = ["w1"]
    workers.records = {A: _records(A, 0, [("s1", _value("s1", 0, "snapshot"))])}
    given: list[DayLayout | None] = []
    read_by_tasks: list[str] = []
    read = writer.layout_of

    def counted(location: Location) -> DayLayout:
        read_by_tasks.append(location.uri)
        return read(location)

    # The writer's own look-up: what a task would call without the plan's layout.
    monkeypatch.setattr(writer, "layout_of", counted)
    run = workers.run

    def tasks(task: PartitionTask, ddl: str) -> list[dict[str, Any]]:
        given.append(task.plan.layout)
        return run(task, ddl)

    monkeypatch.setattr(workers, "run", tasks)
    outcome = _batch(driver, workers, {}, {A: 1}, tmp_path)
    assert given == [DayLayout.DATE_COLUMN]
    assert outcome.files and all(not f.path.startswith("date=") for f in outcome.files)
    assert read_by_tasks == []
