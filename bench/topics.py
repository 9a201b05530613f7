"""Benchmark: the same capture read wide (50 topics x 4 partitions) and narrow (2 x 4).

Both captures hold the same 400 sessions and about 9,600 messages; only how
many topic-partitions carry them differs. Each is run as a whole process
(``tablecast run --trigger available-now --max-offsets-per-trigger 3000`` on
``local[2]``, JVM start included), and the output is counted: the files a
batch published (output and quarantine, from the ledger's entries). The wide
run's time over the narrow one's is the figure the engine's grouping of small
topic-partitions into one task (docs/design.md, "Tasks") keeps low.

``--before DIR``: also run a checkout's code (its ``.venv/bin/python``, from
``DIR``), as a baseline. Figures, not assertions: ``make bench``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools import generate as gen
from bench.job import measure

OUT = Path("bench/out/topics")
MAX_OFFSETS = 3_000


def spec(topics: int) -> gen.CaptureSpec:
    """400 sessions of 5 to 20 rows, 22 updates each, over ``topics`` x 4 partitions."""
    return gen.CaptureSpec(
        topics=topics, partitions=4, sessions=400, updates=22, resync_every=12, seed=3
    )


def files_per_batch(output: Path) -> tuple[int, float, int]:
    """Batches, files published per batch (mean) and at most, from the ledger's entries."""
    entries = Ledger(resolve(str(output))).entries()
    counts = [len(e.files) for e in entries if e.kind == ledger_mod.BATCH]
    if not counts:
        return 0, 0.0, 0
    return len(counts), sum(counts) / len(counts), max(counts)


def run(label: str, archive: Path, python: str, cwd: str) -> tuple[float, int, float, int]:
    out = OUT / label
    shutil.rmtree(out, ignore_errors=True)
    argv = [
        python,
        "-m",
        "app",
        "run",
        "--archive",
        str(archive.resolve()),
        "--output",
        str((out / "output").resolve()),
        "--checkpoint",
        str((out / "checkpoint").resolve()),
        "--trigger",
        "available-now",
        "--max-offsets-per-trigger",
        str(MAX_OFFSETS),
    ]
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    here = os.getcwd()
    os.chdir(cwd)  # `-m app` imports the checkout it runs in
    try:
        measured = measure(argv, env=env)
    finally:
        os.chdir(here)
    batches, mean, most = files_per_batch(out / "output")
    return measured.seconds, batches, mean, most


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a checkout whose .venv runs the baseline")
    args = parser.parse_args()
    archives: dict[str, Path] = {}
    for name, topics in (("narrow", 2), ("wide", 50)):
        archive = OUT / f"{name}-archive"
        shutil.rmtree(archive, ignore_errors=True)
        capture = gen.generate(spec(topics))
        gen.write_archive(capture, str(archive), spec(topics))
        archives[name] = archive
        print(f"{name}: {topics} topics x 4 partitions, {capture.messages:,} messages", flush=True)
    codes = [("this checkout", sys.executable, os.getcwd())]
    if args.before:
        root = os.path.abspath(args.before)
        codes.insert(0, ("before", os.path.join(root, ".venv/bin/python"), root))
    print(
        f"{'code':<14} {'capture':<8} {'seconds':>8} {'batches':>8} {'files/batch':>12} {'max':>5}"
    )
    for code, python, cwd in codes:
        seconds: dict[str, float] = {}
        for name, archive in archives.items():
            took, batches, mean, most = run(f"{code.split()[0]}-{name}", archive, python, cwd)
            seconds[name] = took
            print(
                f"{code:<14} {name:<8} {took:>8.1f} {batches:>8} {mean:>12.1f} {most:>5}",
                flush=True,
            )
        print(f"{code:<14} wide / narrow: {seconds['wide'] / seconds['narrow']:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
