"""A faulty version of the job and the fixed one after it: what corrections correct.

The recompute tests (``tests/spark``) and the table's (``tests/table``) set
up the same history: the faulty version runs over the first part of a
capture, then the fixed version over all of it; a correction then replaces
the faulty version's ranges.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from app import defaults
from app.code_version import job_version
from app.contract.envelope import Envelope, MessageType
from app.contract.processor import Changes
from app.contract.table_processor import Table, TableProcessor
from app.tools.generate import CaptureSpec
from tests.spark.helpers import copy_files, run_job

SPEC = CaptureSpec(
    topics=2, partitions=2, sessions=10, updates=80, resync_every=20, records_per_file=60, seed=6
)
PATTERN = "^sensor-.+"
FAULTY = "9.9.9-faulty"
FIXED = "9.9.10"


class DroppingProcessor(TableProcessor):
    """A faulty version of the built-in processor: forgets the upserted rows of every fifth
    update."""

    name = TableProcessor.name  # the built-in, in another version

    def apply(self, state: Table, message: Envelope) -> tuple[Table, Changes]:
        table, changes = super().apply(state, message)
        if message.type is MessageType.UPDATE and message.seq % 5 == 2:
            return table, Changes((), changes.deleted)
        return table, changes


def as_version(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    """The job, in this process, as ``version`` of it (the ledger records it) until the
    test ends (tests/conftest.py drops the cached version after every test)."""
    monkeypatch.setenv("TABLECAST_JOB_VERSION", version)
    job_version.cache_clear()


def run_faulty(
    spark: Any,
    full: Path,
    archive: Path,
    output: Path,
    checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    below: int,
    max_offsets: int = defaults.MAX_OFFSETS_PER_TRIGGER,
) -> None:
    """The faulty version over the capture's files starting below offset ``below``."""
    copy_files(full, archive, lambda rel: int(rel.name.split("-")[0]) < below)
    as_version(monkeypatch, FAULTY)
    run_job(
        spark,
        archive,
        output,
        checkpoint,
        processor=DroppingProcessor(),
        max_offsets_per_trigger=max_offsets,
    )


def run_fixed(
    spark: Any,
    full: Path,
    archive: Path,
    output: Path,
    checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    max_offsets: int = defaults.MAX_OFFSETS_PER_TRIGGER,
) -> None:
    """The fixed version over the whole capture, resuming where the faulty one stopped."""
    as_version(monkeypatch, FIXED)
    shutil.rmtree(archive)
    shutil.copytree(full, archive)
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=max_offsets)
