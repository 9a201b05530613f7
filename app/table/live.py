"""What the live job (``tablecast run``) does with its output's table, beside each batch's commit.

- :class:`LiveTable`, the table the sink commits after each ledger entry:
  its commits expire the snapshots older than ``--table-history``, and the
  files those leave unreferenced are deleted after the metadata's grace
  (:mod:`app.table.history`: a query's planning, not its run).

- :func:`prepare`, before the first batch: with ``--glue-database``, the
  output is catalogued in Glue (``<output>/_iceberg/catalog.json``), its
  table created if it is not there and caught up with the ledger. Every
  start does it again and changes nothing that is already so, so the
  deployed job makes the table on the day of deployment. A table schema
  that adds columns (or makes some nullable) evolves the table first, so
  the Glue table has the columns before a batch's files do.
- :class:`ScheduledCompaction`, with ``--compact-every``: wraps the sink's
  ``foreachBatch`` function. After a batch is committed (ledger entry and
  table snapshot), when the period has passed since the last scheduled
  compaction (``_tablecast/compacted.json``, kept across restarts), it
  compacts the closed days (before today, UTC; :mod:`app.table.compact`)
  without waiting for the grace of its inputs: the first batch after the
  grace retires them (:func:`app.sink.rewrite.finish_abandoned`).
  Spark runs ``foreachBatch`` for one batch at a time, so a compaction never
  overlaps a batch's commit; the next batch waits for it. A compaction that a
  kill interrupted is finished once its lease runs out, by the next batch's
  commit (:func:`app.sink.rewrite.finish_abandoned`) or the next compaction;
  a compaction due while another rewriter holds the output's rewriter claim
  (``tablecast compact``, a recompute, a repair, planning or carrying out:
  :mod:`app.sink.rewriter`), or while a rewrite is in its grace, is left for
  the next period, with one line in the log, never waiting.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from app import defaults
from app.contract.schema import TableSchema
from app.errors import ConfigurationError, TablecastError
from app.sink import rewrite as rewrite_mod
from app.sink import schemas
from app.sink.ledger import CONTROL_DIR
from app.sink.rewrite import Retirement, Rewrite
from app.sink.rewriter import Claimant
from app.storage import Location, resolve
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.table.catalog import (
    TABLE_NAME,
    config_for,
    evolve,
    glue_config,
    open_table,
    save_config,
    threads_released,
)
from app.table.history import MetadataFiles, TableHistory, metadata_grace

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from app.sink.fencing import Fence

log = logging.getLogger(__name__)

LAST_RUN_FILE = posixpath.join(CONTROL_DIR, "compacted.json")


@dataclass(frozen=True, kw_only=True)
class TableSettings:
    """``tablecast run``'s options for the output's table."""

    glue_database: str = ""  # catalogue the output in this Glue database ("": as it is)
    glue_table: str = TABLE_NAME
    region: str = ""  # Glue's, with glue_database
    compact_every_s: float = 0.0  # 0: the job never compacts by itself
    compact_target_bytes: int = table_compact.DEFAULT_TARGET_BYTES
    retire_grace_s: float | None = None  # its compactions' grace (None: the rewrites' default)
    history_s: float = defaults.TABLE_HISTORY_S  # --table-history (app/table/history.py)


class LiveTable:
    """The output's table as the live job's sink keeps it (a
    :class:`app.sink.follower.TableUpkeep`): each batch's commit also expires the snapshots
    older than the history; the metadata files they leave are deleted after the metadata's
    grace (:func:`app.table.history.metadata_grace`)."""

    def __init__(self, settings: TableSettings) -> None:
        self.history = TableHistory(keep_s=settings.history_s)
        grace = settings.retire_grace_s
        retire = rewrite_mod.DEFAULT_GRACE_S if grace is None else grace
        self.files = MetadataFiles(grace_s=metadata_grace(retire))
        self._table: Table | None = None

    def catch_up(self, location: Location, *, below: int | None = None) -> int:
        def committed(table: Table) -> None:
            self._table = table
            self.files.note(location, table)

        return table_commit.catch_up(
            location, below=below, history=self.history, committed=committed
        )

    def snapshot_rewrite(self, location: Location, rewrite: Rewrite) -> None:
        table_commit.snapshot_rewrite(location, rewrite)

    def tidy(
        self, location: Location, before: Callable[[], None], deleted: Callable[[int], None]
    ) -> int:
        if self._table is None:
            return 0
        with threads_released():
            return self.files.delete(location, self._table, before, deleted)


def prepare(output: str, settings: TableSettings, schema: TableSchema, fence: Fence) -> None:
    """Catalogue the output as the settings say, make its table and bring it to ``schema``
    (the run's table schema, already checked against the output's), before the first batch.

    ``fence``: the run's hold on the output, checked before each change. A writer that
    paused between its claim and here, and was taken over, would otherwise bring the table
    back to its own schema, dropping the columns its successor added before their first
    batch: that successor's every table commit would then fail."""
    location = resolve(output)
    if settings.glue_database:
        if not settings.region:
            raise ConfigurationError("--glue-database needs --region (or AWS_REGION)")
        config = glue_config(
            location,
            database=settings.glue_database,
            region=settings.region,
            table=settings.glue_table,
        )
        if config_for(location) != config:
            fence.check("cataloguing the output")
            save_config(location, config)
            log.info("output %s catalogued as %s in Glue", location.uri, config.table)
        fence.check("making the output's table")
        with threads_released():
            # Made with the run's schema: before a first batch the ledger names none, and the
            # default schema's columns (its key among them) are not this table's.
            open_table(location, config, schema)
            table_commit.catch_up(location)
    held = schemas.current(location)
    # The columns a schema added, before a batch writes them, and a table made before the
    # first batch (`tablecast table`: the default schema's) brought to the run's; an
    # unchanged schema leaves the table as it is (a start opens the local catalog only with
    # --glue-database).
    if settings.glue_database or held != schema:
        fence.check("evolving the table's schema")
        with threads_released():
            evolve(location, schema)
    if settings.compact_every_s and config_for(location) is None:
        raise ConfigurationError(
            f"--compact-every needs the Iceberg table of {location.uri}: give --glue-database "
            "(or run `tablecast table --output ... --glue-database DATABASE` once)"
        )


def scheduled(
    sink: Callable[[Any, int], None], output: str, settings: TableSettings
) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function: the sink, and compaction on the settings' schedule."""
    if not settings.compact_every_s:
        return sink
    return ScheduledCompaction(
        sink=sink,
        output=output,
        every_s=settings.compact_every_s,
        target_bytes=settings.compact_target_bytes,
        retire_grace_s=settings.retire_grace_s,
    )


def last_run(location: Location) -> datetime | None:
    path = location.child(LAST_RUN_FILE)
    if not location.exists(path):
        return None
    return datetime.fromisoformat(orjson.loads(location.read_bytes(path))["at"])


@dataclass
class ScheduledCompaction:
    sink: Callable[[Any, int], None]
    output: str
    every_s: float
    target_bytes: int = table_compact.DEFAULT_TARGET_BYTES
    retire_grace_s: float | None = None
    steps: table_compact.CompactionSteps | None = None  # tests inject crashes
    # Never waits for another rewriter: skips the period (kept across periods: it takes the
    # claim of a holder it finds unrenewed a lease after it first saw it).
    claimant: Claimant = field(default_factory=lambda: Claimant("run", watch=False))
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    runs: int = field(default=0, init=False)  # compactions this process ran

    def __call__(self, frame: Any, batch_id: int) -> None:
        self.sink(frame, batch_id)
        self.after_batch()

    def after_batch(self) -> None:
        location = resolve(self.output)
        now = self.clock()
        last = last_run(location)
        if last is not None and (now - last).total_seconds() < self.every_s:
            return
        try:
            report = table_compact.compact(
                location,
                before=now.date(),
                target_bytes=self.target_bytes,
                steps=self.steps,
                # The job never waits: a later batch retires the inputs after the grace.
                retirement=Retirement(grace_s=self.retire_grace_s, wait=False),
                claimant=self.claimant,
            )
        except TablecastError as exc:
            # Compaction is upkeep: the stream goes on, and the next period tries again
            # (a compaction a failure interrupted is finished first; one whose owner is
            # still at work, a `tablecast compact` or a recompute, is left to it).
            log.warning(
                "scheduled compaction of %s not done: %s; next try in %.0f s",
                location.uri,
                exc,
                self.every_s,
            )
        except Exception:
            log.exception(
                "scheduled compaction of %s failed; next try in %.0f s", location.uri, self.every_s
            )
        else:
            self.runs += 1
            log.info(
                "scheduled compaction of %s: %d files into %d (%d rows)",
                location.uri,
                report.inputs,
                report.outputs,
                report.rows,
            )
        location.write_bytes_atomic(
            location.child(LAST_RUN_FILE), orjson.dumps({"at": now.isoformat()})
        )
