"""The driver half of the engine: plan a micro-batch's tasks, check rule 6, tidy state.

For each micro-batch the driver tells every task which state version to
load (the newest one at or before the partition's start offset), runs the
tasks once over the batch's records (``mapInArrow``, one task per
topic-partition, no shuffle) and compares the sessions they claimed with
the :class:`~app.engine.ownership.Registry`. A session claimed by a second
partition breaks rule 6: a strict run fails at its first message there; a
resync run runs the tasks again, telling the trespassing partitions which
sessions are foreign, so that they quarantine them. Once the batch is
published, the registry takes the batch's claims and the old state
versions are removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.contract.offsets import Offsets, TopicPartition
from app.contract.processor import Processor
from app.engine.machine import IntegrityMode, Rules
from app.engine.ownership import Foreign, Registry, settle
from app.engine.reports import REPORT_DDL, BatchOutcome
from app.engine.store import StateStore, owned_sessions
from app.engine.task import BatchPlan, PartitionTask
from app.errors import StateError

log = logging.getLogger(__name__)

# Versions kept per partition: the one the next batch loads, and a few
# before it for `tablecast inspect --at-batch`.
RETAIN_VERSIONS = 4


class EngineDriver:
    def __init__(
        self,
        processor: Processor[Any],
        rules: Rules,
        state_root: str,
        output_uri: str,
        retain: int = RETAIN_VERSIONS,
    ) -> None:
        self.processor = processor
        self.rules = rules
        self.store = StateStore(state_root)
        self.output_uri = output_uri
        self.retain = retain
        self._versions: dict[TopicPartition, list[int]] | None = None
        self._registry: Registry | None = None
        # Each partition's latest state: sessions held and file size (for metrics).
        self.sessions: dict[TopicPartition, int] = {}
        self.state_bytes: dict[TopicPartition, int] = {}

    def prepare(self, start: Offsets, published_before: bool) -> None:
        """Learn the state at ``start`` (once per run, before its first batch).

        ``published_before``: the output holds batches of this checkpoint, so
        a state must exist for every partition that had records.
        """
        if self._versions is not None:
            return
        self._versions = {tp: self.store.versions(tp) for tp in self.store.partitions()}
        if published_before and start and not any(self._versions.values()):
            raise StateError(
                f"the checkpoint's partition states under {self.store.root_uri} are gone, but "
                "the output holds batches of this checkpoint; run `tablecast repair`"
            )
        registry = Registry()
        for tp, offset in start.items():
            version = self._version_at(tp, offset)
            if version is not None:
                data = self.store.read(tp, version)
                held, owned = owned_sessions(data, self.store.uri(tp, version))
                for session in owned:
                    registry.owners.setdefault(session, tp)
                self.sessions[tp], self.state_bytes[tp] = held, len(data)
        self._registry = registry
        log.info("state of %d partitions, %d sessions owned", len(self._versions), len(registry))

    def run_batch(
        self,
        run_tasks: Callable[[PartitionTask, str], list[Any]],
        start: Offsets,
        end: Offsets,
        staging_dir: str,
        clear_staging: Callable[[], None],
    ) -> BatchOutcome:
        """Run the batch's tasks until rule 6 is settled; nothing is published here.

        ``run_tasks`` runs a task function over the batch's records and
        returns the collected report rows (``frame.mapInArrow(...).collect()``).
        """
        registry = self._require_registry()
        plan = BatchPlan(
            processor=self.processor,
            rules=self.rules,
            state_root=self.store.root_uri,
            output_uri=self.output_uri,
            staging_dir=staging_dir,
            start=start,
            end=end,
            versions={
                tp: v for tp in end if (v := self._version_at(tp, start.get(tp))) is not None
            },
        )

        def run_pass(foreign: Foreign) -> BatchOutcome:
            clear_staging()
            rows = run_tasks(PartitionTask(replace(plan, foreign=foreign)), REPORT_DDL)
            return BatchOutcome.parse(r.asDict() if hasattr(r, "asDict") else r for r in rows)

        return settle(run_pass, registry, self.rules.mode is IntegrityMode.STRICT)

    def committed(self, outcome: BatchOutcome, end: Offsets) -> None:
        """The batch is published: record its sessions and remove old state versions."""
        self._require_registry().apply(outcome.claims, outcome.dropped)
        versions = self._versions if self._versions is not None else {}
        for tp, summary in outcome.partitions.items():
            if summary.end < 0:
                continue
            self.sessions[tp], self.state_bytes[tp] = summary.sessions, summary.state_bytes
            known = versions.setdefault(tp, [])
            if summary.end not in known:
                known.append(summary.end)
                known.sort()
            removed = self.store.collect_garbage(tp, self.retain, needed=end[tp])
            versions[tp] = [v for v in known if v not in removed]

    def _version_at(self, tp: TopicPartition, offset: int | None) -> int | None:
        """The newest known version of ``tp`` at or before ``offset``."""
        if offset is None or self._versions is None:
            return None
        older = [v for v in self._versions.get(tp, []) if v <= offset]
        return older[-1] if older else None

    def _require_registry(self) -> Registry:
        if self._registry is None:
            raise AssertionError("EngineDriver.prepare() must run before the first batch")
        return self._registry
