"""Benchmark: the per-message path in plain Python, one core, no Spark.

Runs the partition engine (:class:`app.engine.machine.PartitionMachine`
with the table processor and full validation) over every topic-partition
of a capture of the bench's shape, builds the output rows as Arrow tables
and encodes the final states, as a task does. Prints messages per second
of CPU time (one core) for each part and in total. Figures, not assertions.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from app.contract.offsets import TopicPartition
from app.contract.table_processor import Table, TableProcessor
from app.engine.machine import PartitionMachine, RecordColumns, Rules
from app.engine.state import PartitionState
from app.engine.store import encode
from app.tools import generate as gen


@dataclass(frozen=True)
class Partition:
    tp: TopicPartition
    records: RecordColumns


def capture(sessions: int, updates: int, rows_min: int, rows_max: int) -> list[Partition]:
    spec = gen.CaptureSpec(
        topics=8,
        partitions=4,
        sessions=sessions,
        rows_min=rows_min,
        rows_max=rows_max,
        updates=updates,
        seed=1,
    )
    made = gen.generate(spec)
    partitions = []
    for tp, messages in sorted(made.partitions.items()):
        keys = [m.session.encode() for m in messages]
        values = [m.value for m in messages]
        stamps = [m.ts for m in messages]
        partitions.append(Partition(tp, RecordColumns(keys, values, range(len(messages)), stamps)))
    return partitions


def run(partitions: list[Partition]) -> tuple[int, int, float, float, float]:
    processor = TableProcessor()
    machine = PartitionMachine(processor, Rules())
    messages = rows = 0
    apply_s = table_s = encode_s = 0.0
    for part in partitions:
        state: PartitionState[Table] = PartitionState.empty(part.tp, 0)
        started = time.process_time()
        result = machine.run(state, part.records)
        applied = time.process_time()
        table = result.rows.to_table()
        built = time.process_time()
        encode(state, processor)
        encoded = time.process_time()
        assert not result.violations, result.violations[0].describe()
        messages += result.messages
        rows += table.num_rows
        apply_s += applied - started
        table_s += built - applied
        encode_s += encoded - built
    return messages, rows, apply_s, table_s, encode_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=400)
    parser.add_argument("--updates", type=int, default=1875)
    parser.add_argument("--rows-min", type=int, default=100)
    parser.add_argument("--rows-max", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    args = parser.parse_args()
    partitions = capture(args.sessions, args.updates, args.rows_min, args.rows_max)
    best: tuple[int, int, float, float, float] | None = None
    for _ in range(args.repeat):
        result = run(partitions)
        if best is None or sum(result[2:]) < sum(best[2:]):
            best = result
    assert best is not None
    messages, rows, apply_s, table_s, encode_s = best
    total = apply_s + table_s + encode_s
    print(f"engine, plain Python, one core: {messages:,} messages, {rows:,} output rows")
    print(f"  apply (parse, validate, rules, processor): {messages / apply_s:>9,.0f} messages/s")
    print(f"  output rows as Arrow:                      {messages / table_s:>9,.0f} messages/s")
    print(f"  encode the partitions' states:             {messages / encode_s:>9,.0f} messages/s")
    print(
        f"  all of it:                                 {messages / total:>9,.0f} messages/s "
        "(target >= 40,000)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
