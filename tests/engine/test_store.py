"""Partition states: the file format, its checksum, versions, garbage, the worker cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.contract.offsets import TopicPartition
from app.contract.processor import Table, TableProcessor
from app.engine.state import PartitionState, SessionState
from app.engine.store import MAGIC, StateCache, StateStore, decode, encode, owned_sessions
from app.errors import StateError

TP = TopicPartition("sensor-1", 3)
OTHER = TopicPartition("sensor-1", 0)
PROCESSOR = TableProcessor()


def a_state(offset: int = 120) -> PartitionState[Table]:
    state: PartitionState[Table] = PartitionState(TP, offset, clock_ms=9_000)
    table = {"r1": (1.5, "ok"), "r2": (None, None)}
    state.sessions = {
        "open": SessionState("open", 4, 110, 8_000, 8_500, user=table),
        "closed": SessionState("closed", 9, 100, 7_000, 7_000, closed=True),
        "waiting": SessionState("waiting", -1, 111, 8_100, 8_100, quarantine="rule 2: seq 5"),
        "foreign": SessionState("foreign", -1, 112, 8_200, 8_200, quarantine="rule 6",
                                owner=OTHER),
    }  # fmt: skip
    return state


def test_a_state_survives_the_file_format_exactly() -> None:
    state = a_state()
    again = decode(encode(state, PROCESSOR), PROCESSOR, "mem")
    assert again == state


def test_a_damaged_or_foreign_file_is_refused_with_its_name() -> None:
    data = bytearray(encode(a_state(), PROCESSOR))
    data[len(MAGIC) + 10] ^= 0xFF
    with pytest.raises(StateError, match=r"state file /x/1\.state fails its checksum"):
        decode(bytes(data), PROCESSOR, "/x/1.state")
    with pytest.raises(StateError, match="not a tablecast state file"):
        decode(b"PAR1 something else", PROCESSOR, "/x/2.state")
    with pytest.raises(StateError, match="truncated"):
        decode(bytes(data[: len(MAGIC) + 5]), PROCESSOR, "/x/3.state")


def test_only_established_sessions_count_as_owned() -> None:
    held, owned = owned_sessions(encode(a_state(), PROCESSOR), "mem")
    assert (held, sorted(owned)) == (4, ["closed", "open"])


def test_versions_are_saved_whole_listed_and_old_ones_removed(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    for offset in (100, 200, 300, 400, 500):
        assert store.save(a_state(offset), PROCESSOR) > len(MAGIC)
    assert store.partitions() == [TP]
    assert store.versions(TP) == [100, 200, 300, 400, 500]
    assert not [p for p in (tmp_path / "state").rglob("*") if p.name.startswith(".")]
    assert store.load(TP, 300, PROCESSOR) == a_state(300)
    # Keep the 2 newest, and never one the next batch needs.
    assert store.collect_garbage(TP, keep=2, needed=300) == [100, 200]
    assert store.versions(TP) == [300, 400, 500]
    with pytest.raises(StateError, match=r"state file .*00000000000000000100\.state is missing"):
        store.load(TP, 100, PROCESSOR)


def test_the_cache_hands_out_only_the_exact_version_and_only_once() -> None:
    cache = StateCache(capacity=2)
    cache.put("root", a_state(200))
    assert cache.take("root", TP, 100) is None  # another version: not this one
    assert cache.take("root", TP, 200) is None  # ... and a miss takes it out
    cache.put("root", a_state(200))
    assert cache.take("root", TP, 200) == a_state(200)
    assert cache.take("root", TP, 200) is None  # a task owns it now
    for partition in range(3):
        cache.put("root", PartitionState(TopicPartition("t", partition), 1))
    assert [tp.partition for _, tp in cache] == [1, 2]  # the least recent went first
    assert (cache.hits, cache.misses) == (1, 3)
