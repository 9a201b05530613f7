"""Resync mode on Spark with a session in two partitions: the batch's second pass runs."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from app.engine.machine import IntegrityMode
from app.errors import Rule
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools.generate import CaptureSpec, Fault
from tests.spark.helpers import assert_exact, expected_rows, run_job, write_capture

pytestmark = pytest.mark.spark

# Session 0's last message lands in the other partition (rule 6), beside other faults.
SPEC = CaptureSpec(
    topics=1,
    partitions=2,
    sessions=6,
    updates=16,
    records_per_file=30,
    resync_every=5,
    seed=17,
    faults=(Fault.PARTITION_SWITCH, Fault.SEQ_GAP),
)


def test_a_session_in_a_second_partition_is_quarantined_after_a_second_pass(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    capture = write_capture(archive, SPEC)
    switched = [f for f in capture.faults if f.fault is Fault.PARTITION_SWITCH]
    assert len(switched) == 1
    caplog.set_level(logging.INFO, logger="app.engine")
    reports = run_job(
        spark,
        archive,
        output,
        checkpoint,
        integrity=IntegrityMode.RESYNC,
        max_offsets_per_trigger=40,
    )
    passes = [r for r in caplog.records if "running the batch again" in r.getMessage()]
    assert len(passes) == 1, "the batch with the trespass runs twice"
    assert_exact(archive, output, IntegrityMode.RESYNC)
    quarantine = (
        ds.dataset(output / "_quarantine", format="parquet", partitioning="hive")
        .to_table()
        .to_pylist()
    )
    expected = expected_rows(archive, IntegrityMode.RESYNC).quarantined
    assert len(quarantine) == len(expected) == sum(r.quarantined for r in reports)
    fault = switched[0]
    at = [q for q in quarantine if (q["partition"], q["offset"]) == (fault.partition, fault.offset)]
    assert len(at) == 1 and at[0]["reason"].startswith(f"rule {int(Rule.ONE_PARTITION)}")
    # The ledger's last entry names, per partition, the one state version the next batch loads.
    head = Ledger(resolve(str(output))).head()
    assert head is not None and head.states is not None
    for tp, version in head.states.items():
        directory = checkpoint / "tablecast" / "state" / tp.topic / str(tp.partition)
        assert (directory / f"{version.offset:020d}-{version.digest}.state").is_file()
