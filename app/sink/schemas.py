"""The table schemas an output was written with, kept beside its ledger.

``<output>/_tablecast/schemas/<digest>.json`` holds each schema a batch ran
with (:meth:`~app.contract.schema.TableSchema.to_json`, named by its
digest); every ledger entry names the one its rows were computed with
(:attr:`~app.sink.ledger.LedgerEntry.schema`; entries without one were
written with the default schema, the shape of versions 1.x). So a
recompute or a repair reads each range with the schema it was published
with, and a restart is checked against the schema the output holds now.
"""

from __future__ import annotations

import logging
import posixpath

from app.contract.schema import DEFAULT_SCHEMA, TableSchema, check_evolution
from app.engine.writer import LAYOUT_FILE, DayLayout, layout_of, record_layout
from app.errors import OutputStateError
from app.sink.ledger import CONTROL_DIR, Ledger, LedgerEntry
from app.sink.visible import visible_files
from app.storage import Location

log = logging.getLogger(__name__)

SCHEMAS_DIR = posixpath.join(CONTROL_DIR, "schemas")


def _path(location: Location, digest: str) -> str:
    return location.child(SCHEMAS_DIR, f"{digest}.json")


def save(location: Location, schema: TableSchema) -> None:
    """Record ``schema`` (once: its name is its digest)."""
    path = _path(location, schema.digest)
    if not location.exists(path):
        location.write_bytes_atomic(path, schema.to_json())


def load(location: Location, digest: str | None) -> TableSchema:
    """The schema a ledger entry names (``None``: the default schema)."""
    if digest is None or digest == DEFAULT_SCHEMA.digest:
        return DEFAULT_SCHEMA
    path = _path(location, digest)
    if not location.exists(path):
        raise OutputStateError(
            f"output {location.uri} has no record of the table schema {digest[:12]} its "
            f"ledger names ({SCHEMAS_DIR}/{digest}.json is missing)",
            output=location.uri,
            path=path,
        )
    return TableSchema.from_json(location.read_bytes(path), f"{location.uri}/{SCHEMAS_DIR}")


def of_entry(location: Location, entry: LedgerEntry) -> TableSchema:
    return load(location, entry.schema)


def current(location: Location) -> TableSchema | None:
    """The schema the output's newest ledger entry names; None for an output with no ledger."""
    head = Ledger(location).head()
    return None if head is None else of_entry(location, head)


def check(location: Location, schema: TableSchema, document: str) -> None:
    """Refuse a schema the output cannot take (CONTRACT.md 1a, evolution); writes nothing."""
    held = current(location) if location.exists(location.path) else None
    if held is not None and held.digest != schema.digest:
        check_evolution(held, schema, document)


def check_start(location: Location, schema: TableSchema, document: str) -> None:
    """Refuse a run whose schema the output cannot take, before anything is written; then
    record the schema, so that every entry's digest resolves, and a new output's layout."""
    check(location, schema, document)
    settle_layout(location)
    held = current(location) if location.exists(location.path) else None
    if held is not None and held.digest != schema.digest:
        log.info(
            "output %s: table schema evolves from %s to %s (%s)",
            location.uri,
            held.digest[:12],
            schema.digest[:12],
            schema.describe(),
        )
    if schema.digest != DEFAULT_SCHEMA.digest:
        save(location, schema)


def settle_layout(location: Location) -> DayLayout:
    """Record the layout of days of an output this run makes (:attr:`DayLayout.DATE_COLUMN`)
    or of one made before the record (:attr:`DayLayout.HIVE_KEY`: its files stay in
    ``date=<day>/``, since readers cannot open a dataset of both); once, at its first start."""
    if location.exists(location.child(LAYOUT_FILE)):
        return layout_of(location)
    made = location.exists(location.path) and (
        Ledger(location).head() is not None or bool(visible_files(location))
    )
    layout = DayLayout.HIVE_KEY if made else DayLayout.DATE_COLUMN
    record_layout(location, layout)
    log.info("output %s: days laid out as %s", location.uri, layout.value)
    return layout
