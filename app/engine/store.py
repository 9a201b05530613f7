"""Versioned per-partition state, kept beside Spark's checkpoint.

``<checkpoint>/tablecast/state/<topic>/<partition>/<offset>.state`` holds a
topic-partition's :class:`~app.engine.state.PartitionState` after every
record before ``offset`` (20 digits, zero-padded). A task of a micro-batch
loads the version at its range's start and saves the version at its end;
a redone batch or a retried task loads the same version and saves an
identical file. Versions are written whole (write, then rename; on S3 one
upload), so a reader sees a version completely or not at all.

A file is ``MAGIC``, the payload (an Arrow IPC stream of the sessions, one
row each, with the partition's facts in the schema metadata) and the
payload's SHA-256: a torn or altered file is refused with its name, never
read as a shorter state.

The driver decides which version each task loads and removes old versions
once newer ones are published (:meth:`StateStore.collect_garbage`). A
Python worker keeps the last version of the partitions it processed in
memory (:class:`StateCache`), so a partition whose next task lands on the
same worker is not reloaded.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyarrow import ipc

from app.contract.offsets import TopicPartition, parse_key
from app.contract.processor import Processor
from app.engine.state import PartitionState, SessionState
from app.errors import StateError
from app.storage import Location, resolve

STATE_DIR = posixpath.join("tablecast", "state")
MAGIC = b"TABLECAST-STATE-1\n"
_DIGEST = 32
_NAME = re.compile(r"^(\d{20})\.state$")

_SCHEMA = pa.schema(
    [
        pa.field("session", pa.string(), nullable=False),
        pa.field("last_seq", pa.int64(), nullable=False),
        pa.field("last_offset", pa.int64(), nullable=False),
        pa.field("last_ts", pa.int64(), nullable=False),
        pa.field("seen_ms", pa.int64(), nullable=False),
        pa.field("closed", pa.bool_(), nullable=False),
        pa.field("quarantine", pa.string()),
        pa.field("owner", pa.string()),  # "topic:partition" of the owning partition
        pa.field("user", pa.binary()),  # Processor.encode of the session's state
    ]
)


def state_root(checkpoint_uri: str) -> str:
    """Where a checkpoint's partition states live."""
    return posixpath.join(checkpoint_uri.rstrip("/"), STATE_DIR)


def encode(state: PartitionState[Any], processor: Processor[Any]) -> bytes:
    """A state as the bytes of one file (magic, payload, checksum)."""
    sessions = list(state.sessions.values())
    encode_user = processor.encode
    table = pa.table(
        [
            pa.array([s.session for s in sessions], pa.string()),
            pa.array([s.last_seq for s in sessions], pa.int64()),
            pa.array([s.last_offset for s in sessions], pa.int64()),
            pa.array([s.last_ts for s in sessions], pa.int64()),
            pa.array([s.seen_ms for s in sessions], pa.int64()),
            pa.array([s.closed for s in sessions], pa.bool_()),
            pa.array([s.quarantine for s in sessions], pa.string()),
            pa.array([None if s.owner is None else s.owner.key() for s in sessions], pa.string()),
            pa.array(
                [None if s.user is None else encode_user(s.user) for s in sessions], pa.binary()
            ),
        ],
        schema=_SCHEMA.with_metadata(
            {
                "topic": state.tp.topic,
                "partition": str(state.tp.partition),
                "offset": str(state.offset),
                "clock_ms": str(state.clock_ms),
            }
        ),
    )
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    payload: bytes = sink.getvalue().to_pybytes()
    return MAGIC + payload + hashlib.sha256(payload).digest()


def _payload(data: bytes, where: str) -> bytes:
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _DIGEST:
        raise StateError(f"state file {where} is not a tablecast state file (or is truncated)")
    payload, digest = data[len(MAGIC) : -_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(payload).digest() != digest:
        raise StateError(f"state file {where} fails its checksum: it is damaged")
    return payload


def _table(data: bytes, where: str) -> pa.Table:
    return ipc.open_stream(pa.BufferReader(_payload(data, where))).read_all()


def decode(data: bytes, processor: Processor[Any], where: str) -> PartitionState[Any]:
    """The state a file holds; :class:`StateError` naming ``where`` if it is damaged."""
    table = _table(data, where)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    tp = TopicPartition(meta["topic"], int(meta["partition"]))
    state: PartitionState[Any] = PartitionState(tp, int(meta["offset"]), int(meta["clock_ms"]))
    decode_user = processor.decode
    columns = [table.column(name).to_pylist() for name in _SCHEMA.names]
    for session, seq, offset, ts, seen, closed, quarantine, owner, user in zip(
        *columns, strict=True
    ):
        state.sessions[session] = SessionState(
            session, seq, offset, ts, seen, closed, quarantine,
            None if owner is None else parse_key(owner),
            None if user is None else decode_user(user),
        )  # fmt: skip
    return state


def owned_sessions(data: bytes, where: str) -> tuple[int, list[str]]:
    """How many sessions a state file holds, and those its partition owns (rule 6).

    Read without decoding the sessions' tables.
    """
    table = _table(data, where).select(["session", "last_seq", "owner"])
    owned = [
        session
        for session, seq, owner in zip(
            *(table.column(i).to_pylist() for i in range(3)), strict=True
        )
        if owner is None and seq >= 0
    ]
    return len(table), owned


def version_name(offset: int) -> str:
    return f"{offset:020d}.state"


class StateStore:
    """The partition states under one root (a local path, ``hdfs://`` or ``s3://``)."""

    def __init__(self, root_uri: str) -> None:
        self.root_uri = root_uri.rstrip("/")
        self._location: Location | None = None

    @property
    def location(self) -> Location:
        if self._location is None:  # resolved where it is used: a task or the driver
            self._location = resolve(self.root_uri)
        return self._location

    def __getstate__(self) -> dict[str, Any]:
        return {"root_uri": self.root_uri, "_location": None}

    def path(self, tp: TopicPartition, offset: int) -> str:
        return self.location.child(tp.topic, str(tp.partition), version_name(offset))

    def uri(self, tp: TopicPartition, offset: int) -> str:
        return posixpath.join(self.root_uri, tp.topic, str(tp.partition), version_name(offset))

    def partitions(self) -> list[TopicPartition]:
        """Every topic-partition that has a state directory."""
        location = self.location
        found: list[TopicPartition] = []
        for topic in location.list_dir(location.path):
            if topic.type != pafs.FileType.Directory:
                continue
            for part in location.list_dir(topic.path):
                if part.type == pafs.FileType.Directory and part.base_name.isdigit():
                    found.append(TopicPartition(topic.base_name, int(part.base_name)))
        return sorted(found)

    def versions(self, tp: TopicPartition) -> list[int]:
        """The versions of ``tp`` present, ascending."""
        location = self.location
        directory = location.child(tp.topic, str(tp.partition))
        names = (info.base_name for info in location.list_dir(directory))
        return sorted(int(m.group(1)) for m in map(_NAME.match, names) if m is not None)

    def read(self, tp: TopicPartition, offset: int) -> bytes:
        path = self.path(tp, offset)
        try:
            return self.location.read_bytes(path)
        except FileNotFoundError:
            raise StateError(
                f"state file {self.uri(tp, offset)} is missing: the checkpoint's state was "
                "removed or damaged"
            ) from None

    def load(
        self, tp: TopicPartition, offset: int, processor: Processor[Any]
    ) -> PartitionState[Any]:
        return decode(self.read(tp, offset), processor, self.uri(tp, offset))

    def save(self, state: PartitionState[Any], processor: Processor[Any]) -> int:
        """Write ``state`` as its version, whole; returns its size in bytes."""
        data = encode(state, processor)
        self.location.write_bytes_atomic(self.path(state.tp, state.offset), data)
        return len(data)

    def collect_garbage(self, tp: TopicPartition, keep: int, needed: int) -> list[int]:
        """Remove versions of ``tp`` older than the ``keep`` newest, never ``needed`` or later."""
        versions = self.versions(tp)
        removable = [v for v in versions[:-keep] if v < needed] if keep > 0 else []
        for offset in removable:
            self.location.delete_file(self.path(tp, offset))
        return removable


class StateCache:
    """The last state of a few partitions, kept in a Python worker between tasks.

    A state is handed out only for the exact version it is at, and taken out
    of the cache while a task works on it: a task that fails leaves nothing
    half-applied behind.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._states: OrderedDict[tuple[str, TopicPartition], PartitionState[Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def take(self, root: str, tp: TopicPartition, offset: int) -> PartitionState[Any] | None:
        with self._lock:
            state = self._states.pop((root, tp), None)
            if state is not None and state.offset == offset:
                self.hits += 1
                return state
            self.misses += 1
            return None

    def put(self, root: str, state: PartitionState[Any]) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._states[(root, state.tp)] = state
            self._states.move_to_end((root, state.tp))
            while len(self._states) > self.capacity:
                self._states.popitem(last=False)

    def __iter__(self) -> Iterator[tuple[str, TopicPartition]]:
        return iter(list(self._states))
