"""The table's catalogs: SQLite beside a local output, Glue (moto) for an S3 one;
``tablecast table`` prints what pyiceberg needs; concurrent commits never double a batch."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from app import cli
from app.contract.schema import TableSchema
from app.engine.output import OUTPUT_SCHEMA
from app.storage import resolve
from app.table import catalog as catalog_mod
from app.table import commit as table_commit
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.spark.helpers import write_capture
from tests.table.helpers import (
    assert_follows_ledger,
    claimed,
    cuts,
    publish_batches,
    table_rows,
)

SPEC = CaptureSpec(
    topics=1, partitions=2, sessions=6, updates=20, records_per_file=40, resync_every=8, seed=5
)


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    archive = tmp_path_factory.mktemp("catalogs") / "archive"
    write_capture(archive, SPEC)
    return verify.expected_output(str(archive), "^sensor-.+").rows


def _with_firmware() -> TableSchema:
    """The default schema with a nullable column added: a restart that evolves the table."""
    from app.contract.schema import parse_schema

    return parse_schema(
        '[key]\ncolumns = ["id"]\n[columns]\nid = { type = "string", output = "row_id" }\n'
        'value = { type = "float64", nullable = true }\n'
        'status = { type = "string", nullable = true }\n'
        'firmware = { type = "string", nullable = true }\n',
        "with-firmware.toml",
    )


def _table_json(output: str, *extra: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert cli.main(["table", "--output", output, *extra]) == 0
    printed: dict[str, Any] = json.loads(capsys.readouterr().out)
    return printed


def test_table_prints_what_load_catalog_needs(
    expected: pa.Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 3))
    assert table_commit.catch_up(resolve(output)) == 3
    printed = _table_json(output, capsys=capsys)
    assert printed["table"] == "tablecast.output" and printed["catalog"]["type"] == "sql"
    table = load_catalog(printed["name"], **printed["catalog"]).load_table(printed["table"])
    scanned = table.scan().to_arrow().select(OUTPUT_SCHEMA.names).cast(OUTPUT_SCHEMA)
    comparison = verify.compare(expected, scanned)
    assert comparison.ok, comparison.report()
    # The metadata file alone, as DuckDB's iceberg_scan and Spark read it, without a catalog.
    from pyiceberg.table import StaticTable

    alone = StaticTable.from_metadata(printed["metadata_location"]).scan().to_arrow()
    assert verify.compare(expected, alone.select(OUTPUT_SCHEMA.names).cast(OUTPUT_SCHEMA)).ok
    # Plain readers never see the catalog: it lives under a hidden name.
    assert verify.compare(expected, verify.read_output(output)).ok


def test_table_without_a_catalog_for_s3_says_what_to_run(
    expected: pa.Table, capsys: pytest.CaptureFixture[str], aws: dict[str, str]
) -> None:
    publish_batches("s3://lake/out", expected, cuts(expected, 1))
    assert cli.main(["table", "--output", "s3://lake/out"]) == 64
    assert "--glue-database DATABASE" in capsys.readouterr().err


def test_concurrent_commits_on_the_sql_catalog_commit_each_batch_once(
    expected: pa.Table, tmp_path: Path
) -> None:
    """Four committers race for the same entries: the catalog's swap lets one win each
    snapshot; the others reload, find the entry held, and commit nothing again."""
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 6))
    catalog_mod.open_table(resolve(output), catalog_mod.local_config(resolve(output)))
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            table_commit.catch_up(resolve(output))
        except BaseException as exc:  # the test reports it below
            errors.append(exc)

    threads = [threading.Thread(target=commit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert_follows_ledger(output)
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()


def test_glue_catalogues_an_s3_output(
    expected: pa.Table, aws: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    output = "s3://lake/out"
    publish_batches(output, expected, cuts(expected, 2))
    printed = _table_json(output, "--glue-database", "tablecast", capsys=capsys)
    metadata = printed.pop("metadata_location")
    assert printed == {
        "name": "tablecast",
        "catalog": {"type": "glue", "glue.region": "us-east-1", "s3.region": "us-east-1"},
        "table": "tablecast.output",
    }
    assert table_commit.catch_up(resolve(output)) == 2
    assert_follows_ledger(output)
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()
    glue = boto3.client("glue", endpoint_url=aws["AWS_ENDPOINT_URL"], region_name="us-east-1")
    found = glue.get_table(DatabaseName="tablecast", Name="output")["Table"]
    assert found["Parameters"]["table_type"].upper() == "ICEBERG"
    assert found["Parameters"]["metadata_location"].startswith("s3://lake/out/_iceberg/table/")
    assert metadata.startswith("s3://lake/out/_iceberg/table/metadata/")  # as of the print


def test_the_catalog_opened_on_a_thread_is_the_one_the_first_commit_uses(tmp_path: Path) -> None:
    location = resolve(str(tmp_path / "out"))
    config = catalog_mod.config_for(location)
    assert config is not None  # a local output: SQLite beside it
    catalog_mod._catalog.cache_clear()
    opening = catalog_mod.open_in_background(location)
    assert opening is not None
    table = catalog_mod.open_table(location, config)  # as the first commit does, at once
    opening.join(timeout=30)
    assert not opening.is_alive()
    assert catalog_mod._catalog.cache_info().misses == 1  # opened once, by whichever came first
    assert table.catalog is catalog_mod.catalog(config)


def test_on_s3_and_glue_a_lost_metadata_file_is_named_and_table_rebuild_mends_it(
    expected: pa.Table, aws: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    import boto3

    from app.errors import DamagedOutputError
    from app.table.check import check_table

    output = "s3://lake/out"
    publish_batches(output, expected, cuts(expected, 2))
    _table_json(output, "--glue-database", "tablecast", capsys=capsys)
    location = resolve(output)
    table_commit.catch_up(location)
    assert "holds the " in (check_table(location) or "")
    glue = boto3.client("glue", endpoint_url=aws["AWS_ENDPOINT_URL"], region_name="us-east-1")
    metadata = glue.get_table(DatabaseName="tablecast", Name="output")["Table"]["Parameters"]
    bucket, key = metadata["metadata_location"].removeprefix("s3://").split("/", 1)
    boto3.client("s3", endpoint_url=aws["AWS_ENDPOINT_URL"]).delete_object(Bucket=bucket, Key=key)

    with pytest.raises(DamagedOutputError) as damaged:
        check_table(location)
    assert f"run `tablecast table --output {output} --rebuild`" in str(damaged.value)
    assert cli.main(["table", "--output", output]) == DamagedOutputError.exit_code
    capsys.readouterr()
    _table_json(output, "--rebuild", capsys=capsys)
    assert "holds the " in (check_table(location) or "")
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()


def test_an_added_column_reaches_the_glue_table_before_a_batch_writes_it(
    expected: pa.Table, aws: dict[str, str]
) -> None:
    import boto3

    from app.contract.schema import DEFAULT_SCHEMA
    from app.sink import schemas
    from app.table import live

    output = "s3://lake/evolving"
    publish_batches(output, expected, cuts(expected, 2))
    settings = live.TableSettings(glue_database="tablecast", region="us-east-1")
    fence = claimed(output)
    live.prepare(output, settings, DEFAULT_SCHEMA, fence)
    glue = boto3.client("glue", endpoint_url=aws["AWS_ENDPOINT_URL"], region_name="us-east-1")

    def glue_table() -> dict[str, Any]:
        found: dict[str, Any] = glue.get_table(DatabaseName="tablecast", Name="output")["Table"]
        return found

    before = glue_table()["Parameters"]["metadata_location"]
    live.prepare(output, settings, DEFAULT_SCHEMA, fence)  # the same schema changes nothing
    assert glue_table()["Parameters"]["metadata_location"] == before

    added = _with_firmware()
    schemas.check_start(resolve(output), added, "with-firmware.toml")
    live.prepare(output, settings, added, fence)
    found = glue_table()
    assert found["Parameters"]["metadata_location"] != before
    columns = [c["Name"] for c in found["StorageDescriptor"]["Columns"]]
    assert "firmware" in columns
    config = catalog_mod.config_for(resolve(output))
    assert config is not None
    table = catalog_mod.catalog(config).load_table(config.table)
    fields = {f.name: f for f in table.schema().fields}
    assert fields["firmware"].field_id == max(f.field_id for f in fields.values())
    scanned = table.scan().to_arrow()
    assert scanned.num_rows == len(expected) and scanned["firmware"].null_count == len(expected)


def test_a_writer_paused_before_its_table_was_prepared_is_fenced_when_it_wakes(
    expected: pa.Table, aws: dict[str, str]
) -> None:
    """A start paused between its claim and the table's preparation, taken over by a start
    whose schema adds a column: woken, it changes nothing (before, it dropped the column no
    batch had written yet, and each of its successor's table commits then failed)."""
    from app.contract.schema import DEFAULT_SCHEMA
    from app.errors import OwnershipLostError
    from app.sink import schemas
    from app.table import live

    output = "s3://lake/taken"
    publish_batches(output, expected, cuts(expected, 2))
    settings = live.TableSettings(glue_database="tablecast", region="us-east-1")
    live.prepare(output, settings, DEFAULT_SCHEMA, claimed(output))
    paused = claimed(output)  # claims, then its VM pauses past its lease
    added = _with_firmware()
    successor = claimed(output)
    schemas.check_start(resolve(output), added, "with-firmware.toml")
    live.prepare(output, settings, added, successor)
    location = resolve(output)
    config = catalog_mod.config_for(location)
    assert config is not None
    before = catalog_mod.catalog(config).load_table(config.table).metadata_location

    with pytest.raises(OwnershipLostError, match="taken over while this run paused"):
        live.prepare(output, settings, DEFAULT_SCHEMA, paused)
    table = catalog_mod.catalog(config).load_table(config.table)
    assert table.metadata_location == before
    assert "firmware" in table.schema().column_names
    successor.check("its first batch")  # still the output's writer


def test_table_rebuild_beside_a_running_writer_is_refused_naming_it_and_fences_a_stale_one(
    expected: pa.Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Beside a running job, a rebuild listing the visible files between a batch's publish
    and its ledger entry would put that batch in the table twice once the job's own commit
    came: it is refused, naming the job. Once the job is gone, the rebuild holds the output,
    so a job that only paused and wakes cannot add the batch again."""
    from app.errors import OwnershipLostError
    from app.sink import fencing

    output = str(tmp_path / "out")
    location = resolve(output)
    publish_batches(output, expected, cuts(expected, 2))
    table_commit.catch_up(location)
    config = catalog_mod.config_for(location)
    assert config is not None
    before = catalog_mod.catalog(config).load_table(config.table).metadata_location
    job = fencing.claim(location, fencing.new_writer("run", "/ckpt", lease_s=1.0))
    keeper = fencing.LeaseKeeper(job).start()
    try:
        assert cli.main(["table", "--output", output, "--rebuild"]) == 4
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert "is held by a running writer: `tablecast run`" in line, line
        assert catalog_mod.catalog(config).load_table(config.table).metadata_location == before
        job.check("its next batch")  # still the output's
    finally:
        keeper.stop(release=False)  # it pauses: its lease runs out
    assert cli.main(["table", "--output", output, "--rebuild"]) == 0
    capsys.readouterr()
    with pytest.raises(OwnershipLostError, match="claimed by `tablecast table`"):
        job.check("publishing its batch")
    assert_follows_ledger(output)
    comparison = verify.compare(expected, table_rows(output))
    assert comparison.ok, comparison.report()


def test_a_table_made_before_it_declared_a_sort_order_declares_the_files_one(
    tmp_path: Path,
) -> None:
    from app.contract.schema import DEFAULT_SCHEMA

    location = resolve(str(tmp_path / "out"))
    config = catalog_mod.config_for(location)
    assert config is not None
    location.fs.create_dir(location.child(catalog_mod.TABLE_DIR), recursive=True)
    found = catalog_mod.catalog(config)
    found.create_namespace_if_not_exists(catalog_mod.NAMESPACE)
    found.create_table(config.table, schema=OUTPUT_SCHEMA, location=config.location)  # as before
    assert found.load_table(config.table).sort_order().is_unsorted
    assert catalog_mod.evolve(location, DEFAULT_SCHEMA)
    order = found.load_table(config.table).sort_order()
    table = found.load_table(config.table)
    names = [table.schema().find_column_name(f.source_id) for f in order.fields]
    assert names == ["topic", "partition", "offset"]
    assert not catalog_mod.evolve(location, DEFAULT_SCHEMA)  # then nothing is left to do
