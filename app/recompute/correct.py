"""``tablecast correct``: recompute what one job version published, and replace its files.

When a released version turns out to have been wrong (it dropped rows, say),
deploy the fixed version, then correct the output: every range the ledger
says the faulty version (of tablecast, or of the user's processor's
package: ``--processor-version``) published is recomputed from the archive with the
current code (:mod:`app.recompute`) and its changed files published under
new names, the old names retired (:mod:`app.sink.rewrite`): a reader never
misses a row, and sees a rewritten block's rows twice only between the two.

The live job keeps running: a correction touches only ranges already
published, and records itself beside the ledger, never in its numbered
entries. It refuses while the newest batch is still from the faulty version:
that job would go on publishing ranges that need correcting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.contract import loader
from app.contract.processor import Processor
from app.contract.schema import TableSchema
from app.contract.table_processor import TableProcessor
from app.errors import ConfigurationError
from app.recompute import plan as plan_mod
from app.recompute.plan import LEDGER_RULES, GivenRules
from app.recompute.run import (
    CORRECTION,
    Planned,
    Progress,
    RecomputeReport,
    check_startable,
    recompute,
    records,
)
from app.recompute.task import RecomputePlan
from app.sink import ledger as ledger_mod
from app.sink import processors
from app.sink.ledger import Ledger, LedgerEntry, LiveRules
from app.sink.rewrite import Retirement, RewriteSteps
from app.sources import archive
from app.storage import resolve


def matcher(
    version: str | None, commit: str | None, processor_version: str | None = None
) -> tuple[str, Callable[[LedgerEntry], bool]]:
    """The selector's description and test, for ``--version``, ``--commit`` or
    ``--processor-version`` (the version of the user's processor's distribution)."""
    if sum(given is not None for given in (version, commit, processor_version)) != 1:
        raise ConfigurationError("give exactly one of --version, --commit or --processor-version")
    if processor_version is not None:
        return (
            f"processor version {processor_version}",
            lambda e: e.processor is not None and e.processor.version == processor_version,
        )
    if version is not None:
        return f"version {version}", lambda e: e.job is not None and e.job.version == version
    assert commit is not None
    if len(commit) < 7:
        raise ConfigurationError(f"--commit {commit!r}: give at least 7 hex digits")
    return f"commit {commit}", lambda e: bool(
        e.job is not None and e.job.commit and e.job.commit.startswith(commit)
    )


@dataclass(frozen=True)
class Correction:
    """What a correction will do: the tasks, and the sessions repairs adopted."""

    selector: str  # "version 1.4.0", "commit 0123abc"
    works: list[plan_mod.PartitionWork]
    adopt: dict[str, int]
    rules: LiveRules | None  # the live job's over those ranges (None: older ledger entries)
    schemas: dict[str, TableSchema]  # the table schemas the ledger records, by digest


def plan_correction(
    archive_uri: str,
    output_uri: str,
    *,
    version: str | None = None,
    commit: str | None = None,
    processor_version: str | None = None,
) -> Correction:
    """The ranges the selected version published, and where to read each partition from."""
    selector, selected = matcher(version, commit, processor_version)
    location = archive.require_root(archive_uri)
    output = resolve(output_uri)
    if not output.exists(output.path):
        raise ConfigurationError(f"output {output_uri} does not exist")
    ledger = Ledger(output)
    entries = ledger.entries()
    if not entries:
        raise ConfigurationError(f"output {output_uri} has no ledger: nothing was published there")
    batches = [e for e in entries if e.kind is ledger_mod.BATCH]
    if batches and selected(batches[-1]):
        raise ConfigurationError(
            f"the newest batch of {output_uri} (ledger entry {batches[-1].number}, "
            f"{batches[-1].written_at}) was published by {selector}: the live job still runs "
            "it; deploy the fixed version and let it publish a batch, then correct"
        )
    every = plan_mod.published_ranges(entries)
    # By each code that computed a range: the batch's, and each recompute's that rewrote it.
    chosen = plan_mod.select_entries(every, selected, records(output))
    if not chosen:
        seen = sorted({e.job.describe() for e in batches if e.job is not None})
        seen += sorted({e.processor.describe() for e in batches if e.processor is not None})
        raise ConfigurationError(
            f"no batch of {output_uri} was published by {selector}; its batches came from "
            + (", ".join(seen) or "versions the ledger does not record")
        )
    topics = sorted({r.tp.topic for r in every})
    index = archive.scan(location, "|".join(re.escape(t) for t in topics))
    works = plan_mod.works(chosen, every, index)
    return Correction(
        selector,
        works,
        ledger.adopted_sessions(),
        plan_mod.recorded_rules(chosen, every),
        plan_mod.recorded_schemas(output, works),
    )


def planned_correction(
    archive_uri: str,
    output_uri: str,
    *,
    version: str | None = None,
    commit: str | None = None,
    processor_version: str | None = None,
    rules: GivenRules = LEDGER_RULES,
    processor: Processor[Any] | None = None,
) -> Planned:
    """The correction planned with the live job's rules and its newest processor (the fixed
    code, installed here); every refusal is raised here, before Spark starts. Nothing is
    changed."""
    correction = plan_correction(
        archive_uri,
        output_uri,
        version=version,
        commit=commit,
        processor_version=processor_version,
    )
    processor = processor or processors.current(resolve(output_uri)) or TableProcessor()
    plan = RecomputePlan(
        processor=processor,
        schemas=correction.schemas if processor.name == loader.BUILT_IN else {},
        rules=plan_mod.live_rules(correction.rules, rules, correction.adopt),
        archive_uri=archive_uri,
        output_uri=output_uri,
        staging_dir="",
    )
    check_startable(output_uri)
    return Planned(plan, correction.works, CORRECTION, correction.selector)


def correct(
    spark: Any,
    archive_uri: str,
    output_uri: str,
    *,
    version: str | None = None,
    commit: str | None = None,
    processor_version: str | None = None,
    rules: GivenRules = LEDGER_RULES,
    processor: Processor[Any] | None = None,
    progress: Progress | None = None,
    steps: RewriteSteps | None = None,
    retirement: Retirement | None = None,
) -> RecomputeReport:
    """Recompute the ranges the selected version published, and replace their files.

    With the live job's rules, as its ledger records them; ``rules`` only for entries
    older than that record, or to confirm them (a different value is refused).
    """
    planned = planned_correction(
        archive_uri,
        output_uri,
        version=version,
        commit=commit,
        processor_version=processor_version,
        rules=rules,
        processor=processor,
    )
    return recompute(spark, planned, progress, steps, retirement)
