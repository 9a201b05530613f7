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

    def rows(self) -> pa.Table:
        tables = [r.rows.to_table() for _, r in sorted(self.results.items())]
        return pa.concat_tables(tables) if tables else output_schema(self.schema).empty_table()

    @property
    def quarantined(self) -> list[QuarantinedRecord]:
        return [q for _, r in sorted(self.results.items()) for q in r.quarantined]

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.results.values())


def run_partitions(
    partitions: Sequence[TopicPartition],
    read: PartitionReader,
    processor: Processor[Any],
    rules: Rules,
) -> InProcessOutcome:
    """Run every partition from an empty state; rule 6 settled across them."""

    def run_pass(foreign: Foreign) -> InProcessOutcome:
        outcome = InProcessOutcome(schema=processor.schema)
        for tp in partitions:
            machine = PartitionMachine(processor, rules, foreign.get(tp))
            state: PartitionState[Any] = PartitionState.empty(tp, 0)
            result = PartitionResult(RowColumns(tp, machine.processor.schema))
            for records in read(tp):
                machine.run(state, records, result)
                if result.violations and rules.mode is IntegrityMode.STRICT:
                    break
            outcome.results[tp] = result
            outcome.states[tp] = state
            outcome.violations.extend(result.violations)
        outcome.violations.sort(key=lambda v: (v.topic, v.partition, v.offset))
        return outcome

    return settle(run_pass, Registry(), rules.mode is IntegrityMode.STRICT)
