"""The built-in processor's rows kept in the compiled decoder's store (row spans).

With the compiled decoder built, the engine runs the built-in processor on
:class:`~app.contract.envelope.RowSpan` s: a message's rows stay in the store's
Arrow buffers, the session tables hold their places until the run ends, and the
output takes them by index. It may only be a faster way to the same run: the same
output rows, violations and saved states as the tuples of the parser's msgspec
path give, slice by slice, with output staged between slices.
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.contract.envelope import EnvelopeParser, RowSpan, native_decoder_built
from app.contract.offsets import TopicPartition
from app.contract.schema import TableSchema, parse_schema
from app.contract.table_processor import TableProcessor
from app.engine.machine import (
    IntegrityMode,
    PartitionMachine,
    PartitionResult,
    RecordColumns,
    Rules,
)
from app.engine.output import RowColumns
from app.engine.state import PartitionState
from app.errors import EnvelopeError
from app.tools import generate as gen
from tests.generated_schemas import capture, schemas

pytestmark = pytest.mark.skipif(
    not native_decoder_built(), reason="the compiled decoder is not built (make setup)"
)

SCHEMA = parse_schema(
    """
    [key]
    columns = ["site", "id"]
    [columns]
    site  = "string"
    id    = "int64"
    at    = { type = "timestamp", nullable = true }
    price = { type = "decimal(6,2)", nullable = true }
    name  = { type = "string", nullable = true }
    """,
    "spans.toml",
)
TP = TopicPartition("t", 0)
EAST = "2026-01-01T10:00:00+02:00"  # kept in its offset, in the store as in a tuple


def _run(
    schema: TableSchema,
    messages: list[tuple[str, bytes]],
    mode: IntegrityMode,
    slice_size: int,
    spans: bool,
) -> tuple[pa.Table, list[str], dict[str, bytes]]:
    """A partition's run a slice at a time, its output staged every other slice: the
    output, the violations and each session's saved state. ``spans``: with the compiled
    decoder's store (else the msgspec path's tuples)."""
    processor = TableProcessor(schema)
    machine = PartitionMachine(processor, Rules(mode))
    if not spans:
        machine.parse = EnvelopeParser(schema, native=False)
    state: PartitionState[Any] = PartitionState.empty(TP, 0)
    result = PartitionResult(RowColumns(TP, schema, processor.name))
    tables: list[pa.Table] = []
    violations: list[str] = []
    for n, lo in enumerate(range(0, len(messages), slice_size)):
        part = messages[lo : lo + slice_size]
        records = RecordColumns(
            [session.encode() for session, _ in part],
            [value for _, value in part],
            list(range(lo, lo + len(part))),
            [1_000] * len(part),
        )
        machine.run(state, records, result)
        assert (result.rows.store is not None) == spans
        for session in state.sessions.values():  # no place outlives a run
            assert all(type(row) is tuple for row in (session.user or {}).values())
        if n % 2:
            tables.append(result.rows.to_table())
            result.rows = result.rows.emptied()
        if result.violations and mode is IntegrityMode.STRICT:
            break
    tables.append(result.rows.to_table())
    violations = [v.describe() for v in result.violations]
    saved = {
        name: processor.encode_state(session.user)
        for name, session in state.sessions.items()
        if session.user is not None
    }
    return pa.concat_tables(tables), violations, saved


def _same_run(
    schema: TableSchema, messages: list[tuple[str, bytes]], mode: IntegrityMode, size: int
) -> pa.Table:
    with_spans = _run(schema, messages, mode, size, spans=True)
    with_tuples = _run(schema, messages, mode, size, spans=False)
    assert with_spans[0].equals(with_tuples[0])
    assert with_spans[1:] == with_tuples[1:]
    return with_spans[0]


@settings(max_examples=60, deadline=None)
@given(
    schemas(),
    st.integers(0, 2**16),
    st.sampled_from([0, 3]),
    st.sampled_from([IntegrityMode.STRICT, IntegrityMode.RESYNC]),
    st.sampled_from([1, 5, 10_000]),
)
def test_generated_captures_run_on_spans_as_on_tuples(
    schema: TableSchema, seed: int, resync: int, mode: IntegrityMode, size: int
) -> None:
    """Every partition of a generated capture (faults, deletes, resyncs, edge values):
    the same output, violations and saved states with and without the store."""
    generated: gen.Capture = capture(schema, seed, resync)
    for messages in generated.partitions.values():
        _same_run(schema, [(m.session, m.value) for m in messages], mode, size)


def _message(seq: int, kind: str = "update", **fields: Any) -> tuple[str, bytes]:
    body = {"session": "s1", "seq": seq, "type": kind, "ts": 5, **fields}
    return "s1", orjson.dumps(body)


def _exponent(message: tuple[str, bytes]) -> tuple[str, bytes]:
    """The message with its decimal "X" written 1e1 (JSON's exponent, which the
    compiled decoder leaves to msgspec's path)."""
    return message[0], message[1].replace(b'"X"', b"1e1")


def _row(id: int, **fields: Any) -> dict[str, Any]:
    return {"site": "a", "id": id, **fields}


def test_rows_the_decoder_leaves_and_deletions_interleave_with_spans_in_order() -> None:
    """A decimal written with an exponent (left to msgspec's path), deletions and a
    snapshot's vanished keys (tuples) between rows held in the store: the output keeps
    every message's rows in their order, as the tuples alone give them."""
    messages = [
        _message(0, "snapshot", rows=[_row(1, price="1.5"), _row(2, at=EAST)]),
        _message(1, rows=[_row(3)], deleted=[{"site": "a", "id": 1}]),
        _exponent(_message(2, rows=[_row(4, price="X")])),  # a number's exponent: left
        _message(3, rows=[_row(5, name="\u00e9")]),
        _message(4, "snapshot", rows=[_row(5, price="-0.00")]),  # a negative zero: left
        _message(5, rows=[_row(6), _row(7)]),
    ]
    for size in (1, 2, 100):
        table = _same_run(SCHEMA, messages, IntegrityMode.STRICT, size)
        assert table.column("id").to_pylist() == [1, 2, 1, 3, 4, 5, 2, 3, 4, 5, 6, 7]
        deleted = [False, False, True, False, False, False, True, True, True, False, False, False]
        assert table.column("deleted").to_pylist() == deleted


def test_a_rejected_message_leaves_the_table_and_output_as_they_were() -> None:
    """A snapshot holding a key twice and a delete of an unknown key (resync): nothing of
    either is output or kept, on spans as on tuples."""
    messages = [
        _message(0, "snapshot", rows=[_row(1)]),
        _message(1, rows=[_row(2)], deleted=[{"site": "a", "id": 9}]),
        _message(2, "snapshot", rows=[_row(3), _row(3)]),
        _message(0, "snapshot", rows=[_row(4)]),
        _message(1, rows=[_row(5)]),
    ]
    table = _same_run(SCHEMA, messages, IntegrityMode.RESYNC, 2)
    assert table.column("id").to_pylist() == [1, 1, 4, 5]


def test_rows_a_rejected_message_left_in_the_store_are_skipped_between_kept_ones() -> None:
    """The store holds a rejected message's rows between two kept messages' rows, with no
    deletion between them: the output's runs of the store go around them."""
    messages = [
        _message(0, "snapshot", rows=[_row(1), _row(2)]),
        _message(1, rows=[_row(3)], deleted=[{"site": "a", "id": 9}]),  # rejected: resync
        _message(0, "snapshot", rows=[_row(1), _row(2)]),  # the same keys: no deletion
        _message(1, rows=[_row(4)]),
    ]
    table = _same_run(SCHEMA, messages, IntegrityMode.RESYNC, 100)
    assert table.column("id").to_pylist() == [1, 2, 1, 2, 4]


def test_a_store_gathers_only_runs_within_its_rows_and_the_others() -> None:
    """Runs past the store's rows or the others', or others whose buffers do not fit, are
    refused before any is read."""
    parser = EnvelopeParser(SCHEMA)
    store = parser.store()
    assert store is not None
    parser.into(store)(*_message(0, "snapshot", rows=[_row(1), _row(2)]))
    assert [n for n, *_ in store.gather([0], [2], None, 0)] == [0, 0, 2, 2, 2]
    with pytest.raises(IndexError, match="outside its rows"):
        store.gather([1], [2], None, 0)
    with pytest.raises(IndexError, match="outside its rows"):
        store.gather([~0], [1], None, 0)  # a run of others where there are none
    room: tuple[int, bytes | None, bytes, bytes | None] = (0, None, b"", b"\0" * 4)
    others = [room] * len(SCHEMA.columns)  # no room for one row
    with pytest.raises(ValueError, match="do not fit"):
        store.gather([~0], [1], others, 1)


def test_a_row_span_reads_as_its_rows() -> None:
    """Anything but the built-in processor that reads a span's rows gets the tuples."""
    parser = EnvelopeParser(SCHEMA)
    store = parser.store()
    assert store is not None
    parse = parser.into(store)
    rows = [_row(1, price="2"), _row(2, at=1_700_000_000_000), _row(3, name="x")]
    envelope = parse(*_message(0, "snapshot", rows=rows))
    span = envelope.rows
    assert isinstance(span, RowSpan)
    tuples = list(parser.parse_full(*_message(0, "snapshot", rows=rows)).rows)
    assert len(span) == 3 and list(span) == tuples
    assert span[0] == tuples[0] and span[-1] == tuples[-1] and span[1:] == tuples[1:]
    assert span.keys == [("a", 1), ("a", 2), ("a", 3)]
    with pytest.raises(IndexError):
        span[3]


def test_a_message_the_store_cannot_take_leaves_nothing_in_it() -> None:
    """A session other than the key, and a row the decoder leaves after rows it took:
    the store is as before, and the parser's other paths answer."""
    parser = EnvelopeParser(SCHEMA)
    store = parser.store()
    assert store is not None
    parse = parser.into(store)
    parse(*_message(0, "snapshot", rows=[_row(1)]))
    assert len(store) == 1
    with pytest.raises(EnvelopeError, match="session"):
        parse("other", _message(1, rows=[_row(2)])[1])
    assert len(store) == 1
    envelope = parse(*_exponent(_message(1, rows=[_row(2), _row(3), _row(4, price="X")])))
    assert not isinstance(envelope.rows, RowSpan) and len(envelope.rows) == 3
    first = parser.parse_full(*_message(0, "snapshot", rows=[_row(1)])).rows[0]
    assert len(store) == 1 and store.row(0) == first
