"""The floor: one plain Python process doing the job's parsing, state and writing.

No Spark, no integrity rules, no exactly-once: each topic-partition's
archive files in offset order, every value parsed with ``orjson`` and
applied to its session's table (dicts), the changed rows gathered per file
into columns and written as one Parquet file. What the job's batches cost
per core is compared with what this loop costs (``make bench``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.peer import OUTPUT_DDL_NAMES, apply_naively


def run_floor(archive: str, output: str) -> int:
    """Apply every record of ``archive`` and write the rows under ``output``; the rows written."""
    written = 0
    sessions: dict[str, tuple[int, dict[str, Any] | None]] = {}
    out_dir = Path(output)
    out_dir.mkdir(parents=True, exist_ok=True)
    for part_dir in sorted(p for topic in Path(archive).iterdir() for p in topic.iterdir()):
        for file in sorted(part_dir.glob("*.parquet")):
            records = pq.read_table(file, columns=["key", "value", "topic", "partition", "offset"])
            columns: dict[str, list[Any]] = {name: [] for name in OUTPUT_DDL_NAMES}
            for key, topic, partition, offset, value in zip(
                records.column("key").to_pylist(),
                records.column("topic").to_pylist(),
                records.column("partition").to_pylist(),
                records.column("offset").to_pylist(),
                records.column("value").to_pylist(),
                strict=True,
            ):
                session = key.decode()
                last_seq, table = sessions.get(session, (-1, None))
                last_seq, table, rows = apply_naively(
                    session, last_seq, table, [(topic, partition, offset, value)]
                )
                sessions[session] = (last_seq, table)
                for row in rows:
                    for name in OUTPUT_DDL_NAMES:
                        columns[name].append(row[name])
            name = f"{part_dir.parent.name}-{part_dir.name}-{file.stem}.parquet"
            pq.write_table(pa.table(columns), out_dir / name)
            written += len(columns["row_id"])
    return written


if __name__ == "__main__":
    print(f"rows {run_floor(sys.argv[1], sys.argv[2])}")
