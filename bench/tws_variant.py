"""The job with ``transformWithStateInPandas`` instead, for the operator choice.

Same source, same ``SessionMachine``, same state row and same sink; only the
stateful operator differs. ``python bench/tws_variant.py ARCHIVE OUTPUT
CHECKPOINT`` runs it available-now; ``bench/job_vs_copy.py --with-tws``
times it beside the others.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from app import stateful
from app.job import ArchiveSource, JobConfig, Trigger, run, spark_session
from app.session import SessionMachine


class SessionStatefulProcessor(StatefulProcessor):
    def __init__(self, function: stateful.StateFunction) -> None:
        self.function = function

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.state = handle.getValueState("session", stateful.STATE_DDL)

    def handleInputRows(  # noqa: N802
        self,
        key: Any,
        rows: Iterator[Any],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        fn = self.function
        row = self.state.get() if self.state.exists() else None
        stored = stateful._load(fn.processor, row).state if row is not None else None
        machine = SessionMachine(fn.processor, fn.mode, fn.adopt, fn.trace)
        result = machine.apply(key[0], stored, list(stateful._records(rows)))
        if result.state is None:
            self.state.clear()
        else:
            self.state.update(stateful._dump(fn.processor, result.state, 0))
        frame = stateful._events(result)
        if len(frame):
            yield frame

    def close(self) -> None:
        pass


def transform(records: Any, function: stateful.StateFunction) -> Any:
    from pyspark.sql import functions as sf

    return (
        records.select(
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            sf.unix_millis("timestamp").alias("timestamp_ms"),
        )
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=SessionStatefulProcessor(function),
            outputStructType=stateful.OUTPUT_DDL,
            outputMode="Append",
            timeMode="None",
        )
    )


def main(archive: str, output: str, checkpoint: str) -> int:
    spark = spark_session("local[2]")
    config = JobConfig(
        source=ArchiveSource(archive), output=output, checkpoint=checkpoint,
        trigger=Trigger.parse("available-now"), max_offsets_per_trigger=1_000_000,
    )  # fmt: skip
    run(spark, config, transform=transform)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
