"""The engine in one Python process, over whole partitions: ``verify``'s expectation.

Runs each topic-partition's records through a
:class:`~app.engine.machine.PartitionMachine` from an empty state, as one
micro-batch, and settles rule 6 across partitions exactly as the driver
does (:func:`app.engine.ownership.settle`). No Spark, no files written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from app.contract.offsets import TopicPartition
from app.contract.processor import Processor
from app.contract.schema import DEFAULT_SCHEMA, TableSchema
from app.engine.machine import (
    Claim,
    Drop,
    IntegrityMode,
    PartitionMachine,
    PartitionResult,
    RecordColumns,
    Rules,
)
from app.engine.output import QuarantinedRecord, RowColumns, output_schema
from app.engine.ownership import Foreign, Registry, settle
from app.engine.state import PartitionState
from app.errors import Violation

# A partition's records, a slice at a time, in offset order.
PartitionReader = Callable[[TopicPartition], Iterable[RecordColumns]]
# Where the live job restarted a partition with another table schema: (offset, processor),
# ascending; records before the first change use the processor run_partitions was given.
SchemaChanges = Mapping[TopicPartition, Sequence[tuple[int, Processor[Any]]]]


@dataclass
class InProcessOutcome:
    """Every partition's result of one run over whole partitions."""

    results: dict[TopicPartition, PartitionResult] = field(default_factory=dict)
    states: dict[TopicPartition, PartitionState[Any]] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    foreign: Foreign = field(default_factory=dict)
    schema: TableSchema = DEFAULT_SCHEMA

    @property
    def claims(self) -> Mapping[TopicPartition, Sequence[Claim]]:
        return {tp: r.claims for tp, r in self.results.items()}

    @property
    def dropped(self) -> Mapping[TopicPartition, Sequence[Drop]]:
        return {tp: r.dropped for tp, r in self.results.items()}

    # Rows made with a partition's earlier schemas, before it changed (a table each).
    earlier: dict[TopicPartition, list[pa.Table]] = field(default_factory=dict)

    def rows(self) -> pa.Table:
        """Every row; under the last schema's columns (files read by name: added ones null)."""
        schema = output_schema(self.schema)
        tables = [
            table
            for tp, r in sorted(self.results.items())
            for table in [*self.earlier.get(tp, []), r.rows.to_table()]
        ]
        if not tables:
            return schema.empty_table()
        whole = pa.concat_tables(tables, promote_options="default")
        return whole.select(schema.names).cast(schema)

    @property
    def quarantined(self) -> list[QuarantinedRecord]:
        return [q for _, r in sorted(self.results.items()) for q in r.quarantined]

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.results.values())

    @property
    def repeats(self) -> int:
        return sum(r.repeats for r in self.results.values())

    @property
    def gaps(self) -> int:
        return sum(r.gaps for r in self.results.values())


def run_partitions(
    partitions: Sequence[TopicPartition],
    read: PartitionReader,
    processor: Processor[Any],
    rules: Rules,
    changes: SchemaChanges | None = None,
) -> InProcessOutcome:
    """Run every partition from an empty state; rule 6 settled across them. ``changes``:
    where a partition goes on with another schema's processor (the last one is
    ``processor``'s or a superset of it)."""
    last = processor.output
    for switches in (changes or {}).values():
        if switches:
            last = switches[-1][1].output

    def run_pass(foreign: Foreign) -> InProcessOutcome:
        outcome = InProcessOutcome(schema=last)
        for tp in partitions:
            machine = PartitionMachine(processor, rules, foreign.get(tp))
            state: PartitionState[Any] = PartitionState.empty(tp, 0)
            result = PartitionResult(RowColumns(tp, processor.output, processor.name))
            pending = list((changes or {}).get(tp, ()))
            for records in read(tp):
                for part in _at_changes(records, pending):
                    while pending and part.offsets and part.offsets[0] >= pending[0][0]:
                        _, switched = pending.pop(0)
                        if switched is not machine.processor:
                            outcome.earlier.setdefault(tp, []).append(result.rows.to_table())
                            machine.switch(state, switched)
                            result.rows = RowColumns(tp, switched.output, switched.name)
                    machine.run(state, part, result)
                    if result.violations and rules.mode is IntegrityMode.STRICT:
                        break
                if result.violations and rules.mode is IntegrityMode.STRICT:
                    break
            outcome.results[tp] = result
            outcome.states[tp] = state
            outcome.violations.extend(result.violations)
        outcome.violations.sort(key=lambda v: (v.topic, v.partition, v.offset))
        return outcome

    return settle(run_pass, Registry(), rules.mode is IntegrityMode.STRICT)


def _at_changes(
    records: RecordColumns, pending: Sequence[tuple[int, Processor[Any]]]
) -> Iterable[RecordColumns]:
    """``records`` cut where a schema change of ``pending`` falls inside them."""
    lo = 0
    offsets = records.offsets
    for at, _ in pending:
        cut = next((i for i in range(lo, len(offsets)) if offsets[i] >= at), len(offsets))
        if lo < cut < len(offsets):
            yield _slice(records, lo, cut)
            lo = cut
    yield _slice(records, lo, len(offsets)) if lo else records


def _slice(records: RecordColumns, lo: int, hi: int) -> RecordColumns:
    keys, values, offsets, stamps = records
    return RecordColumns(keys[lo:hi], values[lo:hi], offsets[lo:hi], stamps[lo:hi])
