"""CONTRACT.md sections 2 and 3, example by example, checked against rows written by hand.

The Spark tests compare the job with ``verify``, which runs the same engine:
a mistake shared by both would pass there. Here every expectation is written
out by hand from the contract's text, and the messages are run through the
real engine (:func:`app.engine.in_process.run_partitions`: the partition machine
and the table processor, rule 6 settled across partitions as the driver
does). Row order within one message is not part of the contract, so rows are
compared as sorted lists; across messages they follow the offsets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from app.contract.offsets import TopicPartition
from app.contract.table_processor import TableProcessor
from app.engine.in_process import InProcessOutcome, run_partitions
from app.engine.machine import IntegrityMode, RecordColumns, Rules
from app.errors import Rule

TOPIC = "sensor-7"
T0_MS = 1767614400000  # 2026-01-05T12:00:00Z, the envelopes' ts of message 0
T0 = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
KAFKA_MS = 1800000000000  # the records' own Kafka timestamp: never in the output

Record = tuple[int, int, str | None, bytes]  # partition, offset, key, value
Row = tuple[str, int, int, str, int, str, datetime, str, float | None, str | None, bool]


def envelope(session: str, seq: int, kind: str, at: int, **fields: Any) -> bytes:
    """A message as a producer writes it; ``at``: milliseconds after T0."""
    return json.dumps(
        {"session": session, "seq": seq, "type": kind, "ts": T0_MS + at, **fields}
    ).encode()


def r(row_id: str, value: float | None, status: str | None) -> dict[str, Any]:
    return {"id": row_id, "value": value, "status": status}


def out(
    offset: int,
    session: str,
    seq: int,
    kind: str,
    at: int,
    row_id: str,
    value: float | None,
    status: str | None,
    deleted: bool = False,
    partition: int = 0,
) -> Row:
    """One expected output row, column by column as CONTRACT.md section 3 lists them."""
    return (
        TOPIC,
        partition,
        offset,
        session,
        seq,
        kind,
        T0 + timedelta(milliseconds=at),
        row_id,
        value,
        status,
        deleted,
    )


def run(records: list[Record], mode: IntegrityMode = IntegrityMode.STRICT) -> InProcessOutcome:
    partitions = sorted({TopicPartition(TOPIC, p) for p, _, _, _ in records})

    def read(tp: TopicPartition) -> Iterator[RecordColumns]:
        mine = [(o, k, v) for p, o, k, v in records if p == tp.partition]
        yield RecordColumns(
            [None if k is None else k.encode() for _, k, _ in mine],
            [v for _, _, v in mine],
            [o for o, _, _ in mine],
            [KAFKA_MS + o for o, _, _ in mine],
        )

    return run_partitions(partitions, read, TableProcessor(), Rules(mode))


def rows(outcome: InProcessOutcome) -> list[Row]:
    table = outcome.rows()
    found = [cast(Row, tuple(d.values())) for d in table.to_pylist()]
    offsets = [(row[1], row[2]) for row in found]
    assert offsets == sorted(offsets), "rows follow their messages' offsets"
    return sorted(found)


def violations(outcome: InProcessOutcome) -> list[tuple[int, int, str, Rule]]:
    return [(v.partition, v.offset, v.session, v.rule) for v in outcome.violations]


def quarantined(outcome: InProcessOutcome) -> list[tuple[int, str, str]]:
    """(offset, session, the reason's rule) of each record set aside in resync mode."""
    return [(q.offset, q.session, q.reason.split(":")[0]) for q in outcome.quarantined]


# -- Section 3: what each message produces ------------------------------------------------


def test_a_snapshot_produces_one_row_per_table_row() -> None:
    outcome = run(
        [
            (
                0,
                0,
                "s1",
                envelope(
                    "s1",
                    0,
                    "snapshot",
                    0,
                    rows=[
                        r("a", 1.5, "ok"),
                        r("b", None, "warming"),
                        r("c", 2, None),
                    ],
                ),
            ),
        ]
    )
    assert violations(outcome) == []
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.5, "ok"),
        out(0, "s1", 0, "snapshot", 0, "b", None, "warming"),
        out(0, "s1", 0, "snapshot", 0, "c", 2.0, None),  # a JSON integer is a float64
    ]


def test_a_snapshot_deletes_the_rows_the_table_held_that_it_lacks() -> None:
    outcome = run(
        [
            (
                0,
                0,
                "s1",
                envelope(
                    "s1",
                    0,
                    "snapshot",
                    0,
                    rows=[
                        r("a", 1, "ok"),
                        r("b", 2, "ok"),
                        r("c", 3, "ok"),
                    ],
                ),
            ),
            (
                0,
                1,
                "s1",
                envelope("s1", 1, "snapshot", 10, rows=[r("b", 20, "hot"), r("d", 4, "ok")]),
            ),
            # Nothing changed: the snapshot still produces every row of the table, deletes none.
            (
                0,
                2,
                "s1",
                envelope("s1", 2, "snapshot", 20, rows=[r("b", 20, "hot"), r("d", 4, "ok")]),
            ),
        ]
    )
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "b", 2.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "c", 3.0, "ok"),
        out(1, "s1", 1, "snapshot", 10, "a", None, None, deleted=True),
        out(1, "s1", 1, "snapshot", 10, "b", 20.0, "hot"),
        out(1, "s1", 1, "snapshot", 10, "c", None, None, deleted=True),
        out(1, "s1", 1, "snapshot", 10, "d", 4.0, "ok"),
        out(2, "s1", 2, "snapshot", 20, "b", 20.0, "hot"),
        out(2, "s1", 2, "snapshot", 20, "d", 4.0, "ok"),
    ]


def test_an_empty_snapshot_deletes_every_row() -> None:
    outcome = run(
        [
            (0, 0, "s1", envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok"), r("b", 2, None)])),
            (0, 1, "s1", envelope("s1", 1, "snapshot", 5, rows=[])),
            (0, 2, "s1", envelope("s1", 2, "update", 6, rows=[r("a", 9, "back")])),
        ]
    )
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "b", 2.0, None),
        out(1, "s1", 1, "snapshot", 5, "a", None, None, deleted=True),
        out(1, "s1", 1, "snapshot", 5, "b", None, None, deleted=True),
        out(2, "s1", 2, "update", 6, "a", 9.0, "back"),
    ]


def test_an_update_produces_its_inserted_replaced_and_deleted_rows() -> None:
    outcome = run(
        [
            (
                0,
                0,
                "s1",
                envelope(
                    "s1",
                    0,
                    "snapshot",
                    0,
                    rows=[
                        r("a", 1, "ok"),
                        r("b", 2, "ok"),
                        r("c", 3, "ok"),
                    ],
                ),
            ),
            # a replaced whole (its status becomes null, not kept), d inserted, b deleted.
            (
                0,
                1,
                "s1",
                envelope(
                    "s1", 1, "update", 1, rows=[r("a", 10, None), r("d", 4, "new")], deleted=["b"]
                ),
            ),
            # Only deletions; "deleted" is optional and "rows" may be empty.
            (0, 2, "s1", envelope("s1", 2, "update", 2, rows=[], deleted=["c", "d"])),
            (0, 3, "s1", envelope("s1", 3, "update", 3, rows=[r("b", 5, "again")])),
            (0, 4, "s1", envelope("s1", 4, "update", 4, rows=[])),  # no change: no row
            # The table now holds a and b: a resync snapshot with only b deletes a.
            (0, 5, "s1", envelope("s1", 5, "snapshot", 5, rows=[r("b", 5, "again")])),
        ]
    )
    assert violations(outcome) == []
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "b", 2.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "c", 3.0, "ok"),
        out(1, "s1", 1, "update", 1, "a", 10.0, None),
        out(1, "s1", 1, "update", 1, "b", None, None, deleted=True),
        out(1, "s1", 1, "update", 1, "d", 4.0, "new"),
        out(2, "s1", 2, "update", 2, "c", None, None, deleted=True),
        out(2, "s1", 2, "update", 2, "d", None, None, deleted=True),
        out(3, "s1", 3, "update", 3, "b", 5.0, "again"),
        out(5, "s1", 5, "snapshot", 5, "a", None, None, deleted=True),
        out(5, "s1", 5, "snapshot", 5, "b", 5.0, "again"),
    ]


def test_end_produces_no_rows_and_drops_the_sessions_state() -> None:
    outcome = run(
        [
            (0, 0, "s1", envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok")])),
            (0, 1, "s1", envelope("s1", 1, "end", 1)),
            (0, 2, "s2", envelope("s2", 0, "snapshot", 2, rows=[r("a", 7, "ok")])),
            (0, 3, "s2", envelope("s2", 1, "end", 3, rows=[])),  # "rows" absent or empty
        ]
    )
    assert violations(outcome) == []
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(2, "s2", 0, "snapshot", 2, "a", 7.0, "ok"),
    ]
    # Dropped: no table is kept for either session (only that they ended, for rule 5).
    state = outcome.states[TopicPartition(TOPIC, 0)]
    assert all(s.user is None and s.closed for s in state.sessions.values())


def test_every_row_names_its_message_and_the_producers_ts() -> None:
    # Keys other than the contract's are ignored, in the envelope and in rows.
    value = json.dumps(
        {
            "session": "s9",
            "seq": 0,
            "type": "snapshot",
            "ts": T0_MS + 42,
            "source": "x",
            "rows": [{"id": "a", "value": -0.5, "status": "ok", "unit": "C"}],
        }
    ).encode()
    outcome = run([(3, 1234, "s9", value)])
    assert rows(outcome) == [
        (
            TOPIC,
            3,
            1234,
            "s9",
            0,
            "snapshot",
            datetime(2026, 1, 5, 12, 0, 0, 42000, tzinfo=UTC),
            "a",
            -0.5,
            "ok",
            False,
        )
    ]
    assert outcome.rows().schema.field("ts").type.tz == "UTC"


def test_sessions_of_a_partition_are_rebuilt_each_on_its_own() -> None:
    outcome = run(
        [
            (0, 0, "s1", envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok")])),
            (0, 1, "s2", envelope("s2", 0, "snapshot", 1, rows=[r("a", 100, "ok")])),
            (0, 2, "s1", envelope("s1", 1, "update", 2, rows=[], deleted=["a"])),
            (0, 3, "s2", envelope("s2", 1, "snapshot", 3, rows=[r("b", 200, "ok")])),
            (0, 4, "s1", envelope("s1", 2, "update", 4, rows=[r("b", 2, "ok")])),
        ]
    )
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(1, "s2", 0, "snapshot", 1, "a", 100.0, "ok"),
        out(2, "s1", 1, "update", 2, "a", None, None, deleted=True),
        out(3, "s2", 1, "snapshot", 3, "a", None, None, deleted=True),
        out(3, "s2", 1, "snapshot", 3, "b", 200.0, "ok"),
        out(4, "s1", 2, "update", 4, "b", 2.0, "ok"),
    ]


# -- Section 2: integrity ------------------------------------------------------------------

SNAP_A = envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok")])


# Rules 1 and 2 in strict mode (an update or a snapshot with seq > 0 first; a gap, a
# repeat, a reordering) are tests/engine/test_machine.py's; the examples here add to them.


def test_rule_1_an_end_cannot_open_a_session() -> None:
    outcome = run([(0, 5, "s1", envelope("s1", 0, "end", 0))])
    assert violations(outcome) == [(0, 5, "s1", Rule.FIRST_MESSAGE)]
    assert rows(outcome) == []


def test_rule_2_in_resync_mode_the_session_waits_for_a_snapshot() -> None:
    outcome = run(
        [
            (0, 0, "s1", envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok"), r("b", 2, "ok")])),
            (0, 1, "s1", envelope("s1", 1, "update", 1, rows=[r("a", 10, "ok")])),
            (0, 2, "s1", envelope("s1", 3, "update", 2, rows=[r("a", 30, "ok")])),  # gap
            (0, 3, "s1", envelope("s1", 4, "update", 3, rows=[r("a", 40, "ok")])),  # still waiting
            (0, 4, "s2", envelope("s2", 0, "snapshot", 4, rows=[r("z", 0, "ok")])),  # not affected
            (
                0,
                5,
                "s1",
                envelope("s1", 5, "snapshot", 5, rows=[r("b", 50, "ok")]),
            ),  # re-established
            (0, 6, "s1", envelope("s1", 6, "update", 6, rows=[r("c", 60, "ok")])),
        ],
        IntegrityMode.RESYNC,
    )
    assert quarantined(outcome) == [(2, "s1", "rule 2"), (3, "s1", "awaiting a snapshot")]
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "b", 2.0, "ok"),
        out(1, "s1", 1, "update", 1, "a", 10.0, "ok"),
        out(4, "s2", 0, "snapshot", 4, "z", 0.0, "ok"),
        # The snapshot deletes what the table held before the gap and it lacks.
        out(5, "s1", 5, "snapshot", 5, "a", None, None, deleted=True),
        out(5, "s1", 5, "snapshot", 5, "b", 50.0, "ok"),
        out(6, "s1", 6, "update", 6, "c", 60.0, "ok"),
    ]


def test_rule_3_a_snapshot_with_seq_above_0_replaces_the_whole_table() -> None:
    outcome = run(
        [
            (0, 0, "s1", envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok"), r("b", 2, "ok")])),
            (0, 1, "s1", envelope("s1", 1, "update", 1, rows=[r("c", 3, "ok")])),
            (0, 2, "s1", envelope("s1", 2, "snapshot", 2, rows=[r("d", 4, "ok")])),
            (0, 3, "s1", envelope("s1", 3, "update", 3, rows=[], deleted=["d"])),
        ]
    )
    assert violations(outcome) == []
    assert rows(outcome) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "b", 2.0, "ok"),
        out(1, "s1", 1, "update", 1, "c", 3.0, "ok"),
        out(2, "s1", 2, "snapshot", 2, "a", None, None, deleted=True),
        out(2, "s1", 2, "snapshot", 2, "b", None, None, deleted=True),
        out(2, "s1", 2, "snapshot", 2, "c", None, None, deleted=True),
        out(2, "s1", 2, "snapshot", 2, "d", 4.0, "ok"),
        out(3, "s1", 3, "update", 3, "d", None, None, deleted=True),
    ]


def test_rule_4_an_update_may_not_delete_a_row_not_in_the_table() -> None:
    records: list[Record] = [
        (0, 0, "s1", envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok"), r("b", 2, "ok")])),
        (0, 1, "s1", envelope("s1", 1, "update", 1, rows=[r("c", 3, "ok")], deleted=["b", "x"])),
        (0, 2, "s1", envelope("s1", 2, "snapshot", 2, rows=[r("a", 1, "ok")])),
    ]
    assert violations(run(records)) == [(0, 1, "s1", Rule.DELETE_UNKNOWN_ROW)]
    resync = run(records, IntegrityMode.RESYNC)
    assert quarantined(resync) == [(1, "s1", "rule 4")]
    # The violating update changed nothing: b is still there (and c never was) when
    # the snapshot re-establishes the session.
    assert rows(resync) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(0, "s1", 0, "snapshot", 0, "b", 2.0, "ok"),
        out(2, "s1", 2, "snapshot", 2, "a", 1.0, "ok"),
        out(2, "s1", 2, "snapshot", 2, "b", None, None, deleted=True),
    ]


@pytest.mark.parametrize(
    "later",
    [
        envelope("s1", 2, "update", 2, rows=[r("a", 2, "ok")]),
        envelope("s1", 2, "snapshot", 2, rows=[r("a", 2, "ok")]),
        envelope("s1", 0, "snapshot", 2, rows=[r("a", 2, "ok")]),
        envelope("s1", 2, "end", 2),
    ],
    ids=["update", "snapshot", "snapshot-seq-0", "end"],
)
def test_rule_5_after_end_any_message_violates(later: bytes) -> None:
    outcome = run(
        [(0, 0, "s1", SNAP_A), (0, 1, "s1", envelope("s1", 1, "end", 1)), (0, 2, "s1", later)]
    )
    assert violations(outcome) == [(0, 2, "s1", Rule.AFTER_END)]


def test_rule_6_a_session_stays_in_one_topic_partition() -> None:
    records: list[Record] = [
        (0, 0, "s1", envelope("s1", 0, "snapshot", 0, rows=[r("a", 1, "ok")])),
        (0, 1, "s1", envelope("s1", 1, "update", 1, rows=[r("a", 2, "ok")])),
        (1, 0, "s2", envelope("s2", 0, "snapshot", 2, rows=[r("q", 0, "ok")])),
        (1, 1, "s1", envelope("s1", 2, "update", 3, rows=[r("a", 3, "ok")])),
        (1, 2, "s1", envelope("s1", 3, "snapshot", 4, rows=[r("a", 4, "ok")])),
    ]
    assert violations(run(records)) == [(1, 1, "s1", Rule.ONE_PARTITION)]
    resync = run(records, IntegrityMode.RESYNC)
    assert quarantined(resync) == [(1, "s1", "rule 6"), (2, "s1", "rule 6")]
    assert rows(resync) == [
        out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok"),
        out(1, "s1", 1, "update", 1, "a", 2.0, "ok"),
        out(0, "s2", 0, "snapshot", 2, "q", 0.0, "ok", partition=1),
    ]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("s1", b'{"session": "s1", "seq": 1, "type": "update", "ts": '),
        ("s1", b'["s1", 1, "update"]'),
        ("s1", json.dumps({"session": "s1", "seq": 1, "type": "update", "rows": []}).encode()),
        ("s1", envelope("s1", 1, "update", 1, rows=[{"id": "a", "value": "1", "status": "ok"}])),
        ("s1", envelope("s1", 1, "update", 1, rows=[{"value": 1, "status": "ok"}])),
        ("s1", envelope("s1", 1, "update", 1, rows=[r("a", 1, "ok")], deleted="a")),
        ("s1", envelope("s1", 1, "delta", 1, rows=[])),
        ("s1", envelope("s1", "1", "update", 1, rows=[])),  # type: ignore[arg-type]
        ("s1", envelope("s2", 1, "update", 1, rows=[])),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "no-ts",
        "value-a-string",
        "row-lacks-its-key",
        "deleted-not-an-array",
        "unknown-type",
        "seq-a-string",
        "session-differs-from-key",
    ],
)
def test_rule_7_a_value_that_breaks_the_envelope_violates(key: str, value: bytes) -> None:
    outcome = run([(0, 0, "s1", SNAP_A), (0, 1, key, value)])
    assert violations(outcome) == [(0, 1, "s1", Rule.ENVELOPE)]
    resync = run([(0, 0, "s1", SNAP_A), (0, 1, key, value)], IntegrityMode.RESYNC)
    assert quarantined(resync) == [(1, "s1", "rule 7")]
    assert rows(resync) == [out(0, "s1", 0, "snapshot", 0, "a", 1.0, "ok")]


def test_strict_reports_the_first_violation_of_a_partition() -> None:
    outcome = run(
        [
            (0, 0, "s1", SNAP_A),
            (0, 1, "s1", envelope("s1", 5, "update", 1, rows=[])),  # rule 2
            (0, 2, "s2", envelope("s2", 0, "update", 2, rows=[])),  # rule 1, never reached
        ]
    )
    assert violations(outcome) == [(0, 1, "s1", Rule.SEQUENCE)]
