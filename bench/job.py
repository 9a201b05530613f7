"""Benchmark: the job on local Spark, against a stateless copy, two peers and a floor.

Every run is its own process on ``local[2]``, JVM start included; its peak
memory and CPU time (core-seconds) are those of the whole process tree
(driver JVM and Python workers), sampled from /proc. Figures, not
assertions: ``make bench``.

1. On the heavy capture (:data:`HEAVY`: 764,400 messages, 400 sessions of
   200-row tables with a resync every 55 messages, 6.7 output rows a
   message; ``--archive`` reuses one already written):
   - idle: the job over an empty archive (JVM, session, query): what a run
     costs before its batches;
   - copy: the same source straight into Spark's Parquet sink, no state
     (the I/O floor), with the job's JVM options and with Spark's defaults:
     the job is compared with the faster;
   - job: ``tablecast run --trigger available-now``;
   - replay: ``tablecast replay`` of every range the job published, from
     the archive, replacing its files in place;
   - peers (bench/peer.py), as a skilled PySpark 4 user writes them:
     ``groupBy(key).applyInPandasWithState`` with JSON state and Spark's
     file sink, with naive per-message code and again with the job's own
     (only the structure differs), and ``transformWithState`` on the
     RocksDB state store with the session as one JSON ``ValueState``, all
     three on Spark's default JVM options (faster for them than the job's);
   - floor (bench/floor.py): one plain Python process doing the same
     parsing, state and writing; the job's batches (its core-seconds less
     the idle run's) are compared with the floor's core-seconds.
2. The same traffic from 40 long sessions and from 10,000 sessions live at
   once (about 750k messages each): the job's messages per second.
3. A capture of about 5M messages in one available-now run, batches
   bounded by ``--max-offsets-per-trigger``, Spark's default driver memory.
4. A wide declared schema (:data:`WIDE_SCHEMA`: a composite key and about
   ten columns of every type, one renamed; :data:`WIDE`, about 300,000
   messages): the job with ``--schema`` against the copy of the same archive,
   and against Spark's own typed parse of it (``from_json`` with the declared
   types, a row per message row: stateless and lenient, where the job is
   ordered, stateful and checks rule 7).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.contract.schema import load_schema
from app.spark.session import local_java_options
from app.tools import generate as gen
from bench.peer import TWS

OUT = Path("bench/out")
PYTHON = sys.executable
# The heavy capture: 400 sessions of 200-row tables, a resync every 55 messages,
# 764,400 messages over 4 topics x 2 partitions, about 6.3 output rows a message.
HEAVY = gen.CaptureSpec(
    topics=4,
    partitions=2,
    sessions=400,
    rows_min=200,
    rows_max=200,
    updates=1909,
    resync_every=55,
    records_per_file=50_000,
    seed=1,
)


WIDE_SCHEMA = Path(__file__).with_name("wide.toml")
# The wide schema's capture: 160 sessions of 100-row tables, a resync every 55 messages.
WIDE = gen.CaptureSpec(
    topics=4,
    partitions=2,
    sessions=160,
    rows_min=100,
    rows_max=100,
    updates=1900,
    resync_every=55,
    records_per_file=50_000,
    seed=5,
    schema=load_schema(str(WIDE_SCHEMA)),
)


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_bytes: int
    cpu_seconds: float  # user + system of the whole process tree, sampled
    stdout: str


@dataclass(frozen=True)
class _Sample:
    rss: int  # bytes, the tree's now
    cpu: dict[int, float]  # seconds of user + system, per process of the tree


def _tree(root: int) -> _Sample:
    """Resident memory and CPU time of ``root`` and all its descendants, from /proc."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            pid = int(entry)
            parents[pid] = int(fields[1])
            rss[pid] = int(fields[21]) * PAGE
            cpu[pid] = (int(fields[11]) + int(fields[12])) / TICKS
        except (OSError, IndexError, ValueError):
            continue
    total, stack, seen = 0, [root], {}
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        seen[pid] = cpu.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return _Sample(total, seen)


PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def measure(argv: list[str], env: dict[str, str] | None = None) -> Measured:
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    peak = 0
    cpu: dict[int, float] = {}  # each process's latest figure: a process that ended keeps its last
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            now = _tree(process.pid)
            peak = max(peak, now.rss)
            cpu.update(now.cpu)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, _ = process.communicate()
    elapsed = time.monotonic() - started
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv[1:4])} failed with exit code {process.returncode}")
    return Measured(elapsed, peak, sum(cpu.values()), stdout)


def write(name: str, spec: gen.CaptureSpec) -> tuple[str, int]:
    started = time.monotonic()
    capture = gen.generate(spec)
    archive = str(OUT / name / "archive")
    gen.write_archive(capture, archive, spec)
    print(
        f"{name}: {capture.messages:,} messages of {spec.sessions:,} sessions generated in "
        f"{time.monotonic() - started:.0f} s",
        flush=True,
    )
    return archive, capture.messages


def job(
    name: str,
    archive: str,
    max_offsets: int,
    env: dict[str, str] | None = None,
    extra: tuple[str, ...] = (),
) -> Measured:
    return measure(
        [
            PYTHON,
            "-m",
            "app",
            "run",
            "--archive",
            archive,
            "--output",
            str(OUT / name / "job"),
            "--checkpoint",
            str(OUT / name / "job-checkpoint"),
            "--trigger",
            "available-now",
            "--max-offsets-per-trigger",
            str(max_offsets),
            *extra,
        ],
        env=env,
    )


def row(label: str, messages: int, m: Measured) -> str:
    return (
        f"{label:<44} {m.seconds:>8.1f} {messages / m.seconds:>11,.0f} "
        f"{m.cpu_seconds:>9.1f} {m.peak_rss_bytes / 2**30:>7.2f} GiB"
    )


HEADER = f"{'run':<44} {'seconds':>8} {'messages/s':>11} {'core-s':>9} {'peak memory':>11}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["runs", "sessions", "big", "wide"], action="append")
    parser.add_argument(
        "--big-sessions",
        type=int,
        default=2_666,
        help="sessions of the big run (1,877 messages each) [~5M messages]",
    )
    parser.add_argument("--copy", nargs=3, metavar=("ARCHIVE", "OUTPUT", "CHECKPOINT"))
    parser.add_argument("--parse", nargs=3, metavar=("ARCHIVE", "OUTPUT", "CHECKPOINT"))
    parser.add_argument("--peer", nargs=4, metavar=("CODE", "ARCHIVE", "OUTPUT", "CHECKPOINT"))
    parser.add_argument(
        "--java-options",
        default=local_java_options(),
        help="the local JVM's options of a --copy or --peer run ('': Spark's defaults)",
    )
    parser.add_argument(
        "--archive",
        help="the runs' capture: an archive already written "
        "with the heavy spec (skips generating it)",
    )
    args = parser.parse_args()
    if args.copy:
        archive, output, checkpoint = args.copy
        copy_main(archive, output, checkpoint, java_options=args.java_options)
        return 0
    if args.parse:
        archive, output, checkpoint = args.parse
        parse_main(archive, output, checkpoint, java_options=args.java_options)
        return 0
    if args.peer:
        from bench.peer import run_peer

        code, archive, output, checkpoint = args.peer
        run_peer(archive, output, checkpoint, 1_000_000, code=code, java_options=args.java_options)
        return 0
    parts = set(args.only or ["runs", "sessions", "big", "wide"])
    shutil.rmtree(OUT, ignore_errors=True)

    if "runs" in parts:
        if args.archive:
            archive, messages = args.archive, _rows(Path(args.archive))
        else:
            archive, messages = write("runs", HEAVY)
        d = OUT / "runs"
        empty = d / "empty-archive"
        empty.mkdir(parents=True)
        # JVM, session and query start with nothing to read: what a run costs before batches.
        idle = job("runs-empty", str(empty), 1_000_000)
        # The copy with the job's JVM options (faster for it, as for the job) and with
        # Spark's defaults; the job is compared with the faster.
        copies = {
            name: measure(
                [
                    PYTHON,
                    "-m",
                    "bench.job",
                    "--copy",
                    archive,
                    str(d / f"copy-{name}"),
                    str(d / f"copy-{name}-checkpoint"),
                    f"--java-options={options}",
                ]
            )
            for name, options in (("tablecast", local_java_options()), ("spark", ""))
        }
        copy = min(copies.values(), key=lambda m: m.seconds)
        ours = job("runs", archive, 1_000_000)
        # Every range the job published, recomputed from the archive and replaced in place.
        replayed = measure(
            [
                PYTHON,
                "-m",
                "app",
                "replay",
                "--archive",
                archive,
                "--output",
                str(d / "job"),
                "--since",
                "1970-01-01T00:00:00Z",
                "--until",
                "2100-01-01T00:00:00Z",
            ]
        )
        peers = {
            code: measure(
                [
                    PYTHON,
                    "-m",
                    "bench.job",
                    "--peer",
                    code,
                    archive,
                    str(d / f"peer-{code}"),
                    str(d / f"peer-{code}-checkpoint"),
                    # Spark's own JVM defaults: faster for the peers' shuffle and state
                    # store than the job's C1-only options (measured: 40.8 against 44.6 s).
                    "--java-options=",
                ]
            )
            for code in ("naive", "engine", TWS)
        }
        floor = measure([PYTHON, "-m", "bench.floor", archive, str(d / "floor")])
        from app.tools import verify

        rows = verify.read_output(str(d / "job")).num_rows
        print(HEADER)
        print(row("idle job (JVM, session, query; no records)", messages, idle))
        print(row("copy, the job's JVM options", messages, copies["tablecast"]))
        print(row("copy, Spark's default JVM options", messages, copies["spark"]))
        print(row("job (tablecast run)", messages, ours))
        print(row("replay of all of it (tablecast replay)", messages, replayed))
        print(row("peer: applyInPandasWithState, JSON state", messages, peers["naive"]))
        print(row("peer: the same with the job's message code", messages, peers["engine"]))
        print(row("peer: transformWithState, RocksDB", messages, peers[TWS]))
        print(row("floor: one plain Python process", messages, floor))
        counts = ", ".join(f"peer {c} {_rows(d / f'peer-{c}'):,}" for c in peers)
        print(
            f"output rows: job {rows:,} ({rows / messages:.1f} a message), {counts}, "
            f"floor {_rows(d / 'floor'):,}"
        )
        best_peer = min(peers["naive"].seconds, peers[TWS].seconds)
        batches_cpu = ours.cpu_seconds - idle.cpu_seconds
        print(
            f"job at {copy.seconds / ours.seconds:.2f} of the faster copy's speed (target >= 1.0), "
            f"{best_peer / ours.seconds:.2f} times the faster naive peer's (target >= 2), "
            f"{peers['engine'].seconds / ours.seconds:.2f} times the peer with the same "
            f"message code; its batches cost {batches_cpu:.1f} core-s, "
            f"{batches_cpu / floor.cpu_seconds:.2f} of the floor's {floor.cpu_seconds:.1f} "
            "(target <= 1.25)",
            flush=True,
        )

    if "sessions" in parts:
        few = gen.CaptureSpec(
            topics=8,
            partitions=4,
            sessions=40,
            rows_min=10,
            rows_max=20,
            updates=18_750,
            records_per_file=50_000,
            seed=2,
        )
        many = gen.CaptureSpec(
            topics=8,
            partitions=4,
            sessions=10_000,
            rows_min=10,
            rows_max=20,
            updates=73,
            concurrent=10_000,
            records_per_file=50_000,
            seed=3,
        )
        results = {}
        for name, spec in (("sessions-40", few), ("sessions-10000", many)):
            archive, messages = write(name, spec)
            results[name] = (messages, job(name, archive, 1_000_000))
        print(HEADER)
        for name, (messages, m) in results.items():
            print(row(f"job, {name.split('-')[1]} live sessions", messages, m))
        (m40, r40), (m10k, r10k) = results["sessions-40"], results["sessions-10000"]
        ratio = (m10k / r10k.seconds) / (m40 / r40.seconds)
        print(
            f"10,000 sessions at {ratio:.2f} of 40 sessions' throughput (target >= 0.90)",
            flush=True,
        )

    if "big" in parts:
        spec = gen.CaptureSpec(
            topics=8,
            partitions=4,
            sessions=args.big_sessions,
            rows_min=10,
            rows_max=40,
            updates=1875,
            records_per_file=100_000,
            seed=4,
        )
        archive, messages = write("big", spec)
        env = {k: v for k, v in os.environ.items() if k != "TABLECAST_DRIVER_MEMORY"}
        m = job("big", archive, 500_000, env=env)
        batches = sum(1 for line in m.stdout.splitlines() if line.startswith("batch "))
        print(HEADER)
        print(row(f"job, {messages:,} messages", messages, m))
        print(f"{batches} batches of at most 500,000 offsets, Spark's default driver memory (1g)")

    if "wide" in parts:
        wide_part()
    return 0


def wide_part() -> None:
    """The job over a wide declared schema against the copy of the same archive."""
    archive, messages = write("wide", WIDE)
    d = OUT / "wide"
    # Spark's own typed parse of the same messages, with the job's JVM options (faster).
    # First: its minute of both cores is not to sit between the copy and the job, which
    # run last and one after the other, as the pairs of design.md do.
    parse = measure(
        [
            PYTHON,
            "-m",
            "bench.job",
            "--parse",
            archive,
            str(d / "parse"),
            str(d / "parse-checkpoint"),
            f"--java-options={local_java_options()}",
        ]
    )
    copies = {
        name: measure(
            [
                PYTHON,
                "-m",
                "bench.job",
                "--copy",
                archive,
                str(d / f"copy-{name}"),
                str(d / f"copy-{name}-checkpoint"),
                f"--java-options={options}",
            ]
        )
        for name, options in (("spark", ""), ("tablecast", local_java_options()))
    }
    copy = min(copies.values(), key=lambda m: m.seconds)
    ours = job("wide", archive, 1_000_000, extra=("--schema", str(WIDE_SCHEMA)))
    rows = _rows(d / "job")
    print(HEADER)
    print(row("copy, the job's JVM options", messages, copies["tablecast"]))
    print(row("copy, Spark's default JVM options", messages, copies["spark"]))
    print(row("Spark's typed parse (from_json, stateless)", messages, parse))
    print(row(f"job, wide schema ({len(WIDE.schema.columns)} columns)", messages, ours))
    print(
        f"wide schema: {rows:,} output rows ({rows / messages:.1f} a message); job at "
        f"{copy.seconds / ours.seconds:.2f} of the faster copy's speed (target >= 1.0), "
        f"{parse.seconds / ours.seconds:.2f} of Spark's typed parse's",
        flush=True,
    )


def _rows(path: Path) -> int:
    import pyarrow.dataset as ds

    rows: int = ds.dataset(str(path), format="parquet").count_rows()
    return rows


def parse_main(archive: str, output: str, checkpoint: str, java_options: str) -> None:
    """Spark's own parse of the wide archive: ``from_json`` with the declared types and one
    output row per message row, stateless and lenient (no rule 7, no order, no deletes):
    what Spark costs to turn the same messages into the same typed columns."""
    from pyspark.sql import functions as F  # noqa: N812 (as PySpark writes it)

    from app.contract.schema import ColumnType

    columns = load_schema(str(WIDE_SCHEMA)).columns
    # Texts where a JSON value may take two forms (epoch milliseconds or RFC 3339; a
    # decimal's literal or its string), cast after the parse.
    read_as = {
        ColumnType.STRING: "string",
        ColumnType.INT64: "bigint",
        ColumnType.FLOAT64: "double",
        ColumnType.BOOL: "boolean",
        ColumnType.TIMESTAMP: "string",
        ColumnType.DATE: "string",
        ColumnType.DECIMAL: "string",
    }
    row = ", ".join(f"`{c.name}`: {read_as[c.type]}" for c in columns)
    ddl = f"session string, seq bigint, type string, ts bigint, rows array<struct<{row}>>"

    def typed(c: Any) -> Any:
        text = F.col(f"row.`{c.name}`")
        if c.type is ColumnType.TIMESTAMP:
            millis = F.timestamp_millis(text.try_cast("bigint"))
            return F.coalesce(millis, F.try_to_timestamp(text)).alias(c.output)
        if c.type is ColumnType.DATE:
            return F.to_date(text).alias(c.output)
        if c.type is ColumnType.DECIMAL:
            return text.cast(f"decimal({c.precision},{c.scale})").alias(c.output)
        return text.alias(c.output)

    # Lenient as Spark's JSON reader is: a value it cannot type is null, not a failure (its
    # StringType reads a decimal literal through a double: 9999999999999999.99 overflows).
    frame = _archive_frame(archive, java_options, {"spark.sql.ansi.enabled": "false"})
    doc = F.from_json(F.col("value").cast("string"), ddl)
    parsed = frame.select("topic", "partition", "offset", doc.alias("doc")).select(
        "topic",
        "partition",
        "offset",
        "doc.session",
        "doc.seq",
        "doc.type",
        F.timestamp_millis("doc.ts").alias("ts"),
        F.explode_outer("doc.rows").alias("row"),
    )
    out = parsed.select(
        "topic", "partition", "offset", "session", "seq", "type", "ts", *map(typed, columns)
    )
    _to_parquet(out, output, checkpoint)


def copy_main(archive: str, output: str, checkpoint: str, java_options: str) -> None:
    """The stateless baseline: same source, Spark's own Parquet sink."""
    _to_parquet(_archive_frame(archive, java_options), output, checkpoint)


def _archive_frame(archive: str, java_options: str, conf: dict[str, str] | None = None) -> Any:
    """The archive's records as the job's source reads them, on a local Spark of its own."""
    from app.sources import backend_options, stream
    from app.spark.session import spark_session

    spark = spark_session("local[2]", java_options)
    for key, value in (conf or {}).items():
        spark.conf.set(key, value)
    spark.dataSource.register(stream.TablecastSource)
    options = backend_options.common_options("^sensor-.+", 0, None)
    options |= backend_options.archive_options(archive)
    return spark.readStream.format(stream.FORMAT).options(**options).load()


def _to_parquet(frame: Any, output: str, checkpoint: str) -> None:
    """``frame`` into Spark's own Parquet sink, every record available now."""
    query = (
        frame.writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    sys.exit(main())
