"""Benchmark: the job against a stateless Spark copy of the same archive.

Generates a capture (default: 400 sessions, snapshots of 100 to 200 rows,
about 1,875 updates each: 750k messages), then runs, each as its own
process on local[2] with JVM start included:

- copy: the archive source straight into Spark's Parquet sink, no state;
- job:  ``tablecast run --trigger available-now`` (ordered state with
  ``transformWithStateInPandas``, exactly-once sink).

Prints messages per second for both, their ratio, and the peak memory of
each whole process tree (driver, JVM and Python workers). Figures, not
assertions: run ``make bench``.
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

from app import generate as gen

OUT = Path("bench/out")


@dataclass(frozen=True)
class Measured:
    seconds: float
    peak_rss_bytes: int


def _tree_rss(root: int) -> int:
    """Resident memory of ``root`` and all its descendants, from /proc."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            parents[int(entry)] = int(fields[1])
            rss[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


def measure(argv: list[str]) -> Measured:
    started = time.monotonic()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(process.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = process.wait()
    elapsed = time.monotonic() - started
    done.set()
    sampler.join()
    if code != 0:
        raise SystemExit(f"{argv[2:4]} failed with exit code {code}")
    return Measured(elapsed, peak)


def copy_main(archive: str, output: str, checkpoint: str) -> None:
    """The stateless baseline: same source, Spark's own Parquet sink."""
    from app.sources import backends, stream
    from app.spark_session import spark_session

    spark = spark_session("local[2]")
    spark.dataSource.register(stream.TablecastSource)
    options = backends.common_options("^sensor-.+", 0, None) | backends.archive_options(archive)
    frame = spark.readStream.format(stream.FORMAT).options(**options).load()
    query = (
        frame.writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--updates", type=int, default=1875)
    parser.add_argument("--rows-min", type=int, default=100)
    parser.add_argument("--rows-max", type=int, default=200)
    parser.add_argument("--copy-only", nargs=3, metavar=("ARCHIVE", "OUTPUT", "CHECKPOINT"))
    args = parser.parse_args()
    if args.copy_only:
        copy_main(*args.copy_only)
        return 0

    shutil.rmtree(OUT, ignore_errors=True)
    spec = gen.CaptureSpec(
        topics=8, partitions=4, sessions=args.sessions, rows_min=args.rows_min,
        rows_max=args.rows_max, updates=args.updates, records_per_file=50_000, seed=1,
    )  # fmt: skip
    started = time.monotonic()
    capture = gen.generate(spec)
    gen.write_archive(capture, str(OUT / "archive"), spec)
    messages = capture.messages
    print(f"generated {messages:,} messages in {time.monotonic() - started:.1f} s", flush=True)

    python = sys.executable
    archive = str(OUT / "archive")
    runs = {
        "copy": [python, "bench/job_vs_copy.py", "--copy-only", archive,
                 str(OUT / "copy"), str(OUT / "copy-checkpoint")],
        "job": [python, "-m", "app", "run", "--archive", archive,
                "--output", str(OUT / "job"), "--checkpoint", str(OUT / "job-checkpoint"),
                "--trigger", "available-now", "--max-offsets-per-trigger", "1000000"],
    }  # fmt: skip
    results = {name: measure(argv) for name, argv in runs.items()}
    from app import verify

    rows = verify.read_output(str(OUT / "job")).num_rows
    print(f"{'':8} {'seconds':>9} {'messages/s':>12} {'peak memory':>12}")
    for name, m in results.items():
        rate = messages / m.seconds
        print(f"{name:8} {m.seconds:>9.1f} {rate:>12,.0f} {m.peak_rss_bytes / 2**30:>9.2f} GiB")
    print(f"job output rows: {rows:,}")
    ratio = results["copy"].seconds / results["job"].seconds
    print(f"ratio job/copy speed: {ratio:.2f} (target >= 0.5)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
