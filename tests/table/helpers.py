"""Reading the output's Iceberg table as any pyiceberg user would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import load_catalog

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets, TopicPartition
from app.engine.output import OUTPUT_SCHEMA
from app.sink import fencing
from app.sink import ledger as ledger_mod
from app.sink import rewriter as rewriter_mod
from app.sink.fencing import Fence
from app.sink.ledger import Ledger
from app.sink.visible import visible_files
from app.storage import Location, resolve
from app.table import catalog as catalog_mod
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.table.history import ENTRY_KEY
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.spark.helpers import write_capture


def load_table(output: Path | str) -> Any:
    """The table through the printed configuration only: name, properties, identifier."""
    config = catalog_mod.config_for(resolve(str(output)))
    assert config is not None
    # On AWS the properties alone do; here S3 and Glue are a moto server.
    properties = catalog_mod.with_endpoint(config.catalog)
    return load_catalog(config.name, **properties).load_table(config.table)


def table_rows(output: Path | str, snapshot_id: int | None = None) -> pa.Table:
    """The table's rows (current snapshot, or ``snapshot_id``) in the output's schema."""
    table = load_table(output)
    if table.current_snapshot() is None:
        return OUTPUT_SCHEMA.empty_table()
    scanned = table.scan(snapshot_id=snapshot_id).to_arrow()
    return scanned.select(OUTPUT_SCHEMA.names).cast(OUTPUT_SCHEMA)


def table_files(output: Path | str) -> set[str]:
    table = load_table(output)
    if table.current_snapshot() is None:
        return set()
    return {t.file.file_path for t in table.scan().plan_files()}


def assert_follows_ledger(output: Path | str, *, complete: bool = False) -> None:
    """The table follows the ledger: each batch entry in at most one snapshot, in order,
    with the entry's end offsets; every snapshot names the entry the table held then, never
    going back; the current one names the ledger's head; every snapshot offered can be read;
    the table's files are exactly the visible data files. ``complete``: no snapshot was
    expired, so every batch entry has its snapshot."""
    location = resolve(str(output))
    ledger = Ledger(location)
    entries = ledger.entries()
    folded = ledger.fold_head()
    through = -1 if folded is None else folded.through
    table = load_table(output)
    snapshots = sorted(table.snapshots(), key=lambda s: s.sequence_number)
    marks = [
        s.summary.additional_properties
        for s in snapshots
        if s.summary is not None and ENTRY_KEY in s.summary.additional_properties
    ]
    held = [int(p[ENTRY_KEY]) for p in marks]
    assert held == sorted(held), held
    batches = [int(p[ENTRY_KEY]) for p in marks if p.get(table_commit.KIND_KEY) == "batch"]
    assert len(batches) == len(set(batches)), batches  # each batch committed once
    by_number = {e.number: e for e in entries}
    for props in marks:
        entry = by_number[int(props[ENTRY_KEY])]
        if entry.number > through:  # a folded entry keeps the partitions it published
            assert offsets_mod.from_json(props[table_commit.END_KEY]) == entry.end
    if complete:
        assert batches == [e.number for e in entries if e.kind is ledger_mod.BATCH]
    position = table_commit.position(table)
    assert position is not None
    assert position.entry == entries[-1].number and position.end == entries[-1].end
    assert_every_snapshot_reads(output)
    # The ledger's published files, or the names a rewrite gave their rows since.
    visible = {
        table_commit.data_path(location, f)
        for f in visible_files(location)
        if not f.startswith("_quarantine/")
    }
    assert table_files(output) == visible


def assert_every_snapshot_reads(output: Path | str) -> None:
    """Time travel to any snapshot the table offers reads it whole: none names a file that
    is gone."""
    location = resolve(str(output))
    prefix = table_commit.data_path(location, "")
    table = load_table(output)
    for snapshot in table.snapshots():
        planned = table.scan(snapshot_id=snapshot.snapshot_id).plan_files()
        files = [t.file.file_path.removeprefix(prefix) for t in planned]
        gone = [f for f in files if not location.exists(location.child(f))]
        assert not gone, (snapshot.snapshot_id, snapshot.summary, gone[:3])


def assert_no_snapshot_holds_a_replaced_file(output: Path | str) -> None:
    """Every file any offered snapshot names is visible now: a rewrite (repair, replay,
    correct, compaction) expired every snapshot holding a file it replaced, in its own
    commit, although the replaced files stay through the retire grace."""
    location = resolve(str(output))
    visible = {
        table_commit.data_path(location, f)
        for f in visible_files(location)
        if not f.startswith("_quarantine/")
    }
    table = load_table(output)
    for snapshot in table.snapshots():
        planned = {
            t.file.file_path for t in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()
        }
        replaced = sorted(planned - visible)
        assert not replaced, (snapshot.snapshot_id, snapshot.summary, replaced[:3])


def publish_batches(
    output: str, rows: pa.Table, cuts: list[Offsets], fence: Fence | None = None
) -> None:
    """Publish ``rows`` as the sink does, one ledger entry per cut (end offsets), without Spark:
    the sink's own writer stages each partition's range, files move to their names, the
    ledger records the entry (numbered from 0, or after ``fence``'s claim by it). For tests
    of the table that need no streaming query."""
    import pyarrow.compute as pc

    from app.engine.writer import stage_table

    location = resolve(output)
    ledger = Ledger(location)
    start: Offsets = {}
    for number, end in enumerate(cuts):
        files: list[str] = []
        for tp, stop in sorted(end.items()):
            begin = start.get(tp, 0)
            mask = pc.and_(
                pc.and_(
                    pc.equal(rows["topic"], tp.topic), pc.equal(rows["partition"], tp.partition)
                ),
                pc.and_(pc.greater_equal(rows["offset"], begin), pc.less(rows["offset"], stop)),
            )
            part = rows.filter(mask)
            name = f"{tp.topic}-{tp.partition}-{begin:020d}-{stop:020d}-0"
            staged = stage_table(location, ledger_mod.STAGING_DIR, "", part, "ts", name)
            for f in staged:
                location.move(
                    location.child(ledger_mod.STAGING_DIR, f.path), location.child(f.path)
                )
                files.append(f.path)
        entry = ledger_mod.LedgerEntry(
            number=number,
            kind=ledger_mod.BATCH,
            end=dict(end),
            files=tuple(files),
            rows=sum(1 for _ in files),
            start=dict(start),
        )
        if fence is None:
            ledger.append(entry)
        else:
            fence.append(entry)
        start = dict(end)


def claimed(output: str) -> Fence:
    """A run's hold on ``output``, as a start takes it before :func:`app.table.live.prepare`."""
    return fencing.claim(resolve(output), fencing.new_writer("run", None, lease_s=1.0))


def compaction_step_one(location: Location) -> int:
    """The next compaction's step 1 (:func:`table_compact.finish_interrupted`), under the
    rewriter claim a compaction takes; how many interrupted compactions it finished."""
    with rewriter_mod.held(location, rewriter_mod.Claimant("compact")) as claim:
        return table_compact.finish_interrupted(location, claim)


def cuts(rows: pa.Table, batches: int) -> list[Offsets]:
    """End offsets of ``batches`` batches over the rows' partitions, back to back."""
    ends = {
        TopicPartition(t, p): o + 1
        for t, p, o in zip(
            rows["topic"].to_pylist(),
            rows["partition"].to_pylist(),
            rows["offset"].to_pylist(),
            strict=True,
        )
    }
    return [{tp: end * (i + 1) // batches for tp, end in ends.items()} for i in range(batches)]


def duckdb_table_rows(output: Path | str) -> pa.Table:
    """The table's current rows as DuckDB's iceberg extension reads them (from the
    ``duckdb-extension-iceberg`` wheel: ``INSTALL iceberg`` downloads from DuckDB's site)."""
    import importlib
    import os

    import duckdb

    metadata = load_table(output).metadata_location
    con = duckdb.connect()
    try:
        for name in ("avro", "iceberg"):  # iceberg reads its manifests with avro
            module = importlib.import_module(f"duckdb_extension_{name}")
            assert module.__file__ is not None
            folder = os.path.join(os.path.dirname(module.__file__), "extensions")
            con.execute(f"LOAD '{folder}/v{duckdb.__version__}/{name}.duckdb_extension'")
        return con.execute(f"SELECT * FROM iceberg_scan('{metadata}')").to_arrow_table()
    finally:
        con.close()


def capture_rows(folder: Path, spec: CaptureSpec) -> pa.Table:
    """The output rows of ``spec``'s capture, written under ``folder`` (plain Python's)."""
    archive = folder / "archive"
    write_capture(archive, spec)
    return verify.expected_output(str(archive), "^sensor-.+").rows


def assert_exact(expected: pa.Table, output: str) -> None:
    """Both the table and the plain files hold exactly ``expected``."""
    for actual in (table_rows(output), verify.read_output(output)):
        comparison = verify.compare(expected, actual)
        assert comparison.ok, comparison.report()
