"""Where the output's Iceberg table is catalogued, and the table itself.

A local output gets an embedded SQL catalog (SQLite) beside it, under
``<output>/_iceberg/`` (hidden from plain Parquet readers), so ``make demo``
needs nothing more. An ``s3://`` output is catalogued in the Glue Data
Catalog once ``tablecast table --output s3://... --glue-database DB`` has
written ``<output>/_iceberg/catalog.json``; without that file the job keeps
no table for it (the plain dataset and its ledger are unchanged).

The table registers the files the sink publishes (no second copy): its data
files are the output's own ``<day>/part-*.parquet`` (``date=<day>/`` in an
output made before its layout was recorded), partitioned by ``day(ts)``
(the day directory is derived from ``ts`` too), sorted by topic, partition
and offset as every file is; its metadata lives under
``<output>/_iceberg/table/metadata/``. Its schema is the output's
(:func:`table_schema`: :func:`app.engine.output.output_schema` of the table
schema the ledger names, and the files' ``date`` column where they hold
one), required where a column is never null; a job started with a schema
that adds columns evolves it first (:func:`evolve`: new field ids, files
written before read them as null).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import posixpath
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa

from app.contract.schema import DEFAULT_SCHEMA, PARTITION_FIELD, TableSchema
from app.engine.output import output_schema
from app.engine.writer import DATE_COLUMN, DayLayout, layout_of
from app.errors import ConfigurationError, DamagedOutputError, TablecastError
from app.sink import schemas
from app.storage import Location, refusal
from app.table import metadata_cache

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

TABLE_DIR = "_iceberg"
CONFIG_FILE = posixpath.join(TABLE_DIR, "catalog.json")
SQLITE_FILE = posixpath.join(TABLE_DIR, "catalog.db")
CATALOG_NAME = "tablecast"
NAMESPACE = "tablecast"
TABLE_NAME = "output"
SORT_ORDER = ("topic", "partition", "offset")
# The day of a row's file (DayLayout.DATE_COLUMN): never null, ``day(ts)``'s value.
_DATE = pa.field(DATE_COLUMN, pa.date32(), nullable=False)


@dataclass(frozen=True)
class TableConfig:
    """What any pyiceberg user needs: ``load_catalog(name, **catalog).load_table(table)``."""

    name: str
    catalog: Mapping[str, str]
    table: str  # "namespace.name"
    location: str = field(default="")  # the table's location (metadata under it)

    def to_json(self) -> bytes:
        doc = {"name": self.name, "catalog": dict(self.catalog), "table": self.table}
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)


def local_config(location: Location) -> TableConfig:
    """The embedded SQLite catalog beside a local output."""
    return TableConfig(
        name=CATALOG_NAME,
        catalog={
            "type": "sql",
            # Writers wait for one another (the job, a compaction) instead of failing.
            "uri": f"sqlite:///{location.child(SQLITE_FILE)}?timeout=60",
            "warehouse": f"file://{location.child(TABLE_DIR)}",
        },
        table=f"{NAMESPACE}.{TABLE_NAME}",
        location=table_location(location),
    )


def glue_config(
    location: Location, *, database: str, region: str, table: str = TABLE_NAME
) -> TableConfig:
    """The Glue Data Catalog: ``database.table``, as Athena names it."""
    if not database or not table:
        raise ConfigurationError("--glue-database and the table name must not be empty")
    return TableConfig(
        name=CATALOG_NAME,
        catalog={"type": "glue", "glue.region": region, "s3.region": region},
        table=f"{database}.{table}",
        location=table_location(location),
    )


def table_location(location: Location) -> str:
    return f"{location.uri.rstrip('/')}/{TABLE_DIR}/table"


def config_for(location: Location) -> TableConfig | None:
    """The output's catalog: its ``catalog.json``, else SQLite beside a local output, else none."""
    path = location.child(CONFIG_FILE)
    if location.exists(path):
        raw = location.read_bytes(path)
        try:
            doc = orjson.loads(raw)
            return TableConfig(
                name=str(doc["name"]),
                catalog={str(k): str(v) for k, v in doc["catalog"].items()},
                table=str(doc["table"]),
                location=table_location(location),
            )
        except (orjson.JSONDecodeError, KeyError, AttributeError, TypeError):
            raise ConfigurationError(
                f"{location.uri}/{CONFIG_FILE} is not a catalog file "
                '({"name": ..., "catalog": {...}, "table": "ns.name"})'
            ) from None
    return local_config(location) if location.is_local else None


def save_config(location: Location, config: TableConfig) -> None:
    location.write_bytes_atomic(location.child(CONFIG_FILE), config.to_json())


def with_endpoint(properties: Mapping[str, str]) -> dict[str, str]:
    """Point pyiceberg's S3 client where ``app.storage`` points pyarrow's (tests: moto)."""
    found = dict(properties)
    endpoint = os.environ.get("TABLECAST_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "s3.endpoint" not in found:
        found["s3.endpoint"] = endpoint
    return found


_pool_users: list[int] = [0]  # how many threads are inside threads_released()
_pool_lock = threading.Lock()


@contextlib.contextmanager
def threads_released() -> Iterator[None]:
    """Run pyiceberg work, then end the worker threads of its process-wide pool.

    pyiceberg plans scans and reads manifests on one shared thread pool that it
    never shuts down; the job commits once a batch, so the pool is made again
    when needed rather than left running beside Spark's threads. The last of
    several concurrent users ends it.
    """
    with _pool_lock:
        _pool_users[0] += 1
    try:
        yield
    finally:
        from pyiceberg.utils.concurrent import ExecutorFactory

        with _pool_lock:
            _pool_users[0] -= 1
            pool = ExecutorFactory._instance if _pool_users[0] == 0 else None
            if pool is not None:
                ExecutorFactory._instance = None
        if pool is not None:
            pool.shutdown(wait=True)


@functools.lru_cache(maxsize=8)
def _catalog(name: str, frozen: tuple[tuple[str, str], ...]) -> Catalog:
    from pyiceberg.catalog import load_catalog

    metadata_cache.install()  # before any of its tables' transactions

    return load_catalog(name, **with_endpoint(dict(frozen)))


_opening = threading.Lock()  # one opening of a catalog at a time: the others then share it


def catalog(config: TableConfig) -> Catalog:
    """The catalog (kept per process: an SQL catalog holds an engine, Glue a client)."""
    with _opening:
        return _catalog(config.name, tuple(sorted(config.catalog.items())))


def import_modules(location: Location) -> None:
    """Import what opening the output's catalog and its table's files will: pyiceberg's
    catalog with SQLAlchemy (or boto3) and its pyarrow IO, 0.7 s of the driver's time. It
    has no other effect: ``tablecast run`` does it while its JVM launches."""
    config = config_for(location)
    if config is None:
        return
    importlib.import_module(f"pyiceberg.catalog.{config.catalog.get('type', 'sql')}")
    importlib.import_module("pyiceberg.io.pyarrow")


def open_in_background(location: Location) -> threading.Thread | None:
    """Open the output's catalog on a thread, so that the first batch's commit finds it open.

    Opening it first imports pyiceberg and SQLAlchemy (or boto3), about a
    second of the driver's time, which the job's first batch would otherwise
    spend after its tasks; the job starts this before its query. A failure
    here is left to the commit, which opens the catalog again and reports it.
    None when the output keeps no table.
    """
    config = config_for(location)
    if config is None:
        return None

    def run() -> None:
        try:
            if location.is_local:  # the SQLite file's directory, before the catalog opens it
                location.fs.create_dir(location.child(TABLE_DIR), recursive=True)
            catalog(config)
        except Exception as exc:  # the commit opens it again and reports what is wrong
            log.debug("opening the catalog of %s early failed: %s", location.uri, exc)

    thread = threading.Thread(target=run, name="tablecast-catalog-open", daemon=True)
    thread.start()
    return thread


def table_exists(location: Location, config: TableConfig) -> bool:
    """Whether the output's table was made (a rewrite commits only to one that was)."""
    if location.is_local and not location.exists(location.child(TABLE_DIR)):
        return False
    return bool(catalog(config).table_exists(config.table))


def rebuild_command(location: Location) -> str:
    return f"tablecast table --output {location.uri} --rebuild"


def damaged_table(location: Location, what: str) -> DamagedOutputError:
    """The one line for an Iceberg table that cannot be loaded or does not follow the output."""
    command = rebuild_command(location)
    return DamagedOutputError(
        f"the Iceberg table of {location.uri} {what}: run `{command}` to make it again from "
        "the ledger and the visible files",
        output=location.uri,
        path=location.shown(location.child(TABLE_DIR)),
        command=command,
    )


def load_table(location: Location, config: TableConfig) -> Table:
    """The output's table as its catalog has it; one that cannot be loaded (its current
    metadata file lost or damaged) is a :class:`DamagedOutputError` naming what mends it.
    ``NoSuchTableError`` when the catalog holds none."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog(config).load_table(config.table)
    except (NoSuchTableError, TablecastError):
        raise
    except Exception as exc:
        if refusal(exc) is not None:  # the caller names the path: exit 74
            raise
        detail = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise damaged_table(location, f"({config.table}) cannot be loaded: {detail}") from None


def open_table(location: Location, config: TableConfig, schema: TableSchema | None = None) -> Table:
    """The output's table, created on first use (partitioned by ``day(ts)``) with ``schema``
    (by default the one the output's ledger names last)."""
    from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

    if location.is_local:  # the SQLite file's directory, before the catalog opens it
        location.fs.create_dir(location.child(TABLE_DIR), recursive=True)
    found = catalog(config)
    try:
        return _keep_history_properties(found, config, load_table(location, config))
    except NoSuchTableError:
        pass
    namespace = config.table.rsplit(".", 1)[0]
    if not found.namespace_exists(namespace):  # on AWS infra made it: the job may not
        found.create_namespace_if_not_exists(namespace)
    with contextlib.suppress(TableAlreadyExistsError):  # another process made it meanwhile
        _create(found, location, config, schema or schemas.current(location) or DEFAULT_SCHEMA)
    return load_table(location, config)


# What the table keeps of its past (app/table/history.py): the last ten earlier metadata
# files, the others deleted at each commit; manifests merged once a hundred accumulate,
# so a commit's manifest list does not grow with the batches. Iceberg's names.
HISTORY_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "10",
    "commit.manifest-merge.enabled": "true",
}


def _keep_history_properties(found: Catalog, config: TableConfig, table: Table) -> Table:
    """A table made before it set :data:`HISTORY_PROPERTIES` sets them (one commit, once)."""
    from pyiceberg.exceptions import CommitFailedException

    missing = {k: v for k, v in HISTORY_PROPERTIES.items() if table.properties.get(k) != v}
    if not missing:
        return table
    with contextlib.suppress(CommitFailedException):  # another process set them meanwhile
        with table.transaction() as transaction:
            transaction.set_properties(missing)
        log.info("table %s: keeps a bounded history from now on (%s)", config.table, missing)
    return found.load_table(config.table)


def table_schema(location: Location, schema: TableSchema) -> pa.Schema:
    """The table's Arrow schema for ``schema``: the output's, then the ``date`` column (date,
    required) when the output's files hold it (:attr:`DayLayout.DATE_COLUMN`)."""
    found = output_schema(schema)
    if layout_of(location) is DayLayout.DATE_COLUMN:
        found = found.append(_DATE)
    return found


def evolve(location: Location, schema: TableSchema) -> bool:
    """Bring the output's table to ``schema`` before a batch writes its columns: added
    columns get new field ids, columns made nullable become optional, the name mapping
    follows; a table made before it declared a sort order declares the files' one.
    Returns whether it changed; an output without a table is left alone (it is made
    with the schema, as its first batch commits).

    A column the table holds that no published file does (a start evolved the table, or
    made it, with a schema no batch then ran with) and that ``schema`` lacks or types
    otherwise is dropped first: the ledger's schema is the output's, the table follows it."""
    config = config_for(location)
    if config is None or not table_exists(location, config):
        return False
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import TableProperties

    table = load_table(location, config)
    wanted = table_schema(location, schema)
    current = table.schema()
    written = schemas.current(location)
    published = set() if written is None else set(table_schema(location, written).names)
    types = {f.name: f.field_type for f in Catalog._convert_schema_if_needed(wanted).fields}
    stray = [
        f.name
        for f in current.fields
        if f.name not in published and types.get(f.name) != f.field_type
    ]
    held = {f.name.lower(): f for f in current.fields if f.name not in stray}
    added = [f.name for f in wanted if f.name.lower() not in held]
    relaxed = [
        f.name
        for f in wanted
        if f.name.lower() in held and f.nullable and held[f.name.lower()].required
    ]
    unsorted = table.sort_order().is_unsorted
    if not stray and not added and not relaxed and not unsorted:
        return False
    with table.transaction() as transaction:
        if stray:
            with transaction.update_schema() as update:
                for name in stray:
                    update.delete_column(name)
        if added or relaxed:
            # Required columns are added only to a table no published file is in.
            with transaction.update_schema(allow_incompatible_changes=written is None) as update:
                update.union_by_name(wanted)  # new fields get new ids; required ones relaxed
        if stray or added or relaxed:
            mapping = transaction.table_metadata.schema().name_mapping.model_dump_json()
            transaction.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
        if unsorted:
            _declare_sort_order(transaction)
    log.info(
        "table %s: schema evolved (columns added: %s; made nullable: %s; dropped, no published "
        "file holding them: %s)",
        config.table,
        ", ".join(added) or "none",
        ", ".join(relaxed) or "none",
        ", ".join(stray) or "none",
    )
    return True


def _declare_sort_order(transaction: Any) -> None:
    """Every file holds its rows in this order (the sink's, compaction's): engines may rely
    on it."""
    from pyiceberg.table.sorting import NullOrder
    from pyiceberg.transforms import IdentityTransform

    with transaction.update_sort_order() as order:
        for name in SORT_ORDER:
            order.asc(name, IdentityTransform(), NullOrder.NULLS_FIRST)


def _create(found: Catalog, location: Location, config: TableConfig, schema: TableSchema) -> None:
    from pyiceberg.table import TableProperties
    from pyiceberg.transforms import DayTransform

    properties: dict[str, Any] = {
        **HISTORY_PROPERTIES,
        # The sink's files: snappy Parquet; compaction writes the same.
        TableProperties.PARQUET_COMPRESSION: "snappy",
        # pyiceberg would redo a commit that lost the race on top of the winner's
        # snapshot: a batch appended twice. app.table.commit reloads the table and
        # checks the position the winner left instead.
        TableProperties.COMMIT_NUM_RETRIES: "0",
    }
    transaction = found.create_table_transaction(
        config.table,
        schema=table_schema(location, schema),  # never-null columns required
        location=config.location or None,
        properties=properties,
    )
    with transaction.update_spec() as spec:
        spec.add_field("ts", DayTransform(), PARTITION_FIELD)
    _declare_sort_order(transaction)
    # The files carry no Iceberg field ids: columns are matched by name.
    mapping = transaction.table_metadata.schema().name_mapping.model_dump_json()
    transaction.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
    transaction.commit_transaction()
