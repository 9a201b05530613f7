"""The baseline the job is measured against: Spark's keyed stateful operator, done naively.

What a team new to the problem writes with Structured Streaming: the same
source, ``groupBy(key).applyInPandasWithState`` (a shuffle by session, the
session's state as JSON in Spark's state store), and Spark's own Parquet
file sink. Each call sorts its session's records by offset (the shuffle
keeps no order), checks the sequence, applies each message to the table
and writes the same output columns. It enforces nothing else.

Two versions of the per-message code:

- ``naive`` (the baseline): plain ``orjson.loads`` and dicts, as such a team
  writes it;
- ``engine``: the job's own envelope parser and table processor, so that
  only the structure (shuffle, state store, file sink) differs from the job.

And Spark 4's ``transformWithState`` (:data:`TWS`, Row-based, on the
RocksDB state store it requires) with the naive code: the session's
sequence and table as one JSON ``ValueState``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import orjson
import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

from app.contract.envelope import MessageType, parse_envelope
from app.contract.table_processor import Table, TableProcessor

OUTPUT_DDL = (
    "topic string, partition int, offset long, session string, seq long, type string, "
    "ts_ms long, row_id string, value double, status string, deleted boolean"
)
STATE_DDL = "state string"


def apply_naively(
    session: str,
    last_seq: int,
    table: dict[str, Any] | None,
    records: list[tuple[str, int, int, bytes]],
) -> tuple[int, dict[str, Any] | None, list[dict[str, Any]]]:
    """One session's records (topic, partition, offset, value), in offset order, applied.

    Plain ``orjson.loads`` and dicts, as a team new to the problem writes it;
    both naive peers run it, so that only their Spark operator differs.
    """
    out: list[dict[str, Any]] = []
    for topic, partition, offset, value in records:
        doc = orjson.loads(value)
        if doc["session"] != session or doc["seq"] != last_seq + 1:
            raise ValueError(f"{session}: expected seq {last_seq + 1}, got {doc['seq']}")
        last_seq = doc["seq"]
        base = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "session": session,
            "seq": doc["seq"],
            "type": doc["type"],
            "ts_ms": doc["ts"],
        }
        if doc["type"] == "end":
            table = None
            continue
        if doc["type"] == "snapshot":
            new = {row["id"]: [row["value"], row["status"]] for row in doc["rows"]}
            gone = [row_id for row_id in (table or {}) if row_id not in new]
            table = new
        else:
            table = table or {}
            gone = list(doc.get("deleted") or [])
            for row_id in gone:
                del table[row_id]
            for row in doc["rows"]:
                table[row["id"]] = [row["value"], row["status"]]
        for row_id in gone:
            out.append({**base, "row_id": row_id, "value": None, "status": None, "deleted": True})
        for row in doc["rows"]:
            out.append(
                {
                    **base,
                    "row_id": row["id"],
                    "value": row["value"],
                    "status": row["status"],
                    "deleted": False,
                }
            )
    return last_seq, table, out


def update_session_naively(
    key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    session = key[0].decode() if isinstance(key[0], bytes | bytearray) else str(key[0])
    stored: dict[str, Any] = (
        orjson.loads(state.get[0]) if state.exists else {"seq": -1, "table": None}
    )
    frame = pd.concat(list(frames)).sort_values("offset")
    records = [
        (topic, partition, offset, bytes(value))
        for topic, partition, offset, value in zip(
            frame["topic"], frame["partition"], frame["offset"], frame["value"], strict=True
        )
    ]
    last_seq, table, out = apply_naively(session, stored["seq"], stored["table"], records)
    state.update((orjson.dumps({"seq": last_seq, "table": table}).decode(),))
    yield pd.DataFrame(out, columns=OUTPUT_DDL_NAMES)


class NaiveSessionProcessor(StatefulProcessor):
    """``transformWithState`` (Spark 4's Row-based API): the session as one JSON ValueState."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.stored = handle.getValueState("session", STATE_DDL)

    def handleInputRows(  # noqa: N802 (PySpark's names)
        self,
        key: Any,
        rows: Iterator[pd.DataFrame] | Iterator[Row],  # Rows: transformWithState's
        timerValues: TimerValues,  # noqa: N803
    ) -> Iterator[Row]:
        session = key[0].decode() if isinstance(key[0], bytes | bytearray) else str(key[0])
        in_rows = cast(Iterator[Row], rows)
        current = self.stored.get() if self.stored.exists() else None
        stored: dict[str, Any] = orjson.loads(current[0]) if current else {"seq": -1, "table": None}
        records = sorted(
            ((r["topic"], r["partition"], r["offset"], bytes(r["value"])) for r in in_rows),
            key=lambda record: record[2],
        )
        last_seq, table, out = apply_naively(session, stored["seq"], stored["table"], records)
        self.stored.update((orjson.dumps({"seq": last_seq, "table": table}).decode(),))
        for row in out:
            yield Row(**row)

    def close(self) -> None:
        pass


def update_session_with_engine_code(
    key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    processor = TableProcessor()
    session = key[0].decode() if isinstance(key[0], bytes | bytearray) else str(key[0])
    stored: dict[str, Any] = (
        orjson.loads(state.get[0]) if state.exists else {"seq": -1, "table": None}
    )
    last_seq: int = stored["seq"]
    raw: dict[str, list[Any]] | None = stored["table"]
    table: Table | None = None if raw is None else {k: tuple(v) for k, v in raw.items()}
    frame = pd.concat(list(frames)).sort_values("offset")
    out: dict[str, list[Any]] = {name: [] for name in OUTPUT_DDL_NAMES}
    for topic, partition, offset, value in zip(
        frame["topic"], frame["partition"], frame["offset"], frame["value"], strict=True
    ):
        message = parse_envelope(session, bytes(value))
        if message.seq != last_seq + 1:
            raise ValueError(f"{session}: expected seq {last_seq + 1}, got {message.seq}")
        last_seq = message.seq
        if message.type is MessageType.END:
            table = None
            continue
        table, changes = processor.apply(
            processor.start(message) if table is None else table, message
        )
        rows: list[tuple[str, float | None, str | None, bool]] = [
            (row_id, None, None, True) for row_id in changes.deleted
        ]
        rows += [(row_id, value_, status, False) for row_id, value_, status in changes.rows]
        for row_id, value_, status, deleted in rows:
            out["topic"].append(topic)
            out["partition"].append(partition)
            out["offset"].append(offset)
            out["session"].append(session)
            out["seq"].append(message.seq)
            out["type"].append(message.type.value)
            out["ts_ms"].append(message.ts)
            out["row_id"].append(row_id)
            out["value"].append(value_)
            out["status"].append(status)
            out["deleted"].append(deleted)
    state.update((orjson.dumps({"seq": last_seq, "table": table}).decode(),))
    yield pd.DataFrame(out)


OUTPUT_DDL_NAMES = [part.strip().split(" ")[0] for part in OUTPUT_DDL.split(",")]


PEERS = {"naive": update_session_naively, "engine": update_session_with_engine_code}
TWS = "transform-with-state"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def run_peer(
    archive: str, output: str, checkpoint: str, max_offsets: int, code: str, java_options: str
) -> None:
    """The peer, until it has caught up (available-now).

    ``code``: a key of :data:`PEERS` (``applyInPandasWithState``), or
    :data:`TWS` (``transformWithState`` on the RocksDB state store, as Spark 4
    requires it). ``java_options``: its local JVM's (``""``: Spark's defaults).
    """
    from pyspark.sql.streaming.state import GroupStateTimeout

    from app.sources import backend_options, stream
    from app.spark.session import spark_session

    spark = spark_session("local[2]", java_options)
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    spark.dataSource.register(stream.TablecastSource)
    options = backend_options.common_options("^sensor-.+", max_offsets, None)
    frame = (
        spark.readStream.format(stream.FORMAT)
        .options(**(options | backend_options.archive_options(archive)))
        .load()
    )
    if code == TWS:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        events = frame.groupBy("key").transformWithState(
            NaiveSessionProcessor(), OUTPUT_DDL, "Append", "None"
        )
    else:
        events = frame.groupBy("key").applyInPandasWithState(
            PEERS[code], OUTPUT_DDL, STATE_DDL, "Append", GroupStateTimeout.NoTimeout
        )
    query = (
        events.writeStream.format("parquet")
        .option("path", output)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
