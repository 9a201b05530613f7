"""The job commits every batch to the output's Iceberg table, exactly once, crash or not.

The crash cases reuse the sink's step-by-step machinery
(``tests/sink/test_commit_steps.py``): the sink fails right after each of
the protocol's steps of batch 1 (``CrashMode.RAISE``, one shared
SparkSession), then a plain run resumes. After step 7 the ledger holds the
batch and the table does not yet: the resumed run commits it once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.contract.offsets import Offsets
from app.errors import OutputStateError
from app.sink.commit import STEPS
from app.sink.ledger import Ledger
from app.storage import resolve
from app.table import commit as table_commit
from app.table.check import check_table
from app.tools import verify
from tests.sink.commit_steps_harness import MAX_OFFSETS, SPEC, crash_in_process
from tests.spark.helpers import expected_rows, run_job, write_capture
from tests.table.helpers import assert_follows_ledger, load_table, table_rows


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("table") / "archive"
    write_capture(path, SPEC)
    return path


def _assert_table_exact(archive: Path, output: Path, below: Offsets | None = None) -> None:
    shown = (
        expected_rows(archive)
        if below is None
        else verify.expected_output(str(archive), "^sensor-.+", below=below)
    )
    comparison = verify.compare(shown.rows, table_rows(output))
    assert comparison.ok, comparison.report()


@pytest.mark.spark
def test_a_run_commits_one_append_snapshot_per_batch(
    archive: Path, spark: Any, tmp_path: Path
) -> None:
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    reports = run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS)
    assert len(reports) >= 3
    _assert_table_exact(archive, output)
    assert_follows_ledger(output, complete=True)
    table = load_table(output)
    assert {s.summary.operation.value for s in table.snapshots() if s.summary} == {"append"}
    # Registered where the sink published them: no second copy under the table.
    assert not list((output / "_iceberg").rglob("*.parquet"))
    # Called again, it finds nothing to commit.
    before = len(table.snapshots())
    assert table_commit.catch_up(resolve(str(output))) == 0
    assert len(load_table(output).snapshots()) == before


@pytest.mark.spark
@pytest.mark.parametrize("step", range(1, STEPS + 1))
def test_a_crash_after_each_commit_step_commits_each_batch_once(
    step: int, archive: Path, spark: Any, tmp_path: Path
) -> None:
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    crash_in_process(spark, archive, output, checkpoint, step)
    # At the crash: the table holds whole batches only, never more than the ledger.
    held = table_commit.position(load_table(output))
    ledger = Ledger(resolve(str(output)))
    head = ledger.head()
    assert held is not None and head is not None
    previous = ledger.previous_data(head.number)
    assert held.entry == (head.number if step != 7 else previous and previous.number)
    _assert_table_exact(archive, output, below=held.end)
    # verify's table line names what the table lacks of the files published (step 6 on), until
    # the next start redoes or recognises the batch and commits them.
    described = check_table(resolve(str(output))) or ""
    assert ("more, published, are not in it yet" in described) is (step in (6, 7)), described

    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS)
    _assert_table_exact(archive, output)
    assert_follows_ledger(output)


def test_an_output_without_a_catalog_on_s3_keeps_no_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "TABLECAST_S3_ENDPOINT": f"http://{host}:{port}",
        }.items():
            monkeypatch.setenv(name, value)
        import boto3

        boto3.client(
            "s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1"
        ).create_bucket(Bucket="bucket")
        location = resolve("s3://bucket/out")
        assert table_commit.catch_up(location) == 0
        assert (
            table_commit.commit_rewrite(
                location, written=["a"], removed=[], kind="replay", note="n"
            )
            is False
        )
    finally:
        server.stop()


@pytest.mark.spark
def test_a_table_disagreeing_with_the_ledger_is_refused(
    archive: Path, spark: Any, tmp_path: Path
) -> None:
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    run_job(spark, archive, output, checkpoint, max_offsets_per_trigger=MAX_OFFSETS)
    ledger = Ledger(resolve(str(output)))
    head = ledger.head()
    assert head is not None
    ledger.location.delete_file(ledger._entry_path(head.number))  # the ledger lost its head
    with pytest.raises(OutputStateError, match=r"Iceberg table .* holds ledger entry"):
        table_commit.catch_up(resolve(str(output)))
