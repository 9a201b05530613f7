"""Benchmark: what a batch costs however long the job runs (a year of batches, at the bench's pace).

Figures, not assertions (``make bench``):

1. **The sink's commit path without Spark**, for ``--batches`` (100,000)
   batches on local disk and ``--s3-batches`` on a moto server's S3 (its
   own process; the table catalogued in its Glue): the job's own
   :class:`~app.sink.commit.ExactlyOnceSink` (commit steps, ledger, the
   Iceberg table's commit with its expiry, the upkeep of steps 9 to 13),
   engine and partition tasks, run in this process over a one-partition
   archive, one message a batch, the messages a minute apart (their
   envelopes' ``ts``, which a row's day is: 1,440 batches a day from 20:00
   UTC, and a day closes as it does deployed); after each batch the job's
   :class:`~app.table.live.ScheduledCompaction` as ``--compact-every 1d``
   runs it, on a clock at the batch's minute: a day after its last run (at
   batch 0), so at 20:00 each day, it merges the days closed before. The checkpoint's offset log is
   a list in memory; the start is the job's (``check_before_start``) and the
   tasks run where Spark would call them. At batches 100, 1,000, 10,000 and
   100,000: the commit's time (median of the 100 commits up to there: the
   sink's call; the compactions are counted apart, their number and median
   time) and its CPU time (this process's, which other work on the machine
   does not stretch as it stretches the time), the bytes it writes (mean
   of those 100: this process's writes, locally; not on S3, where they go
   through sockets, which /proc's counters leave out), and the control
   data kept then (the ledger's numbered files and folded parts, the
   table's metadata folder and its current metadata file, the snapshots,
   the live data files). The history and the retire grace are the job's
   defaults unless given: at the bench's pace the history's tiers fill
   within seconds (the newest 60 snapshots, one a minute for an hour), and
   the retire grace is ``--grace`` (5 s), which the metadata files of expired
   snapshots and a compaction's inputs then wait too (the job's 30 s would
   hold several hundred batches' files at this pace, one at a minute's
   trigger). On local disk the soak resumes: its folder
   (``bench/out/soak/local-<batches>``) keeps each batch's figures
   (``commits.jsonl``) and the marks' (``figures.jsonl``); run again, it
   starts after the last batch its ledger holds, as the job does after a
   stop (SIGINT or SIGTERM stop it after the batch under way; a kill is
   resumed too), so a long soak is run in pieces and a mark's figures are
   the 100 commits before it, whichever pieces ran them (``--fresh``
   starts it again). moto keeps its S3 in memory: the S3 soak runs whole.
2. **A real ``tablecast run``** of 1,000 micro-batches with the default
   settings (``--max-offsets-per-trigger 4`` over 4,000 messages): the
   same figures at batches 100 and 1,000, from the job's metrics
   (``BatchDurationMs``), its process tree's writes (/proc) and its output.
3. **The issue's check**: 400 micro-batches with ``--table-history 30s``
   (the other settings the job's defaults): the current metadata file, the
   files in the table's metadata folder (manifest lists, manifests,
   metadata files) and in the ledger, early and late batches' durations,
   and ``tablecast verify`` (plain and Iceberg readers).

``python -m bench.soak --only commit --batches 2000`` runs a part quickly.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import msgspec
import orjson
import pyarrow as pa

from app import defaults
from app.contract.offsets import Offsets, TopicPartition
from app.contract.table_processor import TableProcessor
from app.engine.driver import EngineDriver
from app.engine.machine import IntegrityMode, Rules
from app.engine.store import state_root
from app.sink import fencing, guard
from app.sink.commit import ExactlyOnceSink
from app.sink.ledger import Ledger
from app.sources.archive import ArchiveBackend
from app.sources.ranges import PlannedRange
from app.storage import Location, resolve
from app.table import catalog as table_catalog
from app.table.live import LiveTable, ScheduledCompaction, TableSettings
from app.tools import generate as gen

if TYPE_CHECKING:
    from app.sink.checkpoint import CheckpointLog

OUT = Path("bench/out/soak")
PYTHON = sys.executable
TOPIC = "sensor-0"
TP = TopicPartition(TOPIC, 0)
MARKS = (100, 1_000, 10_000, 100_000)
WINDOW = 100  # commits a figure is taken over
MINUTE_MS = 60_000  # between part 1's messages: a batch a minute
# Part 1's first message, at 20:00 UTC, as a job deployed in the evening: its schedule then
# compacts at 20:00, twenty hours after the day it merges closed, beside the 1,200 small files
# of the next (the first merge at batch 1,440, of the first day's 240 files).
FIRST_MS = gen.START_MS + 20 * 60 * MINUTE_MS
DAY_S = 86_400.0  # part 1's compaction period, as deployed (--compact-every 1d)
PROGRESS_EVERY = 1_000  # batches between part 1's progress lines


def capture(messages: int) -> gen.CaptureSpec:
    """One partition of at least ``messages`` messages of small tables."""
    updates = 200  # a session's messages: its snapshot, the updates, resyncs among them
    return gen.CaptureSpec(
        topics=1,
        partitions=1,
        sessions=messages // updates + 1,
        rows_min=3,
        rows_max=6,
        updates=updates,
        resync_every=50,
        records_per_file=20_000,
        seed=3,
    )


def write_archive(path: Path, messages: int) -> int:
    if path.exists():
        shutil.rmtree(path)
    spec = capture(messages)
    made = gen.generate(spec)
    gen.write_archive(made, str(path), spec)
    return made.messages


# -- 1. the commit path ---------------------------------------------------------


def minutely(made: gen.Capture) -> None:
    """Stamp the capture's messages a minute apart (envelope ``ts`` and Kafka timestamp), in
    offset order from ``FIRST_MS``: a batch a minute, each row's day the day of its
    minute, so that 1,440 batches fill a day and the day then closes as it does deployed."""
    for tp, messages in made.partitions.items():
        stamped = []
        for offset, message in enumerate(messages):
            ts = FIRST_MS + offset * MINUTE_MS
            doc = orjson.loads(message.value)
            doc["ts"] = ts
            stamped.append(replace(message, value=orjson.dumps(doc), ts=ts))
        made.partitions[tp] = stamped


@dataclass
class OffsetLog:
    """The checkpoint's offset log as the sink and the start's checks read it: batch ``n``
    ends at ``n + 1``; a soak resumed at batch ``next_batch`` has planned it and committed
    the one before, as Spark's checkpoint has after a stop."""

    uri: str
    next_batch: int = 0
    per_batch: int = 1

    def offsets(self, batch_id: int) -> Offsets | None:
        return None if batch_id < 0 else {TP: (batch_id + 1) * self.per_batch}

    def query_id(self) -> str | None:
        return "soak-0000"

    def is_fresh(self) -> bool:
        return self.next_batch == 0

    def last_planned(self) -> int | None:
        return self.next_batch

    def last_committed(self) -> int | None:
        return self.next_batch - 1 if self.next_batch else None


@dataclass
class SimulatedClock:
    """The deployed job's clock at a batch a minute: batch ``n`` runs at its message's minute."""

    batch: int = 0

    def __call__(self) -> datetime:
        return datetime.fromtimestamp((FIRST_MS + self.batch * MINUTE_MS) / 1000, UTC)


@dataclass
class Frame:
    """The micro-batch as the sink's ``frame``: one range, its task run here, as Spark's
    worker would run it (``mapInArrow(...).collect()``)."""

    backend: ArchiveBackend
    start: int
    end: int

    def mapInArrow(  # noqa: N802 (Spark's name)
        self, task: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], ddl: str
    ) -> Frame:
        self._task = task
        return self

    def collect(self) -> list[dict[str, Any]]:
        planned = PlannedRange(
            TP, self.start, self.end, self.backend.reader(TP, self.start, self.end)
        )
        return [
            row for batch in self._task(iter([planned.to_batch()])) for row in batch.to_pylist()
        ]


@dataclass
class Kept:
    """The control data an output keeps."""

    ledger_files: int = 0
    ledger_bytes: int = 0
    folded_files: int = 0
    folded_bytes: int = 0
    metadata_files: int = 0
    metadata_bytes: int = 0
    current_metadata_bytes: int = 0
    compaction_records: int = 0
    other_control_files: int = 0
    data_files: int = 0


def kept(location: Location) -> Kept:
    found = Kept()
    newest = ("", 0)
    for info in location.list_tree(location.path):
        relative = info.path[len(location.path.rstrip("/")) + 1 :]
        size = info.size or 0
        if relative.startswith("_tablecast/ledger/folded/"):
            found.folded_files += 1
            found.folded_bytes += size
        elif relative.startswith("_tablecast/ledger/compactions/"):
            found.compaction_records += 1
        elif relative.startswith("_tablecast/ledger/") and relative.count("/") == 2:
            found.ledger_files += 1
            found.ledger_bytes += size
        elif relative.startswith("_iceberg/table/metadata/"):
            found.metadata_files += 1
            found.metadata_bytes += size
            if relative.endswith(".metadata.json") and relative > newest[0]:
                newest = (relative, size)
        elif relative.startswith(("_tablecast/", "_iceberg/")):
            found.other_control_files += 1
        elif relative.endswith(".parquet"):
            found.data_files += 1
    found.current_metadata_bytes = newest[1]
    return found


def _wchar(pid: int | str = "self") -> int:
    with open(f"/proc/{pid}/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("wchar:"))


class Commit(msgspec.Struct, array_like=True):
    """One batch of part 1, a line of its ``commits.jsonl``: a resumed soak reads them back."""

    batch: int
    seconds: float  # the sink's call: the batch's commit
    cpu_s: float  # this process's CPU time in it (its threads' too): what load does not stretch
    written: int  # the bytes it wrote
    compaction_s: float | None  # the scheduled compaction after it, when one ran


class Figures(msgspec.Struct):
    """Part 1 at a mark, a line of its ``figures.jsonl``."""

    batch: int
    ms_per_commit: float
    ms_worst: float
    cpu_ms_per_commit: float  # median of the same commits' CPU time
    bytes_per_commit: float | None  # None: not measured (S3)
    kept: Kept
    snapshots: int
    waiting: int
    compactions: int  # run so far (the first, at batch 0, finds no closed day)
    compaction_ms: float  # their median


class Params(msgspec.Struct):
    """What a part-1 folder holds: a soak resumes only the folder of the same soak."""

    batches: int
    grace_s: float
    layout: int = 4  # of this folder: minutely messages from 20:00, compaction, CPU time


@dataclass(frozen=True)
class Soak:
    """Part 1's folder: the archive, the output, the checkpoint's state, and the figures."""

    work: Path
    output: str  # the output's URI (local: ``work/out``)
    params: Params

    @property
    def archive(self) -> Path:
        return self.work / "archive"

    @property
    def commits_file(self) -> Path:
        return self.work / "commits.jsonl"

    @property
    def figures_file(self) -> Path:
        return self.work / "figures.jsonl"

    def begin(self, *, resume: bool) -> bool:
        """Resume the soak the folder holds, if it is this one and ``resume``; else start it
        again (a new archive). Whether it resumed."""
        params_file = self.work / "soak.json"
        if resume and params_file.exists():
            held = msgspec.json.decode(params_file.read_bytes(), type=Params)
            if held == self.params:
                return True
            print(f"{self.work} holds another soak ({held}): starting again")
        if self.work.exists():
            shutil.rmtree(self.work)
        self.work.mkdir(parents=True)
        spec = capture(self.params.batches)
        made = gen.generate(spec)
        minutely(made)
        gen.write_archive(made, str(self.archive), spec)
        params_file.write_bytes(msgspec.json.encode(self.params))
        return False

    def commits(self, below: int) -> list[Commit]:
        """The batches committed before ``below`` that earlier pieces recorded, the file
        rewritten with them alone: a piece killed while writing its last line left it torn,
        and its last batch may be unrecorded (committed, then killed)."""
        if not self.commits_file.exists():
            return []
        decoder = msgspec.json.Decoder(Commit)
        found: list[Commit] = []
        for line in self.commits_file.read_bytes().splitlines():
            with contextlib.suppress(msgspec.DecodeError):
                commit = decoder.decode(line)
                if commit.batch < below:
                    found.append(commit)
        encoder = msgspec.json.Encoder()
        kept = self.commits_file.with_suffix(".kept")
        kept.write_bytes(b"".join(encoder.encode(c) + b"\n" for c in found))
        kept.replace(self.commits_file)
        return found

    def figures(self, below: int) -> list[Figures]:
        if not self.figures_file.exists():
            return []
        decoder = msgspec.json.Decoder(Figures)
        lines = self.figures_file.read_bytes().splitlines()
        return [f for f in (decoder.decode(line) for line in lines if line) if f.batch <= below]


def committed_batches(location: Location) -> int:
    """How many batches the output's ledger holds (batch ``n`` ends at offset ``n + 1``)."""
    head = Ledger(location).head()
    return 0 if head is None else head.end.get(TP, 0)


def drive(
    soak: Soak,
    *,
    written: Callable[[], int] | None,
    resumed: bool,
    marks: tuple[int, ...] = MARKS,
) -> list[Figures]:
    """The sink's commits of the soak's batches of one message each, a minute apart, the
    job's scheduled compaction once a simulated day; figures at ``marks``. A resumed soak
    starts after the last batch its ledger holds, as the job starts after a stop; SIGINT or
    SIGTERM stop it after the batch under way."""
    location = resolve(soak.output)
    done = committed_batches(location) if resumed else 0
    commits = soak.commits(below=done)
    figures = soak.figures(below=done)
    for earlier in figures:
        print(_figure_line(earlier), flush=True)
    if done:
        print(f"  ... resumed after {done:,} of {soak.params.batches:,} batches", flush=True)
    checkpoint = OffsetLog(str(soak.work / "checkpoint"), next_batch=done)
    table = LiveTable(TableSettings(retire_grace_s=soak.params.grace_s))
    engine = EngineDriver(
        TableProcessor(),
        Rules(IntegrityMode.STRICT, defaults.SESSION_TIMEOUT_MS, {}),
        state_root(checkpoint.uri),
        soak.output,
    )
    # The job's start: its checks, its claim, what an earlier piece left tidied. That piece
    # has stopped (it is this soak's), so its lease is not watched.
    plan = guard.check_before_start(
        soak.output,
        # What the checks read of Spark's checkpoint (its offsets, is_fresh, last_planned,
        # last_committed, query_id, uri), the soak's offset log has.
        cast("CheckpointLog", checkpoint),
        table,
        fencing.new_writer("run", checkpoint.uri),
        gone=fencing.find_holder(Ledger(location)),
    )
    assert plan.fence is not None
    sink = ExactlyOnceSink(
        output_uri=soak.output,
        checkpoint=checkpoint,
        engine=engine,
        mode=IntegrityMode.STRICT,
        table=table,
        fence=plan.fence,
    )
    clock = SimulatedClock()
    compaction = ScheduledCompaction(
        sink=sink,
        output=soak.output,
        every_s=DAY_S,
        retire_grace_s=soak.params.grace_s,
        clock=clock,
    )
    compacted = [c.compaction_s for c in commits if c.compaction_s is not None]
    backend = ArchiveBackend(str(soak.archive), f"^{TOPIC}$")
    backend.bounds()  # the listing the planner makes, once
    stop = _stop_on_signals()
    started, pace_from = time.monotonic(), done
    with soak.commits_file.open("ab") as record, soak.figures_file.open("ab") as marked:
        for batch in range(done, soak.params.batches):
            if stop.is_set():
                print(f"stopped after {batch:,} batches: run it again to go on", flush=True)
                break
            clock.batch = batch
            before_bytes = written() if written else 0
            before, before_cpu = time.perf_counter(), time.process_time()
            sink(Frame(backend, batch, batch + 1), batch)
            seconds, cpu = time.perf_counter() - before, time.process_time() - before_cpu
            wrote = written() - before_bytes if written else 0
            runs = compaction.runs
            before = time.perf_counter()
            compaction.after_batch()
            ran = time.perf_counter() - before if compaction.runs > runs else None
            if ran is not None:
                compacted.append(ran)
            commits.append(Commit(batch, seconds, cpu, wrote, ran))
            record.write(msgspec.json.encode(commits[-1]) + b"\n")
            record.flush()
            # The last batch too: a soak shorter than a mark (S3's) ends with its figures.
            if batch + 1 in marks or batch + 1 == soak.params.batches:
                figures.append(
                    _figures(batch + 1, commits, compacted, location, table, written is not None)
                )
                marked.write(msgspec.json.encode(figures[-1]) + b"\n")
                marked.flush()
                print(_figure_line(figures[-1]), flush=True)
            elif (batch + 1) % PROGRESS_EVERY == 0:
                print(_progress(batch + 1, soak.params.batches, pace_from, started), flush=True)
    return figures


def _figures(
    batch: int,
    commits: list[Commit],
    compacted: list[float],
    location: Location,
    table: LiveTable,
    measured: bool,
) -> Figures:
    window = [c.seconds for c in commits[-WINDOW:]]
    return Figures(
        batch=batch,
        ms_per_commit=statistics.median(window) * 1000,
        ms_worst=max(window) * 1000,
        cpu_ms_per_commit=statistics.median(c.cpu_s for c in commits[-WINDOW:]) * 1000,
        bytes_per_commit=(
            statistics.mean(c.written for c in commits[-WINDOW:]) if measured else None
        ),
        kept=kept(location),
        snapshots=_snapshots(location),
        waiting=table.files.waiting,
        compactions=len(compacted),
        compaction_ms=statistics.median(compacted) * 1000 if compacted else 0.0,
    )


def _progress(done: int, batches: int, since: int, started: float) -> str:
    rate = (done - since) / (time.monotonic() - started)
    left = (batches - done) / rate
    at = datetime.now(UTC).strftime("%H:%M UTC")
    return f"  ... {done:,} batches at {at} ({rate:,.1f}/s, {left / 3600:.1f} h left at this pace)"


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()

    def asked(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, asked)
    signal.signal(signal.SIGTERM, asked)
    return stop


def _snapshots(location: Location) -> int:
    config = table_catalog.config_for(location)
    assert config is not None
    with table_catalog.threads_released():
        return len(table_catalog.load_table(location, config).snapshots())


FIGURE_HEADER = (
    f"{'batch':>8} {'ms/commit':>10} {'worst':>7} {'CPU ms':>7} {'KiB written':>12} "
    f"{'ledger files':>13} {'folded parts':>13} {'table metadata':>18} "
    f"{'current':>9} {'snapshots':>9} {'waiting':>8} {'data files':>10} "
    f"{'compactions: runs, median, records':>34}"
)


def _figure_line(f: Figures) -> str:
    k = f.kept
    return (
        f"{f.batch:>8,} {f.ms_per_commit:>10.1f} {f.ms_worst:>7.0f} {f.cpu_ms_per_commit:>7.1f} "
        f"{'n/a' if f.bytes_per_commit is None else f'{f.bytes_per_commit / 1024:.1f}':>12} "
        f"{k.ledger_files:>5} {k.ledger_bytes / 1024:>5.0f} KiB "
        f"{k.folded_files:>3} {k.folded_bytes / 1024:>6.0f} KiB "
        f"{k.metadata_files:>5} {k.metadata_bytes / 2**20:>7.1f} MiB "
        f"{k.current_metadata_bytes / 1024:>5.0f} KiB {f.snapshots:>9} {f.waiting:>8} "
        f"{k.data_files:>10} {f.compactions:>16}, {f.compaction_ms:>6.0f} ms, "
        f"{k.compaction_records:>4}"
    )


def commit_path_local(batches: int, grace_s: float, *, resume: bool) -> None:
    work = OUT / f"local-{batches}"
    soak = Soak(work, str(work / "out"), Params(batches, grace_s))
    resumed = soak.begin(resume=resume)
    print(
        f"\n1. the commit path on local disk: {batches:,} batches of one message, a minute "
        f"apart ({work}{', resumed' if resumed else ''})"
    )
    print(FIGURE_HEADER)
    drive(soak, written=_wchar, resumed=resumed)


def commit_path_s3(batches: int, grace_s: float) -> None:
    work = OUT / f"s3-{batches}"
    # moto's server keeps the bucket in memory: an S3 soak is never resumed.
    soak = Soak(work, "s3://soak/out", Params(batches, grace_s))
    soak.begin(resume=False)
    with MotoServer():
        location = resolve(soak.output)
        table_catalog.save_config(
            location, table_catalog.glue_config(location, database="soak", region="us-east-1")
        )
        print(
            f"\n1. the commit path on S3 (a moto server, Glue its catalog): {batches:,} batches "
            "of one message, a minute apart; KiB written: not measured (sockets)"
        )
        print(FIGURE_HEADER)
        drive(soak, written=None, resumed=False)


class MotoServer:
    """S3 and Glue on loopback, in a process of its own."""

    def __enter__(self) -> MotoServer:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{port}"
        self.process = subprocess.Popen(
            [PYTHON, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/").close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        self.saved = {k: os.environ.get(k) for k in _AWS}
        os.environ.update(
            {**_AWS, "AWS_ENDPOINT_URL": self.endpoint, "TABLECAST_S3_ENDPOINT": self.endpoint}
        )
        import boto3

        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket="soak")
        boto3.client("glue", endpoint_url=self.endpoint).create_database(
            DatabaseInput={"Name": "soak"}
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        os.environ.pop("AWS_ENDPOINT_URL", None)
        os.environ.pop("TABLECAST_S3_ENDPOINT", None)
        table_catalog._catalog.cache_clear()


_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# -- 2. and 3. real runs -------------------------------------------------------


@dataclass
class Run:
    durations_ms: list[float] = field(default_factory=list)
    at: dict[int, tuple[Kept, int]] = field(default_factory=dict)  # batch -> kept, bytes written
    seconds: float = 0.0
    metadata_peak: int = 0  # the most files the table's metadata folder held at once


def real_run(name: str, batches: int, extra: list[str], marks: tuple[int, ...]) -> Run:
    work = OUT / name
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    archive = work / "archive"
    write_archive(archive, 4 * batches)
    output = work / "out"
    argv = [
        PYTHON,
        "-m",
        "app",
        "run",
        "--archive",
        str(archive),
        "--output",
        str(output),
        "--checkpoint",
        str(work / "checkpoint"),
        "--trigger",
        "available-now",
        "--max-offsets-per-trigger",
        "4",
        "--metrics",
        "log",
        *extra,
    ]
    run = Run()
    started = time.monotonic()
    errors = (work / "stderr.txt").open("w")  # the job's log lines; its metrics on stdout
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, text=True)
    location = resolve(str(output))
    done = threading.Event()

    metadata = output / "_iceberg/table/metadata"

    def watch() -> None:  # the control data and the writes when the ledger reaches a mark
        pending = list(marks)
        while not done.is_set():
            with contextlib.suppress(FileNotFoundError):  # before the table's first commit
                run.metadata_peak = max(run.metadata_peak, len(os.listdir(metadata)))
            try:
                head = Ledger(location).head() if pending else None
            except Exception:  # a fold moved what it read: look again
                head = None
            if head is not None and head.batch_id is not None and head.batch_id + 1 >= pending[0]:
                run.at[pending.pop(0)] = (kept(location), _tree_wchar(process.pid))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("{") and '"BatchDurationMs"' in line:
            run.durations_ms.append(float(json.loads(line)["metrics"]["BatchDurationMs"]))
    process.wait()
    errors.close()
    done.set()
    watcher.join()
    run.seconds = time.monotonic() - started
    if process.returncode != 0:
        raise SystemExit(f"tablecast run ({name}) failed with exit code {process.returncode}")
    run.at[len(run.durations_ms)] = run.at.get(len(run.durations_ms), (kept(location), 0))
    return run


def _tree_wchar(root: int) -> int:
    """What ``root`` and its descendants wrote so far (/proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        with contextlib.suppress(OSError, StopIteration):  # a process that just ended
            total += _wchar(pid)
        stack.extend(children.get(pid, []))
    return total


def verify_line(name: str) -> str:
    work = OUT / name
    done = subprocess.run(
        [
            PYTHON,
            "-m",
            "app",
            "verify",
            "--archive",
            str(work / "archive"),
            "--output",
            str(work / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    table = next((line for line in lines if line.startswith("table:")), "table: none")
    return f"verify: exit {done.returncode}; {lines[-1] if lines else ''}; {table}"


def print_run(name: str, run: Run, marks: tuple[int, ...]) -> None:
    durations = run.durations_ms
    print(
        f"{'batch':>8} {'ms/batch':>9} {'KiB written/batch':>18} {'ledger files':>13} "
        f"{'table metadata':>18} {'current':>9}"
    )
    previous: tuple[int, int] = (0, 0)
    for mark in marks:
        if mark not in run.at:
            continue
        found, wrote = run.at[mark]
        window = durations[max(0, mark - WINDOW) : mark]
        per_batch = (wrote - previous[1]) / max(1, mark - previous[0]) if wrote else 0.0
        previous = (mark, wrote)
        median = statistics.median(window) if window else 0.0
        print(
            f"{mark:>8,} {median:>9.0f} {per_batch / 1024:>18.1f} {found.ledger_files:>13} "
            f"{found.metadata_files:>6} {found.metadata_bytes / 2**20:>7.1f} MiB "
            f"{found.current_metadata_bytes / 1024:>5.0f} KiB"
        )
    print(f"{len(durations):,} batches in {run.seconds:.0f} s")


def check_run(name: str, extra: list[str]) -> None:
    run = real_run(name, 400, extra, (100, 400))
    found = kept(resolve(str(OUT / name / "out")))
    early = statistics.median(run.durations_ms[10:60])
    late = statistics.median(run.durations_ms[-50:])
    current = found.current_metadata_bytes / 1024
    print(
        f"{' '.join(extra):<44} {len(run.durations_ms):>7} {current:>9.0f} KiB "
        f"{found.metadata_files:>9} {found.ledger_files + found.folded_files:>7} "
        f"{early:>7.0f} ms {late:>7.0f} ms   {verify_line(name)}",
        flush=True,
    )
    names = [p.name for p in (OUT / name / "out/_iceberg/table/metadata").iterdir()]
    lists = sum(1 for n in names if n.startswith("snap-") and n.endswith(".avro"))
    manifests = sum(1 for n in names if n.endswith(".avro")) - lists
    documents = sum(1 for n in names if n.endswith(".metadata.json"))
    print(
        f"{'':<44} metadata folder at the end: {lists} manifest lists, {manifests} manifests, "
        f"{documents} metadata files, {len(names) - lists - manifests - documents} other; "
        f"{run.metadata_peak} files at most during the run"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["commit", "s3", "run", "check"], action="append")
    parser.add_argument("--batches", type=int, default=100_000, help="local commits [100,000]")
    parser.add_argument(
        "--s3-batches", type=int, default=10_000, help="commits on moto's S3 [10,000]"
    )
    parser.add_argument(
        "--grace", type=float, default=5.0, help="the retire grace of part 1, seconds [5]"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start part 1 on local disk again (default: resume the same soak's folder)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    parts = set(args.only or ["commit", "s3", "run", "check"])
    if "commit" in parts:
        commit_path_local(args.batches, args.grace, resume=not args.fresh)
    if "s3" in parts:
        commit_path_s3(args.s3_batches, args.grace)
    if "run" in parts:
        print("\n2. tablecast run, 1,000 micro-batches of 4 messages, the default settings")
        run = real_run("run-1000", 1_000, [], (100, 1_000))
        print_run("run-1000", run, (100, 1_000))
        print(verify_line("run-1000"))
    if "check" in parts:
        print("\n3. 400 micro-batches of 4 messages with --table-history 30s")
        print(
            f"{'options':<44} {'batches':>7} {'current':>13} {'metadata':>9} {'ledger':>7} "
            f"{'early':>10} {'late':>10}"
        )
        check_run("history-30s", ["--table-history", "30s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
