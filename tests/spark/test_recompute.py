"""Replay and corrections on Spark: recomputed ranges replace the live job's files in place."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from app.engine.machine import IntegrityMode
from app.errors import ArchiveLayoutError, ConfigurationError
from app.recompute.correct import correct
from app.recompute.plan import GivenRules
from app.recompute.replay import replay
from app.recompute.run import CORRECTION, REPLAY, RecomputeReport, records
from app.sink.rewrite import RewriteSteps
from app.sink.visible import visible_files
from app.storage import resolve
from app.tools import verify
from app.tools.generate import CaptureSpec, Fault
from tests.readers import read_everywhere
from tests.spark.faulty_version import (
    FAULTY,
    FIXED,
    PATTERN,
    SPEC,
    DroppingProcessor,
    as_version,
    run_faulty,
    run_fixed,
)
from tests.spark.helpers import assert_exact, copy_files, run_job, write_capture


def _digests(output: Path) -> dict[str, str]:
    location = resolve(str(output))
    return {
        p: hashlib.sha256((output / p).read_bytes()).hexdigest() for p in visible_files(location)
    }


def _ms(rows: Any) -> Any:
    """The rows' ``ts`` in epoch milliseconds (the files hold microseconds)."""
    return pc.divide(rows.column("ts").cast("int64"), 1000)


def _thirds(output: Path) -> list[int]:
    ts = sorted(_ms(verify.read_output(str(output))).to_pylist())
    return [ts[len(ts) * k // 6] for k in range(7)[:-1]] + [ts[-1] + 1]


def _in_window(rows: Any, since: int, until: int) -> Any:
    ms = _ms(rows)
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
    # The files of the blocks with a record in the window (each batch's small partitions
    # share a file: app.engine.segments) hold all its rows.
    assert set(first.published) <= set(before)
    published = verify.read_output(str(live)).schema
    replayed = pq.read_table(
        [str(live / p) for p in first.published if "_quarantine" not in p], schema=published
    )
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


def _keys(table: pa.Table) -> pa.Array:
    return pc.binary_join_element_wise(
        table["topic"],
        pc.cast(table["partition"], "string"),
        pc.cast(table["offset"], "string"),
        table["row_id"],
        ":",
    )


class PollingReader(threading.Thread):
    """A plain-listing reader of the dataset during a correction: what does it ever see?"""

    def __init__(self, output: Path) -> None:
        super().__init__(daemon=True)
        self.output = output
        self.stop = threading.Event()
        # Each whole read: (started, ended) on the monotonic clock, and its row keys.
        self.reads: list[tuple[float, float, pa.Array]] = []
        self.vanished = 0  # reads that met a file retired between listing and reading
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    table = ds.dataset(
                        str(self.output), format="parquet", partitioning="hive"
                    ).to_table()
                except FileNotFoundError:
                    self.vanished += 1  # listed, then retired: read again
                    continue
                self.reads.append((started, time.monotonic(), _keys(table)))
        except BaseException as exc:  # a torn or broken read: the test fails with it
            self.error = exc


def test_a_correction_replaces_a_faulty_versions_ranges_without_a_reader_missing_a_row(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, archive, out = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    write_capture(full, SPEC)
    ckpt = tmp_path / "ckpt"
    run_faulty(spark, full, archive, out, ckpt, monkeypatch, below=180, max_offsets=150)
    with pytest.raises(ConfigurationError, match="still runs it"):
        correct(spark, str(archive), str(out), version=FAULTY)

    run_fixed(spark, full, archive, out, ckpt, monkeypatch, max_offsets=150)
    faulty = verify.compare(
        verify.expected_output(str(archive), PATTERN).rows, verify.read_output(str(out))
    )
    assert faulty.missing > 0 and faulty.unexpected == 0  # the faulty version's loss
    before = set(_keys(verify.read_output(str(out))).to_pylist())
    files_before = set(visible_files(resolve(str(out))))

    reader = PollingReader(out)
    reader.start()
    report = correct(spark, str(archive), str(out), version=FAULTY, steps=ReadMidRewrite(reader))
    reader.stop.set()
    reader.join()
    assert reader.error is None, f"a reader failed during the correction: {reader.error!r}"
    assert isinstance(report, RecomputeReport)
    assert_exact(archive, out)
    read_everywhere(out)
    assert report.record.kind == CORRECTION and report.record.selector == f"version {FAULTY}"
    assert report.record.job.version == FIXED
    # Rewritten files got new names; the old names were retired, never overwritten.
    assert report.record.removed and not set(report.record.removed) & set(report.record.published)
    assert set(report.record.removed) <= files_before
    assert not set(report.record.removed) & set(visible_files(resolve(str(out))))
    # Some reads overlapped the publishing; no read ever missed a row it had seen before.
    first, last = report.publishing
    overlapping = [r for r in reader.reads if r[0] < last and r[1] > first]
    assert overlapping, f"no read overlapped the publishing ({len(reader.reads)} reads)"
    for _, _, keys in reader.reads:
        assert before <= set(keys.to_pylist())
    # After it, no row twice: every read that began once the old names were retired saw
    # each row once (a read that began before may still hold both; the end state is
    # assert_exact's above).
    for began, _, keys in reader.reads:
        if began >= last:
            assert len(keys) == len(pc.unique(keys))
    # Again: the same files, the same output.
    again = correct(spark, str(archive), str(out), version=FAULTY)
    assert isinstance(again, RecomputeReport)
    assert again.record.published == report.record.published and not again.record.removed
    assert_exact(archive, out)
    with pytest.raises(ConfigurationError, match=r"no batch of .* was published by version 1\.0"):
        correct(spark, str(archive), str(out), version="1.0")


def test_a_release_that_corrected_ranges_and_turns_out_faulty_is_corrected_in_them_too(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, archive, out = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    ckpt = tmp_path / "ckpt"
    write_capture(full, SPEC)
    run_faulty(spark, full, archive, out, ckpt, monkeypatch, below=120, max_offsets=150)
    # FIXED is faulty the same way: it goes on, then corrects FAULTY's ranges with its rows.
    copy_files(full, archive, lambda rel: int(rel.name.split("-")[0]) < 240)
    as_version(monkeypatch, FIXED)
    dropping = DroppingProcessor()
    run_job(spark, archive, out, ckpt, processor=dropping, max_offsets_per_trigger=150)
    corrected = correct(spark, str(archive), str(out), version=FAULTY, processor=dropping)
    assert corrected.record.job.version == FIXED

    # The real fix publishes the rest, then corrects FIXED: what it published and corrected.
    as_version(monkeypatch, "9.9.11")
    copy_files(full, archive, lambda rel: True)
    run_job(spark, archive, out, ckpt, max_offsets_per_trigger=150)
    report = correct(spark, str(archive), str(out), version=FIXED)
    assert set(corrected.record.ranges) <= set(report.record.ranges)
    assert_exact(archive, out)


class ReadMidRewrite(RewriteSteps):
    """Holds the rewrite between publishing and retiring until a whole read began after
    the rewrite was recorded and ended after the publishing: a read that overlaps it."""

    def __init__(self, reader: PollingReader) -> None:
        self.reader = reader
        self.since = 0.0

    def recorded(self) -> None:
        self.since = time.monotonic()

    def published(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.reader.error is None:
            if any(started >= self.since for started, _, _ in self.reader.reads):
                return
            time.sleep(0.05)
        raise AssertionError("no read completed while the rewrite was held")


class CrashAfterPublishing(RewriteSteps):
    """Dies between publishing the new names and retiring the old ones."""

    def published(self) -> None:
        raise SimulatedRewriteCrash("crashed after publishing")


class SimulatedRewriteCrash(Exception):
    pass


def test_a_correction_that_crashed_before_retiring_leaves_no_row_twice_after_the_next_run(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, archive, out = tmp_path / "full", tmp_path / "archive", tmp_path / "out"
    write_capture(
        full,
        CaptureSpec(topics=1, partitions=2, sessions=4, updates=30, records_per_file=30, seed=3),
    )
    run_faulty(spark, full, archive, out, tmp_path / "ckpt", monkeypatch, below=60)
    run_fixed(spark, full, archive, out, tmp_path / "ckpt", monkeypatch)
    with pytest.raises(SimulatedRewriteCrash):
        correct(spark, str(archive), str(out), version=FAULTY, steps=CrashAfterPublishing())
    table = verify.read_output(str(out))
    assert len(table) > len(pc.unique(_keys(table)))  # both names visible: rows twice
    # The next run of a rewrite (here a replay of a window nothing falls in)
    # finishes the crashed one's retirement first.
    replay(spark, str(archive), str(out), 0, 1, topic_pattern=PATTERN)
    assert_exact(archive, out)
    read_everywhere(out)


def test_a_replay_on_s3_rewrites_the_live_files_identically(
    s3: dict[str, str], tmp_path: Path
) -> None:
    import subprocess
    import sys

    import boto3

    archive, output = "s3://lake/archive", "s3://lake/output"
    client = boto3.client("s3", endpoint_url=s3["TABLECAST_S3_ENDPOINT"], region_name="us-east-1")
    client.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
    write_capture(archive, SPEC)  # type: ignore[arg-type]
    common = ["--archive", archive, "--output", output]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "run",
            *common,
            "--checkpoint",
            str(tmp_path / "ckpt"),
            "--trigger",
            "available-now",
        ],
        env=s3,
        check=True,
    )
    location = resolve(output)

    def digests() -> dict[str, str]:
        return {
            p: hashlib.sha256(location.read_bytes(location.child(p))).hexdigest()
            for p in visible_files(location)
        }

    before = digests()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "replay",
            *common,
            "--since",
            "2000-01-01T00:00:00Z",
            "--until",
            "2100-01-01T00:00:00Z",
        ],
        env=s3,
        check=True,
        capture_output=True,
        text=True,
    )
    # Nothing changed, and the report says so.
    assert f"0 files rewritten under new names, {len(before)} identical (kept)" in done.stdout
    assert digests() == before
    assert_exact(archive, output)
    # No published object was written twice (a copy over it races readers).
    versions = client.list_object_versions(Bucket="lake", Prefix="output/")["Versions"]
    counts: dict[str, int] = {}
    for version in versions:
        if version["Key"].endswith(".parquet") and not version["Key"].startswith("output/_"):
            counts[version["Key"]] = counts.get(version["Key"], 0) + 1
    assert counts and set(counts.values()) == {1}, counts


def _quarantine(output: Path) -> set[tuple[str, int, int, str]]:
    table = ds.dataset(
        str(output / "_quarantine"), format="parquet", partitioning="hive"
    ).to_table()
    columns = [table[name].to_pylist() for name in ("topic", "partition", "offset", "reason")]
    return set(zip(*columns, strict=True))


def test_a_recompute_applies_the_live_jobs_rules_and_refuses_others(
    spark: Any, tmp_path: Path
) -> None:
    archive, out = tmp_path / "archive", tmp_path / "out"
    spec = CaptureSpec(
        topics=1,
        partitions=2,
        sessions=6,
        updates=30,
        records_per_file=40,
        faults=(Fault.PARTITION_SWITCH,),
        seed=9,
    )
    write_capture(archive, spec)
    run_job(
        spark,
        archive,
        out,
        tmp_path / "ckpt",
        max_offsets_per_trigger=50,
        integrity=IntegrityMode.RESYNC,
        session_timeout_ms=600_000,
    )
    rows, held = verify.read_output(str(out)), _quarantine(out)
    assert any(reason.startswith("rule 6") for *_, reason in held)

    everything = (0, 4_102_444_800_000)  # 2100-01-01: every record
    # No rules given: the ledger's (resync, 10 minutes) and the live job's rule 6 owners.
    report = replay(spark, str(archive), str(out), *everything, topic_pattern=PATTERN)
    assert report.record.published
    assert verify.compare(rows, verify.read_output(str(out))).ok
    assert _quarantine(out) == held
    read_everywhere(out)

    with pytest.raises(ConfigurationError) as refused:
        replay(
            spark,
            str(archive),
            str(out),
            *everything,
            topic_pattern=PATTERN,
            rules=GivenRules(integrity=IntegrityMode.STRICT),
        )
    assert "\n" not in str(refused.value)
    assert "integrity strict" in str(refused.value) and "resync" in str(refused.value)
    with pytest.raises(ConfigurationError, match="session timeout"):
        replay(
            spark,
            str(archive),
            str(out),
            *everything,
            topic_pattern=PATTERN,
            rules=GivenRules(session_timeout_ms=3_600_000),
        )
