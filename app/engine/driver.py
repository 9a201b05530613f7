"""The driver half of the engine: plan a micro-batch's tasks, check rule 6, tidy state.

For each micro-batch the driver tells every task which state version to
load: exactly the one the output's ledger records as the partition's last
(offset and content digest, :class:`~app.engine.state.StateVersion`), never
whichever file is there, so a lost or damaged version is a state error
naming it, not a gap in the data. It runs the tasks once over the batch's
records (``mapInArrow``, one task per topic-partition, no shuffle) and
compares the sessions they claimed with the
:class:`~app.engine.ownership.Registry`. A session claimed by a second
partition breaks rule 6: a strict run fails at its first message there; a
resync run runs the tasks again over the same records (each task checks
its records' fingerprint against the first pass's), telling the
trespassing partitions which sessions are foreign, so that they quarantine
them. Once the batch is published, the registry takes the batch's claims,
the versions it saved become the ones to load, and every other version but
the last few published ones is removed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from app.contract.offsets import Offsets, TopicPartition
from app.contract.processor import Processor
from app.engine.machine import IntegrityMode, Rules
from app.engine.ownership import Foreign, Registry, settle
from app.engine.reports import REPORT_DDL, BatchOutcome
from app.engine.state import StateVersion
from app.engine.store import StateFacts, StateStore, decode, owned_sessions, user_decoder
from app.engine.task import BatchPlan, PartitionTask
from app.engine.writer import layout_of
from app.errors import DataLossError, StateError
from app.storage import resolve

log = logging.getLogger(__name__)

# Published versions kept per partition: the one the next batch loads, and a
# few before it for `tablecast inspect --at-batch`.
RETAIN_VERSIONS = 4

States = Mapping[TopicPartition, StateVersion]


class EngineDriver:
    def __init__(
        self,
        processor: Processor[Any],
        rules: Rules,
        state_root: str,
        output_uri: str,
        retain: int = RETAIN_VERSIONS,
        group_offsets: int = 0,
    ) -> None:
        self.processor = processor
        self.group_offsets = group_offsets  # the source's groupOffsets: the tasks' groups
        self.rules = rules
        self.store = StateStore(state_root)
        self.output_uri = output_uri
        self.retain = retain
        self._states: dict[TopicPartition, StateVersion] | None = None
        # Per partition, the versions published batches left, oldest first.
        self._published: dict[TopicPartition, list[StateVersion]] = {}
        # Partitions whose unneeded versions are removed at the next collect_garbage().
        self._untidy: set[TopicPartition] = set()
        self._registry: Registry | None = None
        # Each partition's latest state: sessions held and file size (for metrics).
        self.sessions: dict[TopicPartition, int] = {}
        self.state_bytes: dict[TopicPartition, int] = {}

    @property
    def prepared(self) -> bool:
        """Whether :meth:`prepare` has learnt the state (a run's first batch has started)."""
        return self._states is not None

    def prepare(
        self,
        start: Offsets,
        states: States | None,
        history: Sequence[States] = (),
    ) -> None:
        """Learn the state at ``start`` (once per run, before its first batch).

        ``states``: each partition's version at ``start``, as the ledger
        records it (``{}`` for a new output or after a repair); ``None`` for a
        ledger written before versions were recorded, whose newest version
        at or before ``start`` is taken. ``history``: the versions recorded
        by the last few published batches, oldest first (kept by the garbage
        collector). Every version is read here, so a missing or damaged one
        stops the run before its first batch.
        """
        if self.prepared:
            return
        if states is None:
            states = self._found_at(start)
        for recorded in history:
            for tp, version in recorded.items():
                self._keep(tp, version)
        registry = Registry()
        for tp, version in sorted(states.items()):
            self._keep(tp, version)
            data = self.store.read(tp, version)
            where = self.store.uri(tp, version)
            facts = StateFacts.read(data, where)
            user_decoder(self.processor, facts, where)  # another processor's: refused
            if facts.state_version != self.processor.state_version:
                decode(data, self.processor, where)  # a migration that fails fails here
            held, owned = owned_sessions(data, where)
            for session in owned:
                registry.owners.setdefault(session, tp)
            self.sessions[tp], self.state_bytes[tp] = held, len(data)
        self._states = dict(states)
        self._registry = registry
        log.info("state of %d partitions, %d sessions owned", len(states), len(registry))

    def _found_at(self, start: Offsets) -> dict[TopicPartition, StateVersion]:
        """A ledger that records no versions: the newest present at or before each start."""
        found = {tp: self.store.versions(tp) for tp in self.store.partitions()}
        if start and not any(found.values()):
            raise StateError(
                f"the checkpoint's partition states under {self.store.root_uri} are gone, but "
                "the output holds batches of this checkpoint; run `tablecast repair`"
            )
        at: dict[TopicPartition, StateVersion] = {}
        for tp, offset in start.items():
            older = [v for v in found.get(tp, []) if v.offset <= offset]
            if older:
                at[tp] = older[-1]
        return at

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
        states = self._states or {}
        plan = BatchPlan(
            processor=self.processor,
            rules=self.rules,
            state_root=self.store.root_uri,
            output_uri=self.output_uri,
            staging_dir=staging_dir,
            start=start,
            end=end,
            versions={tp: states[tp] for tp in end if tp in states},
            group_offsets=self.group_offsets,
            layout=layout_of(resolve(self.output_uri)),
        )
        first: dict[TopicPartition, str] = {}

        def run_pass(foreign: Foreign) -> BatchOutcome:
            clear_staging()
            task = PartitionTask(replace(plan, foreign=foreign, records=dict(first)))
            rows = run_tasks(task, REPORT_DDL)
            outcome = BatchOutcome.parse(r.asDict() if hasattr(r, "asDict") else r for r in rows)
            read = {tp: s.records for tp, s in outcome.partitions.items()}
            if not first:
                first.update(read)
            elif read.keys() != first.keys():
                tp = min(read.keys() ^ first.keys())
                raise DataLossError(
                    f"the source gave {'no' if tp in first else 'new'} records for {tp.key()} "
                    "in a later pass of the micro-batch: it changed between passes",
                    topic=tp.topic,
                    partition=tp.partition,
                )
            return outcome

        return settle(run_pass, registry, self.rules.mode is IntegrityMode.STRICT)

    def states_after(self, outcome: BatchOutcome) -> dict[TopicPartition, StateVersion]:
        """Every partition's last version once ``outcome`` is published (for the ledger)."""
        saved = {tp: s.version for tp, s in outcome.partitions.items() if s.version is not None}
        return {**(self._states or {}), **saved}

    def committed(self, outcome: BatchOutcome, states: States) -> None:
        """The batch is published with ``states``: record its sessions and which versions
        are no longer needed (removed by :meth:`collect_garbage`, once the writer has
        checked that the output is still its own)."""
        self._require_registry().apply(outcome.claims, outcome.dropped)
        self._states = dict(states)
        for tp, summary in outcome.partitions.items():
            if summary.version is None or tp not in states:
                continue
            self.sessions[tp], self.state_bytes[tp] = summary.sessions, summary.state_bytes
            self._keep(tp, states[tp])
            self._untidy.add(tp)

    def collect_garbage(self) -> None:
        """Remove, for each partition a published batch touched, older published versions
        beyond the last few and versions no batch published (an earlier resync pass, a
        crashed attempt, a zombie task); never one newer than the last published."""
        for tp in sorted(self._untidy):
            self.store.collect_garbage(tp, keep=self._published[tp])
        self._untidy.clear()

    def _keep(self, tp: TopicPartition, version: StateVersion) -> None:
        kept = self._published.setdefault(tp, [])
        if version not in kept:
            kept.append(version)
        del kept[: -self.retain]

    def _require_registry(self) -> Registry:
        if self._registry is None:
            raise AssertionError("EngineDriver.prepare() must run before the first batch")
        return self._registry
