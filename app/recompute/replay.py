"""``tablecast replay``: recompute the output's files for a window of time, from the archive.

For when output files must be rebuilt from the lake (Kafka's retention has
passed, files were lost or damaged): every block of the output whose
records have a timestamp in ``[since, until)`` is recomputed on Spark with
the current code (:mod:`app.recompute`); files whose bytes change are published
under new names and the old names retired (:mod:`app.sink.rewrite`).

Into an output the live job wrote, a replay recomputes the ranges its
ledger records (offsets it has not published yet are left to it); into an
output without a ledger, fixed ranges of
:data:`~app.engine.segments.OFFSETS_PER_FILE` offsets. Either way the same
offsets always get the same file names, so replaying a window twice, or
windows that overlap, never duplicates a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from app.contract import loader
from app.contract.processor import Processor
from app.contract.schema import DEFAULT_SCHEMA, TableSchema
from app.contract.table_processor import TableProcessor
from app.engine.machine import IntegrityMode
from app.errors import ConfigurationError
from app.recompute import plan as plan_mod
from app.recompute.plan import PublishedRange
from app.recompute.run import (
    REPLAY,
    Planned,
    Progress,
    RecomputeReport,
    check_startable,
    recompute,
)
from app.recompute.task import RecomputePlan
from app.sink import processors
from app.sink.ledger import Ledger
from app.sink.rewrite import Retirement, RewriteSteps
from app.sources import archive
from app.storage import resolve


def parse_time(text: str) -> int:
    """An ISO 8601 time (UTC unless it says otherwise) in ms since the epoch."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigurationError(
            f"{text!r} is not an ISO 8601 time like 2026-01-01T00:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def plan_replay(
    archive_uri: str,
    output_uri: str,
    since_ms: int,
    until_ms: int,
    *,
    topic_pattern: str,
    integrity: IntegrityMode | None = None,
    session_timeout_ms: int | None = None,
    processor: Processor[Any] | None = None,
    schema: TableSchema = DEFAULT_SCHEMA,
) -> Planned:
    """The ranges to recompute and where to read them; every refusal is raised here,
    before Spark starts. Nothing is changed."""
    if until_ms <= since_ms:
        raise ConfigurationError("--until must be after --since")
    location = archive.require_root(archive_uri)
    index = archive.scan(location, topic_pattern)
    touched = plan_mod.files_in_window(location, index, since_ms, until_ms)
    output = resolve(output_uri)
    ledger = Ledger(output)
    entries = ledger.entries() if output.exists(output.path) else []
    if entries:
        every = [r for r in plan_mod.published_ranges(entries) if r.tp in index.files]
        adopt = ledger.adopted_sessions()
    else:
        every = [
            r
            for tp in sorted(index.files)
            for r in plan_mod.grid_ranges(tp, index.earliest(tp), index.latest(tp))
        ]
        adopt = {}
    chosen = [r for r in every if _overlaps(r, touched.get(r.tp, ()))]
    works = plan_mod.works(chosen, every, index)
    recorded = plan_mod.recorded_rules(chosen, every)
    # With a ledger, its newest processor; without one, the processor given (or the built-in
    # over the schema given: the live job's).
    processor = processor or processors.current(output) or TableProcessor(schema)
    plan = RecomputePlan(
        processor=processor,
        # The built-in processor reads each range with the schema it ran with; a user's
        # runs every range itself.
        schemas=plan_mod.recorded_schemas(output, works)
        if processor.name == loader.BUILT_IN
        else {},
        rules=plan_mod.live_rules(recorded, integrity, session_timeout_ms, adopt),
        archive_uri=archive_uri,
        output_uri=output_uri,
        staging_dir="",
        window_ms=(since_ms, until_ms),
    )
    if output.exists(output.path):
        check_startable(output_uri)
    return Planned(plan, works, REPLAY, f"window {_iso(since_ms)} to {_iso(until_ms)}")


def replay(
    spark: Any,
    archive_uri: str,
    output_uri: str,
    since_ms: int,
    until_ms: int,
    *,
    topic_pattern: str,
    integrity: IntegrityMode | None = None,
    session_timeout_ms: int | None = None,
    processor: Processor[Any] | None = None,
    schema: TableSchema = DEFAULT_SCHEMA,
    progress: Progress | None = None,
    steps: RewriteSteps | None = None,
    retirement: Retirement | None = None,
) -> RecomputeReport:
    planned = plan_replay(
        archive_uri,
        output_uri,
        since_ms,
        until_ms,
        topic_pattern=topic_pattern,
        integrity=integrity,
        session_timeout_ms=session_timeout_ms,
        processor=processor,
        schema=schema,
    )
    return recompute(spark, planned, progress, steps, retirement)


def _overlaps(r: PublishedRange, files: Sequence[archive.ArchiveFile]) -> bool:
    end = r.rows.read_end
    return any(f.start < end and f.end > r.start for f in files)
