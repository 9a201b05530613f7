"""Partition states: the file format, its checksum, versions, garbage, the worker cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.contract.offsets import TopicPartition
from app.contract.table_processor import Table, TableProcessor
from app.engine.state import PartitionState, SessionState, StateVersion
from app.engine.store import MAGIC, StateCache, StateStore, decode, encode, owned_sessions
from app.errors import StateError

TP = TopicPartition("sensor-1", 3)
OTHER = TopicPartition("sensor-1", 0)
PROCESSOR = TableProcessor()


def a_state(offset: int = 120) -> PartitionState[Table]:
    state: PartitionState[Table] = PartitionState(TP, offset, clock_ms=9_000)
    table = {"r1": ("r1", 1.5, "ok"), "r2": ("r2", None, None)}
    state.sessions = {
        "open": SessionState("open", 4, 110, 8_000, 8_500, user=table),
        "closed": SessionState("closed", 9, 100, 7_000, 7_000, closed=True),
        "waiting": SessionState("waiting", -1, 111, 8_100, 8_100, quarantine="rule 2: seq 5"),
        "foreign": SessionState("foreign", -1, 112, 8_200, 8_200, quarantine="rule 6", owner=OTHER),
    }
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


def test_versions_are_saved_whole_named_by_offset_and_digest(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    saved = [store.save(a_state(offset), PROCESSOR) for offset in (100, 200, 300)]
    assert all(size > len(MAGIC) for _, size in saved)
    versions = [v for v, _ in saved]
    assert store.partitions() == [TP]
    assert store.versions(TP) == versions
    assert [v.offset for v in versions] == [100, 200, 300] and len(versions[0].digest) == 64
    assert not [p for p in (tmp_path / "state").rglob("*") if p.name.startswith(".")]
    assert store.load(TP, versions[1], PROCESSOR) == a_state(200)
    name = tmp_path / "state" / "sensor-1" / "3" / f"{200:020d}-{versions[1].digest}.state"
    assert name.is_file()


def test_another_attempt_at_the_same_offset_never_replaces_the_recorded_version(
    tmp_path: Path,
) -> None:
    store = StateStore(str(tmp_path / "state"))
    recorded, _ = store.save(a_state(200), PROCESSOR)
    other = a_state(200)
    del other.sessions["open"]  # an earlier resync pass, or a zombie task, computed otherwise
    stale, _ = store.save(other, PROCESSOR)
    assert stale.offset == recorded.offset and stale.digest != recorded.digest
    assert store.versions(TP) == sorted([recorded, stale])
    assert store.load(TP, recorded, PROCESSOR) == a_state(200)


def test_a_missing_or_damaged_version_is_a_state_error_naming_it(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    version, _ = store.save(a_state(200), PROCESSOR)
    path = tmp_path / "state" / "sensor-1" / "3" / f"{200:020d}-{version.digest}.state"
    swapped = StateVersion(200, "0" * 64)  # a file with other content under the recorded name
    path.rename(path.with_name(f"{200:020d}-{swapped.digest}.state"))
    with pytest.raises(StateError, match=r"sensor-1:3 version 200 .* is damaged") as damaged:
        store.read(TP, swapped)
    assert damaged.value.facts["version"] == 200 and damaged.value.facts["partition"] == 3
    with pytest.raises(StateError, match=r"sensor-1:3 version 200 .* is missing") as missing:
        store.read(TP, version)
    assert missing.value.facts["path"] == str(path) and missing.value.exit_code == 6


def test_garbage_collection_keeps_exactly_the_published_versions(tmp_path: Path) -> None:
    store = StateStore(str(tmp_path / "state"))
    published = [store.save(a_state(offset), PROCESSOR)[0] for offset in (100, 200, 300)]
    unpublished_newer, _ = store.save(a_state(400), PROCESSOR)  # a batch that never published
    unpublished_same = store.save(PartitionState(TP, 300), PROCESSOR)[0]  # a losing pass
    removed = store.collect_garbage(TP, keep=published[1:])
    assert sorted(removed) == sorted([published[0], unpublished_same])
    # Past the newest published version only a writer that took the output over saves:
    # left until the partition's published versions pass it.
    assert store.versions(TP) == [*published[1:], unpublished_newer]
    later, _ = store.save(a_state(500), PROCESSOR)
    assert store.collect_garbage(TP, keep=[published[2], later]) == [
        published[1],
        unpublished_newer,
    ]


def test_the_cache_hands_out_only_the_exact_version_and_only_once() -> None:
    cache = StateCache(capacity=2)
    version = StateVersion(200, "a" * 64)
    cache.put("root", version, a_state(200))
    assert cache.take("root", TP, StateVersion(100, "a" * 64)) is None  # another offset
    assert cache.take("root", TP, version) is None  # ... and a miss takes it out
    cache.put("root", version, a_state(200))
    assert cache.take("root", TP, StateVersion(200, "b" * 64)) is None  # same offset, other pass
    cache.put("root", version, a_state(200))
    assert cache.take("root", TP, version) == a_state(200)
    assert cache.take("root", TP, version) is None  # a task owns it now
    for partition in range(3):
        cache.put("root", version, PartitionState(TopicPartition("t", partition), 1))
    assert [tp.partition for _, tp in cache] == [1, 2]  # the least recent went first
    assert (cache.hits, cache.misses) == (1, 4)
