"""Repair's plan refuses, with the facts of what it cannot do, before it changes anything."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pytest

from app.contract.offsets import TopicPartition
from app.errors import DataLossError, OutputStateError
from app.recovery import repair
from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger, LedgerEntry
from app.sources import archive
from app.sources.records import SCHEMA, no_headers
from app.storage import resolve

A0 = TopicPartition("sensor-a", 0)


def _output_ending_at(output: Path, end: int) -> str:
    Ledger(resolve(str(output))).append(LedgerEntry(0, ledger_mod.BATCH, {A0: end}))
    return str(output)


def _archive(root: Path, messages: list[tuple[str, int, str]]) -> str:
    """One file of ``A0`` holding ``(session, seq, type)`` messages from offset 0."""
    n = len(messages)
    values = [orjson.dumps({"session": s, "seq": seq, "type": kind, "ts": 1, "rows": []})
              for s, seq, kind in messages]  # fmt: skip
    table = pa.table({
        "key": [s.encode() for s, _, _ in messages], "value": values, "topic": [A0.topic] * n,
        "partition": [A0.partition] * n, "offset": list(range(n)), "timestamp": [0] * n,
        "timestampType": [0] * n,
    }).append_column("headers", no_headers(n)).cast(SCHEMA)  # fmt: skip
    archive.write_file(resolve(str(root)), A0, 0, n, table)
    return str(root)


def test_a_partition_the_archive_lacks_is_data_loss_naming_it(tmp_path: Path) -> None:
    output = _output_ending_at(tmp_path / "out", 5)
    (tmp_path / "archive").mkdir()
    read = repair.archive_reader(str(tmp_path / "archive"), "^sensor-.+")
    with pytest.raises(DataLossError) as lost:
        repair.plan_repair(output, read)
    assert str(lost.value) == (
        "the archive holds nothing of topic sensor-a partition 0, which the output holds"
    )
    assert lost.value.facts == {"source": "the archive", "topic": "sensor-a", "partition": 0}


def test_a_session_without_a_snapshot_in_reach_refuses_the_repair_with_its_facts(
    tmp_path: Path,
) -> None:
    # Session x's snapshot is gone from the archive: its updates cannot be rebuilt.
    root = _archive(tmp_path / "archive", [("y", 0, "snapshot"), ("x", 4, "update"),
                                           ("x", 5, "update")])  # fmt: skip
    output = _output_ending_at(tmp_path / "out", 3)
    with pytest.raises(OutputStateError) as refused:
        repair.plan_repair(output, repair.archive_reader(root, "^sensor-.+"))
    assert str(refused.value).startswith(
        "cannot repair topic sensor-a partition 0: session 'x' has no snapshot at or before "
        "offset 3 in the source"
    )
    assert refused.value.facts == {"output": output, "topic": "sensor-a", "partition": 0,
                                   "session": "x", "offset": 3}  # fmt: skip
    # Nothing was changed: the ledger still ends where it did.
    head = Ledger(resolve(output)).head()
    assert head is not None and head.end == {A0: 3}
