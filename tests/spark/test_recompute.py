"""Replay and corrections on Spark: recomputed ranges replace the live job's files in place."""

from __future__ import annotations

import hashlib
import shutil
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from app.contract.envelope import Envelope, MessageType
from app.contract.processor import Changes, Table, TableProcessor
from app.errors import ArchiveLayoutError, ConfigurationError
from app.recompute.correct import correct
from app.recompute.replay import replay
from app.recompute.run import CORRECTION, REPLAY, RecomputeReport, records
from app.sink.writer import visible_files
from app.spark.code import job_version
from app.storage import resolve
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.spark.helpers import assert_exact, copy_files, run_job, write_capture

SPEC = CaptureSpec(topics=2, partitions=2, sessions=10, updates=80, resync_every=20,
                   records_per_file=60, seed=6)  # fmt: skip
PATTERN = "^sensor-.+"


def _digests(output: Path) -> dict[str, str]:
    location = resolve(str(output))
    return {p: hashlib.sha256((output / p).read_bytes()).hexdigest()
            for p in visible_files(location)}  # fmt: skip


def _thirds(output: Path) -> list[int]:
    ts = sorted(verify.read_output(str(output)).column("ts").cast("int64").to_pylist())
    return [ts[len(ts) * k // 6] for k in range(7)[:-1]] + [ts[-1] + 1]


def _in_window(rows: Any, since: int, until: int) -> Any:
    ms = rows.column("ts").cast("int64")
    return rows.filter(pc.and_(pc.greater_equal(ms, since), pc.less(ms, until)))


def test_a_replay_rewrites_the_live_files_identically_twice_and_across_overlaps(
    spark: Any, tmp_path: Path
) -> None:
    archive, live = tmp_path / "archive", tmp_path / "live"
    write_capture(archive, SPEC)
    run_job(spark, archive, live, tmp_path / "ckpt", max_offsets_per_trigger=150)
    before = _digests(live)
    marks = _thirds(live)

    windows = [(marks[2], marks[4]), (marks[2], marks[4]), (marks[3], marks[5])]
    reports: list[RecomputeReport] = []
    for since, until in windows:
        report = replay(spark, str(archive), str(live), since, until, topic_pattern=PATTERN)
        reports.append(report)
        # The same names with the same bytes: nothing added, nothing changed.
        assert _digests(live) == before
        assert_exact(archive, live)

    first = reports[0].record
    assert first.kind == REPLAY and first.published and first.messages > 0
    assert reports[1].record.published == first.published  # twice: the same files
    assert set(reports[2].record.published) & set(first.published)  # the windows overlap
    # Only blocks with a record in the window were written, and they hold all its rows.
    assert len(first.published) < len(before)
    published = verify.read_output(str(live)).schema
    replayed = pq.read_table([str(live / p) for p in first.published if "_quarantine" not in p],
                             schema=published)  # fmt: skip
    window = _in_window(verify.read_output(str(live)), *windows[0])
    assert verify.compare(window, _in_window(replayed, *windows[0])).ok
    assert [r.kind for r in records(resolve(str(live)))] == [REPLAY] * 3


def test_a_damaged_archive_file_stops_a_replay_with_its_facts(spark: Any, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    write_capture(archive, CaptureSpec(topics=1, partitions=1, sessions=2, updates=10))
    [damaged] = (archive / "sensor-0" / "0").iterdir()
    table = pq.read_table(damaged)
    pq.write_table(table.take(list(reversed(range(len(table))))), damaged)
    # Found by the task that reads the file, in an executor.
    until = 4_102_444_800_000  # 2100-01-01: every record
    with pytest.raises(ArchiveLayoutError) as info:
        replay(spark, str(archive), str(tmp_path / "new"), 0, until, topic_pattern=PATTERN)
    assert str(info.value) == f"archive file {damaged} is not sorted by offset"
    assert info.value.facts == {"path": str(damaged), "topic": "sensor-0", "partition": 0}
    assert not (tmp_path / "new").exists() or not visible_files(resolve(str(tmp_path / "new")))


def test_a_replay_into_a_new_output_equals_the_live_rows_of_its_ranges(
    spark: Any, tmp_path: Path
) -> None:
    archive, live, new = tmp_path / "archive", tmp_path / "live", tmp_path / "new"
    write_capture(archive, SPEC)
    run_job(spark, archive, live, tmp_path / "ckpt")
    marks = _thirds(live)
    live_rows = verify.read_output(str(live))
    replayed_tps: set[str] = set()
    for since, until in [(marks[1], marks[3]), (marks[1], marks[3]), (marks[2], marks[4])]:
        report = replay(spark, str(archive), str(new), since, until, topic_pattern=PATTERN)
        replayed = verify.read_output(str(new))
        replayed_tps |= set(report.record.ranges)
        keys = pa.array(sorted(replayed_tps))
        tps = pc.binary_join_element_wise(
            live_rows["topic"], pc.cast(live_rows["partition"], "string"), ":"
        )
        mine = live_rows.filter(pc.is_in(tps, value_set=keys))
        comparison = verify.compare(mine, replayed)
        assert comparison.ok, comparison.report()
        assert comparison.duplicates == 0 and len(replayed) > 0


class DroppingProcessor(TableProcessor):
    """A faulty version: forgets the upserted rows of every fifth update."""

    def apply(self, state: Table | None, message: Envelope) -> tuple[Table, Changes]:
        table, changes = super().apply(state, message)
        if message.type is MessageType.UPDATE and message.seq % 5 == 2:
            return table, Changes(changes.deleted, ())
        return table, changes


def _as_version(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setenv("TABLECAST_JOB_VERSION", version)
    job_version.cache_clear()


class PollingReader(threading.Thread):
    """A reader of the dataset during a correction: what does it ever see?"""

    def __init__(self, output: Path) -> None:
        super().__init__(daemon=True)
        self.output = output
        self.stop = threading.Event()
        self.reads: list[tuple[int, int]] = []  # (rows, duplicated rows) of each whole read

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                table = ds.dataset(str(self.output), format="parquet",
                                   partitioning="hive").to_table()  # fmt: skip
            except (FileNotFoundError, OSError):
                continue  # a file went between listing and reading: read again
            keys = pc.binary_join_element_wise(
                table["topic"], pc.cast(table["partition"], "string"),
                pc.cast(table["offset"], "string"), table["row_id"], ":",
            )  # fmt: skip
            self.reads.append((len(table), len(table) - len(pc.unique(keys))))


def test_a_correction_replaces_a_faulty_versions_ranges_without_a_reader_seeing_duplicates(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, archive, out = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    write_capture(full, SPEC)
    copy_files(full, archive, lambda rel: int(rel.name.split("-")[0]) < 180)
    _as_version(monkeypatch, "9.9.9-faulty")
    run_job(spark, archive, out, tmp_path / "ckpt", max_offsets_per_trigger=150,
            processor=DroppingProcessor())  # fmt: skip
    with pytest.raises(ConfigurationError, match="still runs it"):
        correct(spark, str(archive), str(out), version="9.9.9-faulty")

    _as_version(monkeypatch, "9.9.10")
    shutil.rmtree(archive)
    shutil.copytree(full, archive)
    run_job(spark, archive, out, tmp_path / "ckpt", max_offsets_per_trigger=150)
    faulty = verify.compare(verify.expected_output(str(archive), PATTERN).rows,
                            verify.read_output(str(out)))  # fmt: skip
    assert faulty.missing > 0 and faulty.unexpected == 0  # the faulty version's loss

    reader = PollingReader(out)
    reader.start()
    report = correct(spark, str(archive), str(out), version="9.9.9-faulty")
    reader.stop.set()
    reader.join()
    assert isinstance(report, RecomputeReport)
    assert_exact(archive, out)
    assert report.record.kind == CORRECTION and report.record.selector == "version 9.9.9-faulty"
    assert report.record.job.version == "9.9.10"
    assert reader.reads and all(dupes == 0 for _, dupes in reader.reads)
    counts = [rows for rows, _ in reader.reads]
    assert counts == sorted(counts)  # rows only ever appear: no gap opens
    # Again: the same files, the same output.
    again = correct(spark, str(archive), str(out), version="9.9.9-faulty")
    assert isinstance(again, RecomputeReport)
    assert again.record.published == report.record.published
    assert_exact(archive, out)
    with pytest.raises(ConfigurationError, match=r"no batch of .* was published by version 1\.0"):
        correct(spark, str(archive), str(out), version="1.0")


def test_a_replay_on_s3_rewrites_the_live_files_identically(
    s3: dict[str, str], tmp_path: Path
) -> None:
    import subprocess
    import sys

    archive, output = "s3://lake/archive", "s3://lake/output"
    write_capture(archive, SPEC)  # type: ignore[arg-type]
    common = ["--archive", archive, "--output", output]
    subprocess.run([sys.executable, "-m", "app", "run", *common, "--checkpoint",
                    str(tmp_path / "ckpt"), "--trigger", "available-now"],
                   env=s3, check=True)  # fmt: skip
    location = resolve(output)

    def digests() -> dict[str, str]:
        return {p: hashlib.sha256(location.read_bytes(location.child(p))).hexdigest()
                for p in visible_files(location)}  # fmt: skip

    before = digests()
    done = subprocess.run([sys.executable, "-m", "app", "replay", *common,
                           "--since", "2000-01-01T00:00:00Z", "--until", "2100-01-01T00:00:00Z"],
                          env=s3, check=True, capture_output=True, text=True)  # fmt: skip
    assert f"{len(before)} files replaced or written" in done.stdout
    assert digests() == before
    assert_exact(archive, output)
