"""Benchmark: what a compaction's step 1 and a recompute read of the compaction history.

A job compacting each closed day keeps a record a day of the inputs it merged
(``app/table/compact.py``): at a minute's trigger 1,440 input names, about
131 KiB. On local disk, ``--days`` (365) such records as an older tablecast
wrote them (flat, ``_tablecast/ledger/compactions/<digest>.json``, each merged
file present), then:

1. **Every record** (the flat layout: what each compaction's step 1 and each
   recompute read, whatever they touched): the blocks of every merged file
   (``merged_blocks`` of every day), and step 1's check of every record (its
   merged file's existence).
2. **The move** into the days' folders, once, by the next compaction's step 1.
3. **By day**: a compaction's step 1 after it (nothing pending), and the blocks
   of the merged files of one day and of 31 days (a recompute of a day, of a
   month).

Each figure is the median of ``--repeat`` runs, with the records read and
their bytes. Figures, not assertions: ``make bench``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path

from app.sink import rewriter as rewriter_mod
from app.storage import Location, resolve
from app.table import compact as table_compact

OUT = Path("bench/out/compaction_records")
FIRST_DAY = date(2025, 1, 1)


def history(location: Location, days: int, inputs: int) -> None:
    """A flat record for each day, as an older tablecast wrote it, its merged file there."""
    for number in range(days):
        day = FIRST_DAY + timedelta(days=number)
        names = tuple(
            f"{day.isoformat()}/part-sensor-{i % 32}-{i:020d}-{i + 1:020d}-0.parquet"
            for i in range(number * inputs, (number + 1) * inputs)
        )
        group = table_compact.Group(day, names, 0)
        record = table_compact.CompactionRecord(
            day.isoformat(), names, group.output, inputs, f"{day.isoformat()}T20:00:00+00:00"
        )
        location.write_bytes_atomic(
            location.child(table_compact.RECORDS_DIR, f"{group.digest}.json"), record.to_json()
        )
        location.write_bytes_atomic(location.child(group.output), b"")


@contextmanager
def counted(location: Location) -> Iterator[list[int]]:
    """The sizes of the records read meanwhile (the class's ``read_bytes``, wrapped)."""
    sizes: list[int] = []
    cls = type(location)
    original = cls.read_bytes
    under = location.child(table_compact.RECORDS_DIR)

    def read_bytes(self: Location, path: str) -> bytes:
        data = original(self, path)
        if path.startswith(under):
            sizes.append(len(data))
        return data

    cls.read_bytes = read_bytes  # type: ignore[method-assign]
    try:
        yield sizes
    finally:
        cls.read_bytes = original  # type: ignore[method-assign]


def measure(location: Location, label: str, work: Callable[[], object], repeat: int) -> None:
    times: list[float] = []
    read: list[int] = []  # the last run's
    for _ in range(repeat):
        with counted(location) as sizes:
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        read = sizes
    print(
        f"{label:<58} {statistics.median(times) * 1000:>9.2f} ms "
        f"{len(read):>6} records {sum(read) / 1024**2:>8.1f} MiB"
    )


def every_record_checked(location: Location) -> None:
    """Step 1 before: each record read, its merged file's existence asked."""
    for record in table_compact.records(location):
        location.exists(location.child(record.output))


def _step_one(location: Location) -> int:
    """A compaction's step 1 as ``tablecast compact`` runs it: under its rewriter claim."""
    with rewriter_mod.held(location, rewriter_mod.Claimant("compact")) as claim:
        return table_compact.finish_interrupted(location, claim)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--inputs", type=int, default=1_440, help="input names a day")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shutil.rmtree(OUT, ignore_errors=True)
    location = resolve(str((OUT / "output").resolve()))
    history(location, args.days, args.inputs)
    month = {FIRST_DAY + timedelta(days=n) for n in range(31)}
    print(f"{args.days} days of compaction records, {args.inputs:,} inputs each, local disk")
    measure(
        location,
        "flat: merged_blocks, every day",
        lambda: table_compact.merged_blocks(location),
        args.repeat,
    )
    measure(
        location,
        "flat: step 1's check of every record",
        lambda: every_record_checked(location),
        args.repeat,
    )
    measure(
        location,
        "the move into days' folders (once)",
        lambda: _step_one(location),
        1,
    )
    measure(
        location,
        "by day: step 1 (finish_interrupted)",
        lambda: _step_one(location),
        args.repeat,
    )
    measure(
        location,
        "by day: merged_blocks, one day",
        lambda: table_compact.merged_blocks(location, days={FIRST_DAY}),
        args.repeat,
    )
    measure(
        location,
        "by day: merged_blocks, 31 days",
        lambda: table_compact.merged_blocks(location, days=month),
        args.repeat,
    )
    measure(
        location,
        "by day: merged_blocks, every day",
        lambda: table_compact.merged_blocks(location),
        args.repeat,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
