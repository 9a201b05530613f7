"""Running the real job on local Spark and checking its output."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from app.contract.offsets import Offsets, TopicPartition
from app.contract.processor import Processor
from app.contract.schema import TableSchema, parse_schema
from app.engine.machine import IntegrityMode
from app.sink.commit import BatchReport
from app.sink.ledger import Ledger
from app.spark.job import ArchiveSource, JobConfig, Trigger, run
from app.storage import resolve
from app.tools import generate as gen
from app.tools import verify


def write_capture(archive: Path, spec: gen.CaptureSpec) -> gen.Capture:
    capture = gen.generate(spec)
    gen.write_archive(capture, str(archive), spec)
    return capture


def run_job(
    spark: Any,
    archive: Path | str,
    output: Path | str,
    checkpoint: Path | str,
    processor: Processor[Any] | None = None,
    **overrides: Any,
) -> list[BatchReport]:
    reports: list[BatchReport] = []
    config = JobConfig(
        source=ArchiveSource(str(archive)),
        output=str(output),
        checkpoint=str(checkpoint),
        trigger=Trigger.parse("available-now"),
        **overrides,
    )
    run(spark, config, reports.append, processor=processor)
    return reports


# The topics every generated capture writes to.
PATTERN = "^sensor-.+"

# A capture that resync mode runs through, quarantining a record of each fault: the job's
# quarantine and its metrics read it (test_job.py, test_observability.py).
QUARANTINING_SPEC = gen.CaptureSpec(
    topics=2,
    partitions=2,
    sessions=8,
    updates=24,
    records_per_file=40,
    resync_every=6,
    seed=9,
    faults=(gen.Fault.SEQ_GAP, gen.Fault.BAD_JSON, gen.Fault.DELETE_UNKNOWN, gen.Fault.AFTER_END),
)

# The head of the declared schemas the schema tests write: rows keyed by site and id.
KEYED_BY_SITE_AND_ID = """
[key]
columns = ["site", "id"]

[columns]
site    = "string"
id      = "int64"
"""


def declared_schema(text: str, name: str, root: Path) -> tuple[TableSchema, str]:
    """The schema document ``text`` written to ``root/name``: parsed, and its path."""
    path = root / name
    path.write_text(text)
    return parse_schema(text, str(path)), str(path)


def expected_rows(
    archive: Path | str, mode: IntegrityMode = IntegrityMode.STRICT
) -> verify.Expected:
    return verify.expected_output(str(archive), PATTERN, mode)


def assert_exact(
    archive: Path | str, output: Path | str, mode: IntegrityMode = IntegrityMode.STRICT
) -> verify.Comparison:
    expected = expected_rows(archive, mode)
    comparison = verify.compare(expected.rows, verify.read_output(str(output)))
    assert comparison.ok, comparison.report()
    assert comparison.expected_rows > 0
    return comparison


def ledger_end(output: Path | str) -> Offsets:
    head = Ledger(resolve(str(output))).head()
    return {} if head is None else head.end


def copy_files(source: Path, target: Path, keep: Any) -> None:
    """Copy the archive files for which ``keep(relative_path)`` is true."""
    for path in sorted(source.rglob("*.parquet")):
        relative = path.relative_to(source)
        if keep(relative):
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / relative)


def tp_of(relative: Path) -> TopicPartition:
    return TopicPartition(relative.parts[0], int(relative.parts[1]))


def lose_the_checkpoint(spark: Any, root: Path) -> tuple[Path, Path, Path]:
    """A job whose checkpoint was lost: under ``root``, its ``archive``, ``out`` and ``ckpt``.

    The job read the first part of a capture (files below offset 150) into ``out``; then
    ``ckpt`` was deleted and ``archive`` now holds the whole capture (``full``).
    """
    archive, output, checkpoint = root / "archive", root / "out", root / "ckpt"
    # One session at a time per partition, as one sensor per topic produces them.
    spec = gen.CaptureSpec(
        topics=1, updates=60, records_per_file=50, resync_every=15, concurrent=1, seed=4
    )
    write_capture(root / "full", spec)
    shutil.copytree(
        root / "full",
        archive,
        ignore=lambda d, names: [
            n for n in names if n.endswith(".parquet") and n >= "00000000000000000150"
        ],
    )
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=60)
    shutil.rmtree(checkpoint)
    shutil.rmtree(archive)
    shutil.copytree(root / "full", archive)
    return archive, output, checkpoint


def run_argv(root: Path) -> list[str]:
    """``tablecast run`` over ``root``: its ``archive`` read to the end into ``out``, ``ckpt``.

    The command line of the tests that run the job as a user does, on the layout they write.
    """
    return run_argv_over(root / "archive", root / "out", root / "ckpt")


def repair_argv(archive: Path, output: Path, checkpoint: Path, confirm: str) -> list[str]:
    """``tablecast repair`` of ``output`` from ``archive`` against ``checkpoint``;
    ``confirm`` is ``--dry-run`` (report only) or ``--yes`` (no question asked)."""
    return [
        "repair",
        "--archive",
        str(archive),
        "--output",
        str(output),
        "--checkpoint",
        str(checkpoint),
        confirm,
    ]


def run_argv_over(archive: Path | str, output: Path | str, checkpoint: Path | str) -> list[str]:
    """``tablecast run`` reading ``archive`` to the end into ``output`` with ``checkpoint``
    (paths or URIs): :func:`run_argv` where they are not one directory's."""
    return [
        "run",
        "--archive",
        str(archive),
        "--output",
        str(output),
        "--checkpoint",
        str(checkpoint),
        "--trigger",
        "available-now",
    ]


def file_digests(output: Path) -> dict[str, str]:
    """Every visible file of a local output (dataset and quarantine): its SHA-256."""
    import hashlib

    from app.sink.visible import visible_files

    return {
        p: hashlib.sha256((output / p).read_bytes()).hexdigest()
        for p in visible_files(resolve(str(output)))
    }


def row_keys(rows: Any) -> Any:
    """``topic:partition:offset:row_id`` of each output row: a row twice is a key twice."""
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(
        rows["topic"],
        pc.cast(rows["partition"], "string"),
        pc.cast(rows["offset"], "string"),
        rows["row_id"],
        ":",
    )
