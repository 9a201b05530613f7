"""A declared table schema on local Spark: a wide schema end to end for outside readers, an
added nullable column across a restart, a retyped one refused with the output untouched."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from app import cli
from app.contract.schema import TableSchema, parse_schema
from app.engine.output import output_schema
from app.errors import ConfigurationError, IntegrityViolationError
from app.recompute.replay import replay
from app.sink.ledger import Ledger
from app.sink.rewrite import Retirement
from app.storage import resolve
from app.table import compact as table_compact
from app.table.catalog import threads_released
from app.tools import generate as gen
from app.tools import verify
from tests.spark.helpers import (
    KEYED_BY_SITE_AND_ID,
    PATTERN,
    copy_files,
    declared_schema,
    ledger_end,
    repair_argv,
    run_job,
    tp_of,
    write_capture,
)
from tests.table.helpers import duckdb_table_rows, load_table

pytestmark = pytest.mark.spark

BEFORE = (
    KEYED_BY_SITE_AND_ID
    + """\
reading = { type = "float64", nullable = true }
alarm   = "bool"
seen_at = { type = "timestamp", nullable = true }
day     = { type = "date", nullable = true }
price   = { type = "decimal(12,4)", nullable = true }
label   = { type = "string", nullable = true, output = "site_label" }
"""
)
# The restart's schema: a column added, and alarm made nullable.
AFTER = BEFORE.replace('alarm   = "bool"', 'alarm   = { type = "bool", nullable = true }') + (
    'extra   = { type = "int64", nullable = true }\n'
)
RETYPED = AFTER.replace("decimal(12,4)", "decimal(14,4)")


def _spec(schema: TableSchema) -> gen.CaptureSpec:
    return gen.CaptureSpec(
        topics=2,
        partitions=2,
        sessions=8,
        rows_min=4,
        rows_max=10,
        updates=30,
        resync_every=9,
        records_per_file=25,
        schema=schema,
    )


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its content's digest."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _expected(archive: Path, schema: TableSchema, end: dict[Any, int], after: bool) -> pa.Table:
    """The expectation with ``schema`` for the offsets before ``end`` (or from it on)."""
    rows = verify.expected_output(str(archive), PATTERN, schema=schema).rows
    keep = pc.equal(pa.repeat(pa.scalar(True), len(rows)), False)
    for tp, offset in end.items():
        here = pc.and_(pc.equal(rows["topic"], tp.topic), pc.equal(rows["partition"], tp.partition))
        keep = pc.or_(keep, pc.and_(here, pc.less(rows["offset"], offset)))
    return rows.filter(pc.invert(keep) if after else keep)


def _expected_across(
    archive: Path, before: TableSchema, after: TableSchema, end: dict[Any, int]
) -> pa.Table:
    """The expectation with ``before`` for the offsets before ``end``, ``after`` from it on,
    in the output's schema (``after``'s)."""
    layout = output_schema(after)
    return (
        pa.concat_tables(
            [
                _expected(archive, before, end, after=False),
                _expected(archive, after, end, after=True),
            ],
            promote_options="default",
        )
        .select(layout.names)
        .cast(layout)
    )


def test_an_added_column_carries_on_across_a_restart_and_a_retyped_one_is_refused(
    spark: Any, tmp_path: Path
) -> None:
    before, before_path = declared_schema(BEFORE, "before.toml", tmp_path)
    after, after_path = declared_schema(AFTER, "after.toml", tmp_path)
    full, archive = tmp_path / "full", tmp_path / "archive"
    # Producers send the new column from the start, and alarm always.
    sent = parse_schema(BEFORE + 'extra   = { type = "int64", nullable = true }\n', "sent")
    write_capture(full, _spec(sent))
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"

    # The first half with the schema before: the new column is a field it ignores.
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) < 50)
    run_job(spark, archive, output, checkpoint, schema=before, schema_document=before_path)
    half = ledger_end(output)
    assert half and all(offset == 50 for offset in half.values())

    # The rest with the schema after: the job carries on.
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) >= 50)
    run_job(spark, archive, output, checkpoint, schema=after, schema_document=after_path)
    assert set(ledger_end(output)) == {tp_of(p.relative_to(full)) for p in full.rglob("*.parquet")}

    expected = _expected_across(full, before, after, half)
    assert expected.column("extra").null_count < len(expected)  # the new column is filled

    # verify's expectation reads each range with the schema its ledger entry names.
    recorded = verify.recorded_schemas(str(output))
    first, changes = recorded.first, recorded.changes
    assert first == before and set(changes) == set(half)
    assert all(found == [(50, after)] for found in changes.values())
    recomputed = verify.expected_output(str(full), PATTERN, schema=first, changes=changes)
    assert verify.compare(expected, recomputed.rows).ok
    assert cli.main(["verify", "--archive", str(full), "--output", str(output)]) == 0
    # (The schema after for every range would fill the column where the output holds null.)
    all_after = verify.expected_output(str(full), PATTERN, schema=after).rows
    assert not verify.compare(all_after, verify.read_output(str(output))).ok

    # Plain readers that unify by name: pyarrow given the output's schema, DuckDB.
    plain = verify.read_output(str(output))
    assert plain.schema == output_schema(after)
    comparison = verify.compare(expected, plain)
    assert comparison.ok, comparison.report()
    assert plain.filter(pc.less(plain["offset"], 50))["extra"].null_count == len(
        plain.filter(pc.less(plain["offset"], 50))
    )
    con = duckdb.connect()
    try:
        glob = str(output / "*" / "*.parquet")
        duck = con.execute(
            f"SELECT * EXCLUDE (date) FROM read_parquet('{glob}', hive_partitioning=true, "
            "union_by_name=true)"
        ).to_arrow_table()
    finally:
        con.close()
    assert verify.compare(expected, duck.select(expected.column_names)).ok

    # The table's readers: pyiceberg, its schema evolved with a new field id.
    table = load_table(output)
    fields = {f.name: f for f in table.schema().fields}
    assert fields["extra"].field_id > fields["site_label"].field_id
    assert fields["site"].required and fields["id"].required and fields["ts"].required
    assert not fields["alarm"].required and not fields["extra"].required
    with threads_released():  # pyiceberg's pool ends with the scan
        scanned = table.scan().to_arrow().select(expected.column_names)
    assert verify.compare(expected, scanned).ok
    # And DuckDB's iceberg extension, through the table's metadata alone.
    ducked = duckdb_table_rows(output).select(expected.column_names)
    assert verify.compare(expected, ducked).ok

    # A replay of all of it reads each range with the schema it ran with: the same bytes.
    untouched = _tree(output)
    report = replay(spark, str(full), str(output), 0, 4_102_444_800_000, topic_pattern=PATTERN)
    assert report.record.published and not report.record.removed
    assert {k: v for k, v in _tree(output).items() if not k.startswith("_")} == {
        k: v for k, v in untouched.items() if not k.startswith("_")
    }

    # A retyped column is refused at start, in one line, before anything is written.
    untouched = _tree(output)
    retyped, retyped_path = declared_schema(RETYPED, "retyped.toml", tmp_path)
    with pytest.raises(ConfigurationError) as info:
        run_job(spark, archive, output, checkpoint, schema=retyped, schema_document=retyped_path)
    message = str(info.value)
    assert message.startswith(f"schema {retyped_path}, column 'price'")
    assert "retyped from decimal(12,4) to decimal(14,4)" in message
    assert _tree(output) == untouched


def _assert_table_readers_see(expected: pa.Table, output: Path) -> None:
    """pyiceberg and DuckDB's iceberg extension read exactly ``expected`` from the table."""
    with threads_released():
        scanned = load_table(output).scan().to_arrow().select(expected.column_names)
    comparison = verify.compare(expected, scanned)
    assert comparison.ok, comparison.report()
    ducked = duckdb_table_rows(output).select(expected.column_names)
    assert verify.compare(expected, ducked).ok


# A start that declared the added column otherwise, then ran no batch (nothing new to read).
NEVER_WRITTEN = BEFORE + 'extra   = { type = "string", nullable = true }\n'


def test_a_column_a_start_declared_but_never_wrote_may_be_declared_otherwise(
    spark: Any, tmp_path: Path
) -> None:
    before, before_path = declared_schema(BEFORE, "before.toml", tmp_path)
    unwritten, unwritten_path = declared_schema(NEVER_WRITTEN, "unwritten.toml", tmp_path)
    after, after_path = declared_schema(AFTER, "after.toml", tmp_path)
    full, archive = tmp_path / "full", tmp_path / "archive"
    write_capture(full, _spec(parse_schema(BEFORE + 'extra = { type = "int64" }\n', "sent")))
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) < 50)
    run_job(spark, archive, output, checkpoint, schema=before, schema_document=before_path)
    half = ledger_end(output)

    # Started with extra as a string: the table takes the column; no batch runs with it.
    run_job(spark, archive, output, checkpoint, schema=unwritten, schema_document=unwritten_path)
    assert ledger_end(output) == half
    assert str(load_table(output).schema().find_field("extra").field_type) == "string"

    # The output holds no extra: the schema after, which adds it as an int64, carries on.
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) >= 50)
    run_job(spark, archive, output, checkpoint, schema=after, schema_document=after_path)
    assert ledger_end(output) != half
    expected = _expected_across(full, before, after, half)
    assert expected.column("extra").null_count < len(expected)
    assert cli.main(["verify", "--archive", str(full), "--output", str(output)]) == 0
    assert str(load_table(output).schema().find_field("extra").field_type) == "long"
    _assert_table_readers_see(expected, output)


def test_a_declared_schemas_first_start_on_glue_makes_its_table_with_the_declared_columns(
    s3: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deployed job's first start (``--glue-database``, the schema an ``s3://`` file):
    the Glue table is made before the first batch, with the declared columns."""
    import boto3

    endpoint = s3["TABLECAST_S3_ENDPOINT"]
    env = {**s3, "AWS_ENDPOINT_URL": endpoint}  # Glue's client too (moto serves both)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    glue = boto3.client("glue", endpoint_url=endpoint, region_name="us-east-1")
    glue.create_database(DatabaseInput={"Name": "tablecast"})  # what infra/ creates
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").put_object(
        Bucket="lake", Key="schemas/before.toml", Body=BEFORE.encode()
    )
    before = parse_schema(BEFORE, "before.toml")
    archive, output = tmp_path / "archive", "s3://lake/output"
    write_capture(archive, _spec(before))
    argv = [
        *("run", "--archive", str(archive), "--output", output),
        *("--checkpoint", str(tmp_path / "ckpt"), "--trigger", "available-now"),
        *("--schema", "s3://lake/schemas/before.toml", "--glue-database", "tablecast"),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "app", *argv], env=env, capture_output=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    # Every column Glue lists (pyiceberg lists former ones too) is a declared or metadata one.
    found = glue.get_table(DatabaseName="tablecast", Name="output")["Table"]
    columns = {c["Name"] for c in found["StorageDescriptor"]["Columns"]}
    assert columns == {*output_schema(before).names, "date"}
    expected = verify.expected_output(str(archive), PATTERN, schema=before).rows
    table = load_table(output)
    assert table.schema().find_field("site").required
    with threads_released():
        scanned = table.scan().to_arrow().select(expected.column_names)
    comparison = verify.compare(expected, scanned)
    assert comparison.ok, comparison.report()


def test_a_table_made_before_the_first_batch_takes_the_declared_columns_at_the_next_start(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first start whose schema the first row breaks (id declared a string), then
    ``tablecast table`` (the output has no batch yet: the table is made with the default
    schema), then the corrected schema: its first batch reaches the table's readers."""
    wrong, wrong_path = declared_schema(
        BEFORE.replace('id      = "int64"', 'id      = "string"'), "wrong.toml", tmp_path
    )
    before, before_path = declared_schema(BEFORE, "before.toml", tmp_path)
    archive, output, checkpoint = tmp_path / "archive", tmp_path / "out", tmp_path / "ckpt"
    write_capture(archive, _spec(before))
    with pytest.raises(IntegrityViolationError, match="column 'id': expected a string"):
        run_job(spark, archive, output, checkpoint, schema=wrong, schema_document=wrong_path)
    assert cli.main(["table", "--output", str(output)]) == 0
    capsys.readouterr()
    assert load_table(output).schema().find_field("row_id").required  # the default's key

    run_job(spark, archive, output, checkpoint, schema=before, schema_document=before_path)
    assert cli.main(["verify", "--archive", str(archive), "--output", str(output)]) == 0
    expected = verify.expected_output(str(archive), PATTERN, schema=before).rows
    names = {f.name for f in load_table(output).schema().fields}
    assert names == {*output_schema(before).names, "date"}
    _assert_table_readers_see(expected, output)


def test_a_snapshot_a_repair_kept_is_verified_in_the_schema_it_was_published_with(
    spark: Any, tmp_path: Path
) -> None:
    """A lost checkpoint repaired (its sessions restart from resync snapshots the output
    keeps), then the job restarted with an added column: the kept snapshots' rows stay as
    published (the column null), later rows have it, and verify expects exactly that."""
    import shutil

    before, before_path = declared_schema(BEFORE, "before.toml", tmp_path)
    after, after_path = declared_schema(AFTER, "after.toml", tmp_path)
    full, archive = tmp_path / "full", tmp_path / "archive"
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    sent = parse_schema(BEFORE + 'extra = { type = "int64" }\n', "sent")
    spec = gen.CaptureSpec(
        topics=1, updates=60, records_per_file=50, resync_every=15, concurrent=1, seed=4
    )
    write_capture(full, dataclasses.replace(spec, schema=sent))
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) < 150)
    run_job(
        spark,
        archive,
        output,
        checkpoint,
        schema=before,
        schema_document=before_path,
        max_offsets_per_trigger=30,
    )
    shutil.rmtree(checkpoint)
    copy_files(full, archive, lambda r: True)
    assert cli.main(repair_argv(archive, output, checkpoint, "--yes")) == 0
    location = resolve(str(output))
    adopted = Ledger(location).adopted_sessions()
    assert adopted  # the repair kept resync snapshots
    run_job(spark, archive, output, checkpoint, schema=after, schema_document=after_path)

    rows = verify.read_output(str(output))
    kept = pc.equal(pa.repeat(pa.scalar(True), len(rows)), False)
    for session, offset in adopted.items():
        here = pc.and_(pc.equal(rows["session"], session), pc.equal(rows["offset"], offset))
        kept = pc.or_(kept, here)
    assert rows.filter(kept).num_rows and rows.filter(kept)["extra"].null_count == len(
        rows.filter(kept)
    )
    later = rows.filter(pc.greater(rows["offset"], max(adopted.values())))
    assert later["extra"].null_count < len(later)
    assert cli.main(["verify", "--archive", str(full), "--output", str(output)]) == 0


# A second column added at a later restart.
THIRD = AFTER + 'more    = { type = "decimal(38,10)", nullable = true }\n'


def test_a_compaction_merges_files_of_three_schemas_into_the_newest_for_every_reader(
    spark: Any, tmp_path: Path
) -> None:
    documents = [("before.toml", BEFORE), ("after.toml", AFTER), ("third.toml", THIRD)]
    versions = [declared_schema(text, name, tmp_path) for name, text in documents]
    full, archive = tmp_path / "full", tmp_path / "archive"
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    sent = THIRD.replace('alarm   = { type = "bool", nullable = true }', 'alarm   = "bool"')
    write_capture(full, _spec(parse_schema(sent, "sent")))
    for (schema, document), below in zip(versions, (25, 50, None), strict=True):
        copy_files(full, archive, lambda r, b=below: b is None or int(r.stem.split("-")[0]) < b)
        run_job(spark, archive, output, checkpoint, schema=schema, schema_document=document)
    recorded = verify.recorded_schemas(str(output))
    first, changes = recorded.first, recorded.changes
    assert first == versions[0][0]
    assert all([at for at, _ in found] == [25, 50] for found in changes.values())

    report = table_compact.compact(
        resolve(str(output)), before=datetime.date(2100, 1, 1), retirement=Retirement(grace_s=0)
    )
    assert report.inputs > report.outputs
    layout = output_schema(versions[2][0])
    expected = (
        verify.expected_output(str(full), PATTERN, schema=first, changes=changes)
        .rows.select(layout.names)
        .cast(layout)
    )
    assert expected.filter(pc.greater_equal(expected["offset"], 50))["more"].null_count < len(
        expected.filter(pc.greater_equal(expected["offset"], 50))
    )
    assert cli.main(["verify", "--archive", str(full), "--output", str(output)]) == 0
    plain = verify.read_output(str(output))
    assert plain.schema == layout
    assert verify.compare(expected, plain).ok
    _assert_table_readers_see(expected, output)

    # A replay of all of it reads each range with the schema it ran with: the same bytes.
    untouched = {k: v for k, v in _tree(output).items() if not k.startswith("_")}
    replay(spark, str(full), str(output), 0, 4_102_444_800_000, topic_pattern=PATTERN)
    assert {k: v for k, v in _tree(output).items() if not k.startswith("_")} == untouched
