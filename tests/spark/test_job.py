"""The job on local Spark, end to end, against verify's expectation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import app
import tablecast
from app.code_version import code_digest, job_version
from app.contract.envelope import Envelope
from app.contract.offsets import TopicPartition
from app.contract.processor import Changes
from app.contract.table_processor import Table, TableProcessor
from app.engine.machine import IntegrityMode
from app.engine.output import OUTPUT_COLUMNS
from app.errors import (
    ArchiveLayoutError,
    DataLossError,
    IntegrityViolationError,
    ProcessorError,
)
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools import verify
from app.tools.generate import FAULT_RULES, CaptureSpec, Fault
from tests.spark.helpers import (
    PATTERN,
    QUARANTINING_SPEC,
    assert_exact,
    copy_files,
    expected_rows,
    ledger_end,
    run_job,
    write_capture,
)

SPEC = CaptureSpec(topics=2, partitions=2, sessions=10, updates=30, records_per_file=60, seed=11)


def test_output_equals_the_expectation_and_holds_offsets(spark: Any, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "archive", SPEC)
    reports = run_job(
        spark,
        tmp_path / "archive",
        tmp_path / "out",
        tmp_path / "ckpt",
        max_offsets_per_trigger=120,
    )
    assert len(reports) >= 3  # several micro-batches
    comparison = assert_exact(tmp_path / "archive", tmp_path / "out")
    assert comparison.actual_rows == sum(r.rows for r in reports)
    table = ds.dataset(tmp_path / "out", format="parquet", partitioning="hive").to_table()
    assert set(OUTPUT_COLUMNS) <= set(table.column_names)
    assert str(table.schema.field("ts").type) == "timestamp[us, tz=UTC]"  # Iceberg's timestamptz
    assert str(table.schema.field("partition").type) == "int32"
    # The ledger's end is every partition's last offset.
    assert ledger_end(tmp_path / "out") == {tp: len(m) for tp, m in capture.partitions.items()}
    # Every entry names the code that published it.
    entries = Ledger(resolve(str(tmp_path / "out"))).entries()
    assert entries and all(e.job == job_version() for e in entries)
    assert job_version().code == code_digest() and job_version().version == app.__version__


def test_a_second_run_continues_with_new_files_and_a_new_topic(spark: Any, tmp_path: Path) -> None:
    spec = CaptureSpec(topics=3, partitions=2, sessions=9, updates=30, records_per_file=40, seed=5)
    write_capture(tmp_path / "full", spec)
    live = tmp_path / "archive"
    # First: only the first two files of each partition of sensor-0 and sensor-1.
    first_files = "00000000000000000080"
    copy_files(
        tmp_path / "full", live, lambda rel: rel.parts[0] != "sensor-2" and rel.name < first_files
    )
    first = run_job(spark, live, tmp_path / "out", tmp_path / "ckpt")
    assert first
    rows_first = verify.read_output(str(tmp_path / "out")).num_rows
    # Then: the rest, and a topic that did not exist.
    copy_files(tmp_path / "full", live, lambda rel: True)
    second = run_job(spark, live, tmp_path / "out", tmp_path / "ckpt")
    assert second and rows_first > 0
    assert_exact(tmp_path / "full", tmp_path / "out")


@pytest.mark.parametrize("fault", [f for f in Fault if f is not Fault.ARCHIVE_HOLE])
def test_every_fault_stops_a_strict_run_at_its_record(
    spark: Any, tmp_path: Path, fault: Fault
) -> None:
    spec = CaptureSpec(
        topics=1, partitions=2, sessions=4, updates=24, records_per_file=30, seed=3, faults=(fault,)
    )
    capture = write_capture(tmp_path / "archive", spec)
    [injected] = capture.faults
    with pytest.raises(IntegrityViolationError) as info:
        run_job(
            spark,
            tmp_path / "archive",
            tmp_path / "out",
            tmp_path / "ckpt",
            max_offsets_per_trigger=25,
        )
    violation = info.value.violation
    assert violation.rule is FAULT_RULES[fault]
    assert (violation.topic, violation.partition, violation.offset) == (
        injected.topic,
        injected.partition,
        injected.offset,
    )
    message = str(info.value)
    assert f"partition {injected.partition} offset {injected.offset}" in message
    assert "expected" in message and "\n" not in message
    # Only whole messages from before the failing micro-batch are visible.
    end = ledger_end(tmp_path / "out")
    assert (injected.topic, injected.partition) not in end or end[
        TopicPartition(injected.topic, injected.partition)
    ] <= injected.offset
    expected = verify.expected_output(str(tmp_path / "archive"), "^sensor-.+", below=end)
    comparison = verify.compare(expected.rows, verify.read_output(str(tmp_path / "out")))
    assert comparison.ok, comparison.report()


def test_a_hole_in_the_archive_fails_like_fail_on_data_loss(spark: Any, tmp_path: Path) -> None:
    spec = CaptureSpec(
        topics=1,
        partitions=1,
        sessions=3,
        updates=40,
        records_per_file=30,
        faults=(Fault.ARCHIVE_HOLE,),
    )
    capture = write_capture(tmp_path / "archive", spec)
    [hole] = capture.faults
    with pytest.raises(DataLossError) as info:
        run_job(spark, tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt")
    assert f"offsets {hole.offset} to" in str(info.value)
    assert "sensor-0 partition 0" in str(info.value)
    # Raised in the driver's Python planner process: back with its facts.
    facts = info.value.facts
    assert {k: facts[k] for k in ("source", "topic", "partition", "first_missing")} == {
        "source": "the archive",
        "topic": "sensor-0",
        "partition": 0,
        "first_missing": hole.offset,
    }
    assert f"offsets {hole.offset} to {facts['last_missing']} are missing" in str(info.value)
    assert str(facts["path"]).startswith(str(tmp_path / "archive" / "sensor-0" / "0"))


def test_a_damaged_archive_file_stops_the_run_with_its_facts(spark: Any, tmp_path: Path) -> None:
    spec = CaptureSpec(topics=1, partitions=1, sessions=3, updates=10, records_per_file=30)
    write_capture(tmp_path / "archive", spec)
    damaged = sorted((tmp_path / "archive" / "sensor-0" / "0").iterdir())[1]
    table = pq.read_table(damaged)
    pq.write_table(table.take(list(reversed(range(len(table))))), damaged)
    # Found by the task that reads the file, in an executor.
    with pytest.raises(ArchiveLayoutError) as info:
        run_job(spark, tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt")
    assert str(info.value) == f"archive file {damaged} is not sorted by offset"
    assert info.value.facts == {"path": str(damaged), "topic": "sensor-0", "partition": 0}
    assert info.value.exit_code == 3
    assert ledger_end(tmp_path / "out") == {}  # nothing of the failing batch is visible


# The line FailingProcessor raises at, which the error names.
_BOOM_LINE = next(
    n
    for n, text in enumerate(Path(__file__).read_text().splitlines(), start=1)
    if text.endswith("# _BOOM_LINE") and "raise" in text
)


class FailingProcessor(TableProcessor):
    """A bug in a processor: its third message fails."""

    def apply(self, state: Table, message: Envelope) -> tuple[Table, Changes]:
        if message.seq == 2:
            raise RuntimeError(f"boom at seq {message.seq} of {message.session}")  # _BOOM_LINE
        return super().apply(state, message)


def test_a_processor_that_raises_in_a_task_is_one_line_naming_where(
    spark: Any, tmp_path: Path
) -> None:
    write_capture(tmp_path / "archive", CaptureSpec(topics=1, partitions=1, sessions=1, updates=4))
    with pytest.raises(ProcessorError) as info:
        run_job(
            spark,
            tmp_path / "archive",
            tmp_path / "out",
            tmp_path / "ckpt",
            processor=FailingProcessor(),
        )
    line = str(info.value)
    name = "tests.spark.test_job:FailingProcessor"
    assert line.startswith(
        f"processor {name} failed in apply at topic sensor-0 partition 0 offset 2, session "
        "'sensor-0-session-00000': RuntimeError: boom at seq 2 of sensor-0-session-00000 ("
    ), line
    assert line.endswith(f"{Path(__file__)} line {_BOOM_LINE})"), line
    assert info.value.exit_code == 9 and "\n" not in line
    assert info.value.facts["step"] == "apply" and info.value.facts["offset"] == 2
    assert ledger_end(tmp_path / "out") == {}  # nothing of the failing batch is visible


class Halves(msgspec.Struct):
    total: int = 0


_HALVES_OUTPUT = tablecast.schema(
    '[key]\ncolumns = ["sid", "step"]\n[columns]\nsid = "string"\nstep = "int64"\ntotal = "int64"'
)


class HalvingProcessor(tablecast.Processor[Halves]):
    """A bug in a processor's state: it puts a float in its int field, which msgspec encodes
    and its typed decoder refuses."""

    output = _HALVES_OUTPUT

    def apply(self, state: Halves, message: Envelope) -> tuple[Halves, tablecast.Changes]:
        state.total += len(message.rows) / 2  # type: ignore[assignment]
        return state, tablecast.Changes([(message.session, message.seq, int(state.total))])


class FixedHalvingProcessor(tablecast.Processor[Halves]):
    """The same processor with the bug fixed (it keeps its name, as a new release does)."""

    name = HalvingProcessor.name
    output = _HALVES_OUTPUT

    def apply(self, state: Halves, message: Envelope) -> tuple[Halves, tablecast.Changes]:
        state.total += len(message.rows) // 2
        return state, tablecast.Changes([(message.session, message.seq, state.total)])


def test_a_state_that_would_not_load_again_fails_its_batch_and_the_fixed_code_carries_on(
    spark: Any, tmp_path: Path
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, CaptureSpec(topics=1, partitions=1, sessions=2, updates=12))
    with pytest.raises(ProcessorError) as info:
        run_job(spark, archive, output, checkpoint, HalvingProcessor(), max_offsets_per_trigger=8)
    line = str(info.value)
    assert line.startswith(
        f"processor {HalvingProcessor.name} left a state that cannot be saved at topic "
        "sensor-0 partition 0 offset "
    ), line
    assert line.endswith(
        "ValueError: it does not read back as Halves: Expected `int`, got `float` - at `$.total`"
    ), line
    assert info.value.exit_code == 9 and "\n" not in line
    assert info.value.facts["step"] == "state" and info.value.facts["session"]
    assert ledger_end(output) == {}  # nothing of the failing batch is visible

    run_job(spark, archive, output, checkpoint, FixedHalvingProcessor(), max_offsets_per_trigger=8)
    expected = verify.expected_output(str(archive), PATTERN, processor=FixedHalvingProcessor())
    actual = verify.read_output(str(output), schema=_HALVES_OUTPUT)
    comparison = verify.compare(expected.rows, actual)
    assert comparison.ok and comparison.expected_rows > 0, comparison.report()


def test_resync_mode_quarantines_and_keeps_running(spark: Any, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "archive", QUARANTINING_SPEC)
    reports = run_job(
        spark,
        tmp_path / "archive",
        tmp_path / "out",
        tmp_path / "ckpt",
        integrity=IntegrityMode.RESYNC,
        max_offsets_per_trigger=80,
    )
    assert_exact(tmp_path / "archive", tmp_path / "out", IntegrityMode.RESYNC)
    quarantine = ds.dataset(
        tmp_path / "out" / "_quarantine", format="parquet", partitioning="hive"
    ).to_table()
    expected = expected_rows(tmp_path / "archive", IntegrityMode.RESYNC).quarantined
    assert quarantine.num_rows == len(expected) == sum(r.quarantined for r in reports)
    quarantined_at = {(r["topic"], r["partition"], r["offset"]) for r in quarantine.to_pylist()}
    for fault in capture.faults:
        assert (fault.topic, fault.partition, fault.offset) in quarantined_at
    assert all(
        reason.startswith("rule ") or "awaiting" in reason
        for reason in quarantine.column("reason").to_pylist()
    )
