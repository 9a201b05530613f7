"""A SIGKILL inside each step of the upkeep after a batch, then a cold resume.

The upkeep (steps 9 to 13 of :mod:`app.sink.commit`) keeps the table's
history and the ledger bounded: the table's commit (before step 8) expires
the snapshots older than the history, step 9 deletes the metadata files they
leave once the grace has run out, steps 10 to 13 fold old ledger entries
(:mod:`app.sink.fold`). With a history and a grace of zero every batch
expires and deletes, and folds come every ten batches, so one chain of
``tablecast run`` processes reaches each step: each run is killed at the
first time it reaches its step (``TABLECAST_CRASH_AFTER_STEP=<step>[.<n>]``
for any batch), and the next one, a cold start, resumes. At each kill a
plain reader and an Iceberg reader see exactly the published batches, whole
files, no row twice, and every snapshot the table offers can be read; after
the last run the output is exact, the ledger holds each batch once, and the
table follows it.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.contract.offsets import TopicPartition
from app.sink import fold as fold_mod
from app.sink import ledger as ledger_mod
from app.sink import rewrite as rewrite_mod
from app.sink.crash_points import CRASH_ENV, CRASH_MODE_ENV
from app.sink.ledger import Ledger
from app.storage import resolve
from app.table import commit as table_commit
from app.table.catalog import threads_released
from app.table.history import MetadataFiles
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.process_groups import reap_group
from tests.spark.helpers import assert_exact, expected_rows, run_argv_over, write_capture
from tests.table.helpers import (
    assert_every_snapshot_reads,
    assert_follows_ledger,
    load_table,
    table_rows,
)

SPEC = CaptureSpec(
    topics=1, partitions=2, sessions=6, updates=60, records_per_file=40, resync_every=8, seed=7
)
MAX_OFFSETS = 6  # about sixty batches: the first fold comes after twenty-six entries
# Each run is killed the first time it reaches its point (any batch); the last one ends.
CHAIN = ("8", "9.1", "9", "10", "11", "12.1", "12", "13")


def _run(archive: Path, output: Path, checkpoint: Path, crash: str | None) -> str:
    """A real ``tablecast run`` (its own JVM and Python workers: a cold start); its stderr."""
    env = {k: v for k, v in os.environ.items() if k not in (CRASH_ENV, CRASH_MODE_ENV)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            *run_argv_over(archive, output, checkpoint),
            "--max-offsets-per-trigger",
            str(MAX_OFFSETS),
            "--table-history",
            "0s",
            "--retire-grace",
            "0s",
            "--log-format",
            "json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env if crash is None else {**env, CRASH_ENV: crash},
    )
    try:
        _, stderr = process.communicate(timeout=600)
    finally:
        reap_group(process)
    text = stderr.decode()
    if crash is None:
        assert process.returncode == 0, text[-3000:]
    else:
        assert process.returncode == -signal.SIGKILL, text[-3000:]
        assert f"after step {crash} of batch" in text, text[-3000:]
    return text


def _assert_readers_exact(archive: Path, output: Path) -> None:
    """What a plain reader and an Iceberg reader see now: exactly the published batches."""
    ledger = Ledger(resolve(str(output)))
    head = ledger.head()
    assert head is not None
    shown = verify.expected_output(str(archive), "^sensor-.+", below=head.end).rows
    comparison = verify.compare(shown, verify.read_output(str(output)))
    assert comparison.ok, comparison.report()
    with threads_released():
        held = table_commit.position(load_table(output))
        assert held is not None and held.entry == head.number  # committed before step 8
        comparison = verify.compare(shown, table_rows(output))
        assert comparison.ok, comparison.report()
        assert_every_snapshot_reads(output)


def _assert_ledger_consistent(output: Path) -> None:
    """Each batch once, in order; every partition's ranges back to back, folded or not."""
    entries = Ledger(resolve(str(output))).entries()
    assert all(e.kind is ledger_mod.BATCH for e in entries)
    assert [e.batch_id for e in entries] == list(range(len(entries)))
    ends: dict[TopicPartition, int] = {}
    for entry in entries:
        for tp, (start, end) in entry.ranges(None).items():
            assert start == ends.get(tp, 0), (entry.number, tp, start)
            ends[tp] = end
    files = [f for e in entries for f in e.files]
    assert len(files) == len(set(files))


@pytest.mark.spark
@pytest.mark.chain
def test_sigkilled_inside_each_upkeep_step_in_turn_every_cold_resume_is_exact(
    tmp_path: Path,
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, SPEC)
    location = resolve(str(output))
    ledger = Ledger(location)
    for where in CHAIN:
        _run(archive, output, checkpoint, crash=where)
        _assert_readers_exact(archive, output)
        _assert_ledger_consistent(output)
        if where == "11":  # the part and its head written, the entries not yet deleted
            head = ledger.fold_head()
            assert head is not None
            assert any(n <= head.through for n in ledger.numbers() if n > 0)
    _run(archive, output, checkpoint, crash=None)

    assert_exact(archive, output)
    _assert_ledger_consistent(output)
    entries = ledger.entries()
    assert sum(e.rows for e in entries) == len(expected_rows(archive).rows)
    head = ledger.fold_head()
    assert head is not None and head.entries > 2 * fold_mod.FOLD_MIN  # it folded, twice
    claims = len(CHAIN) + 1  # one a start: never folded
    assert len(ledger.numbers()) <= fold_mod.LIVE_MIN + fold_mod.FOLD_MIN + claims
    with threads_released():
        assert_follows_ledger(output)
        comparison = verify.compare(expected_rows(archive).rows, table_rows(output))
        assert comparison.ok, comparison.report()
        # What the killed runs left unreferenced is found by a listing of the folder and
        # goes (a next start's), but for what a commit under way could still be writing.
        files = MetadataFiles(grace_s=0.0)
        table = load_table(output)
        files.note(location, table)
        files.delete(location, table, lambda: None)
        folder = output / "_iceberg/table/metadata"
        referenced = {
            os.path.basename(p)
            for s in table.snapshots()
            for p in itertools.chain(
                [s.manifest_list], (m.manifest_path for m in s.manifests(table.io))
            )
        }
        current = table.current_snapshot()
        assert current is not None
        recent = current.timestamp_ms / 1000 - rewrite_mod.MAX_CLOCK_SKEW_S
        left = {p.name for p in folder.glob("*.avro") if p.stat().st_mtime < recent}
        assert left <= referenced
        assert len(list(folder.glob("*.metadata.json"))) <= 11
        assert_every_snapshot_reads(output)
