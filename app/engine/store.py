"""Versioned per-partition state, kept beside Spark's checkpoint.

``<checkpoint>/tablecast/state/<topic>/<partition>/<offset>-<digest>.state``
holds a topic-partition's :class:`~app.engine.state.PartitionState` after
every record before ``offset`` (20 digits, zero-padded); ``digest`` is the
SHA-256 of its payload (:class:`~app.engine.state.StateVersion`). A task of
a micro-batch loads the version the driver names and saves the version at
its range's end; a redone batch or a retried task loads the same version
and saves an identical file under the same name, while an attempt that
computed something else (an earlier resync pass, a zombie) saves under
another name and never replaces the committed one. Versions are written
whole (write, then rename; on S3 one upload), so a reader sees a version
completely or not at all.

A file is ``MAGIC``, the payload (an Arrow IPC stream of the sessions, one
row each, with the partition's facts in the schema metadata) and the
payload's SHA-256: a torn or altered file is refused with its name, never
read as a shorter state. The metadata names the processor whose states it
holds and their ``state_version``: a state of another processor is refused,
one of an earlier version is read through the processor's
:meth:`~app.contract.processor.Processor.migrate` (files without these
facts hold the built-in table processor's, version 1).

The driver decides which version each task loads (the one the ledger
records) and removes the versions it no longer needs
(:meth:`StateStore.collect_garbage`). A Python worker keeps the last
version of the partitions it processed in memory (:class:`StateCache`),
handed out only for the exact version (offset and digest) a task asks for.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
from pyarrow import ipc

from app.contract.offsets import TopicPartition, parse_key
from app.contract.processor import Processor, overrides
from app.engine.state import PartitionState, SessionState, StateVersion
from app.errors import ProcessorError, StateError, TablecastError, one_line
from app.storage import Location, resolve

STATE_DIR = posixpath.join("tablecast", "state")
MAGIC = b"TABLECAST-STATE-1\n"
_DIGEST = 32
# "<offset>-<digest>.state"; "<offset>.state" from before digests were recorded.
_NAME = re.compile(r"^(\d{20})(?:-([0-9a-f]{64}))?\.state$")

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
        pa.field("user", pa.binary()),  # Processor.encode_state of the session's state
        # Integrity classes ordered and once (SessionState); absent from older files: none.
        pa.field("repeats", pa.int64(), nullable=False),
        pa.field("gaps", pa.int64(), nullable=False),
        pa.field("ahead", pa.list_(pa.int64())),
    ]
)
# What a file without processor facts holds: the built-in table processor's states.
BUILT_IN = "table"


def state_root(checkpoint_uri: str) -> str:
    """Where a checkpoint's partition states live."""
    return posixpath.join(checkpoint_uri.rstrip("/"), STATE_DIR)


def content_digest(data: bytes) -> str:
    """The digest a version is known by: its payload's SHA-256 (the file's last bytes), hex."""
    return data[-_DIGEST:].hex()


def encode(state: PartitionState[Any], processor: Processor[Any]) -> bytes:
    """A state as the bytes of one file (magic, payload, checksum)."""
    sessions = list(state.sessions.values())
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
            pa.array(_user_states(state, processor), pa.binary()),
            pa.array([s.repeats for s in sessions], pa.int64()),
            pa.array([s.gaps for s in sessions], pa.int64()),
            pa.array(
                [None if not s.ahead else sorted(s.ahead) for s in sessions],
                pa.list_(pa.int64()),
            ),
        ],
        schema=_SCHEMA.with_metadata(
            {
                "topic": state.tp.topic,
                "partition": str(state.tp.partition),
                "offset": str(state.offset),
                "clock_ms": str(state.clock_ms),
                "processor": processor.name,
                "state_version": str(processor.state_version),
            }
        ),
    )
    sink = pa.BufferOutputStream()
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    payload: bytes = sink.getvalue().to_pybytes()
    return MAGIC + payload + hashlib.sha256(payload).digest()


def _user_states(state: PartitionState[Any], processor: Processor[Any]) -> list[bytes | None]:
    """Each session's processor state, encoded; a state that cannot be saved stops the
    batch (before anything of it is written) in one line naming its session."""
    encode_user = processor.encode_state
    encoded: list[bytes | None] = []
    for s in state.sessions.values():
        try:
            encoded.append(None if s.user is None else encode_user(s.user))
        except Exception as exc:
            raise ProcessorError(
                f"processor {processor.name} left a state that cannot be saved at {state.tp} "
                f"offset {s.last_offset}, session {s.session!r}: {one_line(exc)}",
                processor=processor.name,
                step="state",
                topic=state.tp.topic,
                partition=state.tp.partition,
                offset=s.last_offset,
                session=s.session,
            ) from exc
    return encoded


def _payload(data: bytes, where: str) -> bytes:
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + _DIGEST:
        raise StateError(f"state file {where} is not a tablecast state file (or is truncated)")
    payload, digest = data[len(MAGIC) : -_DIGEST], data[-_DIGEST:]
    if hashlib.sha256(payload).digest() != digest:
        raise StateError(f"state file {where} fails its checksum: it is damaged")
    return payload


def _table(data: bytes, where: str) -> pa.Table:
    return ipc.open_stream(pa.BufferReader(_payload(data, where))).read_all()


def decode(data: bytes, processor: Processor[Any] | None, where: str) -> PartitionState[Any]:
    """The state a file holds; :class:`StateError` naming ``where`` if it is damaged, or if
    ``processor`` cannot read it (another processor's, or a version it cannot migrate).
    Without a processor, each session's state is left encoded (bytes)."""
    table = _table(data, where)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    tp = TopicPartition(meta["topic"], int(meta["partition"]))
    state: PartitionState[Any] = PartitionState(tp, int(meta["offset"]), int(meta["clock_ms"]))
    decode_user: Callable[[bytes], Any] = (
        bytes if processor is None else user_decoder(processor, StateFacts.of(meta), where)
    )
    columns = [
        table.column(name).to_pylist() if name in table.column_names else [None] * len(table)
        for name in _SCHEMA.names
    ]
    for (
        session,
        seq,
        offset,
        ts,
        seen,
        closed,
        quarantine,
        owner,
        user,
        repeats,
        gaps,
        ahead,
    ) in zip(*columns, strict=True):
        state.sessions[session] = SessionState(
            session=session,
            last_seq=seq,
            last_offset=offset,
            last_ts=ts,
            seen_ms=seen,
            closed=closed,
            quarantine=quarantine,
            owner=None if owner is None else parse_key(owner),
            user=None if user is None else _read_user(decode_user, user, processor, session, where),
            repeats=repeats or 0,
            gaps=gaps or 0,
            ahead=None if not ahead else set(ahead),
        )
    return state


def _read_user(
    decode_user: Callable[[bytes], Any],
    data: bytes,
    processor: Processor[Any] | None,
    session: str,
    where: str,
) -> Any:
    try:
        return decode_user(data)
    except TablecastError:
        raise
    except Exception as exc:
        name = "" if processor is None else processor.name
        raise ProcessorError(
            f"processor {name} cannot read the state of session {session!r} in {where}: "
            f"{one_line(exc)}; where the state's type changed, raise state_version and "
            "write migrate()",
            processor=name,
            step="state",
            session=session,
            path=where,
        ) from exc


@dataclass(frozen=True, slots=True)
class StateFacts:
    """Which processor's states a file holds, and their state version."""

    processor: str
    state_version: int

    @classmethod
    def of(cls, meta: dict[str, str]) -> StateFacts:
        return cls(meta.get("processor", BUILT_IN), int(meta.get("state_version", "1")))

    @classmethod
    def read(cls, data: bytes, where: str) -> StateFacts:
        meta = ipc.open_stream(pa.BufferReader(_payload(data, where))).schema.metadata or {}
        return cls.of({k.decode(): v.decode() for k, v in meta.items()})


def user_decoder(
    processor: Processor[Any], facts: StateFacts, where: str
) -> Callable[[bytes], Any]:
    """How ``processor`` reads the sessions' states of a file with ``facts``: as they are,
    or through its migration from their version; refused in one line naming both."""
    if facts.processor != processor.name:
        raise StateError(
            f"state file {where} holds the states of processor {facts.processor}, not of "
            f"{processor.name}: a processor's checkpoint is its own",
            path=where,
        )
    old, new = facts.state_version, processor.state_version
    if old == new:
        return processor.decode_state
    if old > new or not overrides(processor, "migrate"):
        raise StateError(refusal(processor.name, old, new), path=where)

    def migrated(data: bytes) -> Any:
        try:
            state = processor.migrate(old, processor.decode_old(data))
            processor.encode_state(state)  # what it returned must save, as a state it made
            return state
        except Exception as exc:
            raise ProcessorError(
                f"processor {processor.name} failed to migrate a state of version {old} to "
                f"{new} in {where}: {type(exc).__name__}: {exc}",
                processor=processor.name,
                step="migrate",
                path=where,
            ) from exc

    return migrated


def refusal(name: str, old: int, new: int) -> str:
    """Why a processor of state version ``new`` cannot carry on from states of ``old``."""
    if old > new:
        return (
            f"the checkpoint holds states of version {old} of processor {name}, newer than "
            f"this code's state version {new}: run the code that wrote them, or a newer one"
        )
    return (
        f"processor {name} has state version {new} but the checkpoint holds version {old}, "
        f"and it has no migrate() from version {old}: write one, or start it on a new "
        "output and checkpoint"
    )


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


def version_name(version: StateVersion) -> str:
    digest = f"-{version.digest}" if version.digest else ""
    return f"{version.offset:020d}{digest}.state"


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

    def path(self, tp: TopicPartition, version: StateVersion) -> str:
        return self.location.child(tp.topic, str(tp.partition), version_name(version))

    def uri(self, tp: TopicPartition, version: StateVersion) -> str:
        return posixpath.join(self.root_uri, tp.topic, str(tp.partition), version_name(version))

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

    def versions(self, tp: TopicPartition) -> list[StateVersion]:
        """The versions of ``tp`` present, ascending by offset."""
        location = self.location
        directory = location.child(tp.topic, str(tp.partition))
        names = (info.base_name for info in location.list_dir(directory))
        return sorted(
            StateVersion(int(m.group(1)), m.group(2) or "")
            for m in map(_NAME.match, names)
            if m is not None
        )

    def _error(self, tp: TopicPartition, version: StateVersion, what: str) -> StateError:
        path = self.uri(tp, version)
        return StateError(
            f"state of {tp.key()} version {version.offset} ({path}) {what}; restore it, or run "
            "`tablecast repair` to rebuild the partitions' state from the source",
            topic=tp.topic,
            partition=tp.partition,
            version=version.offset,
            digest=version.digest,
            path=path,
        )

    def read(self, tp: TopicPartition, version: StateVersion) -> bytes:
        """The file of exactly ``version``: present, whole, with the digest it is known by."""
        try:
            data = self.location.read_bytes(self.path(tp, version))
        except FileNotFoundError:
            raise self._error(tp, version, "is missing") from None
        try:
            _payload(data, self.uri(tp, version))
        except StateError as exc:
            raise self._error(tp, version, f"is damaged ({exc})") from None
        if version.digest and content_digest(data) != version.digest:
            raise self._error(tp, version, "is damaged (its content is not the one recorded)")
        return data

    def load(
        self, tp: TopicPartition, version: StateVersion, processor: Processor[Any] | None
    ) -> PartitionState[Any]:
        """The state of exactly ``version``, read by ``processor`` (None: each session's state
        left encoded, whichever processor wrote it)."""
        return decode(self.read(tp, version), processor, self.uri(tp, version))

    def save(
        self, state: PartitionState[Any], processor: Processor[Any]
    ) -> tuple[StateVersion, int]:
        """Write ``state`` as its version, whole; returns the version and its size in bytes."""
        data = encode(state, processor)
        version = StateVersion(state.offset, content_digest(data))
        self.location.write_bytes_atomic(self.path(state.tp, version), data)
        return version, len(data)

    def collect_garbage(
        self, tp: TopicPartition, keep: Collection[StateVersion]
    ) -> list[StateVersion]:
        """Remove every version of ``tp`` but ``keep``: older ones, and those no batch
        published; none past the newest kept, which only another writer can have saved."""
        newest = max((v.offset for v in keep), default=-1)
        removable = [v for v in self.versions(tp) if v not in keep and v.offset <= newest]
        for version in removable:
            self.location.delete_file(self.path(tp, version))
        return removable


class StateCache:
    """The last state of a few partitions, kept in a Python worker between tasks.

    A state is handed out only for the exact version it is at (offset and
    digest: another pass of the same batch may have saved a different state
    at the same offset), and taken out of the cache while a task works on
    it: a task that fails leaves nothing half-applied behind.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._states: OrderedDict[
            tuple[str, TopicPartition], tuple[StateVersion, PartitionState[Any]]
        ] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def take(
        self, root: str, tp: TopicPartition, version: StateVersion
    ) -> PartitionState[Any] | None:
        with self._lock:
            found = self._states.pop((root, tp), None)
            if found is not None and found[0] == version and found[1].offset == version.offset:
                self.hits += 1
                return found[1]
            self.misses += 1
            return None

    def put(self, root: str, version: StateVersion, state: PartitionState[Any]) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._states[(root, state.tp)] = (version, state)
            self._states.move_to_end((root, state.tp))
            while len(self._states) > self.capacity:
                self._states.popitem(last=False)

    def __iter__(self) -> Iterator[tuple[str, TopicPartition]]:
        return iter(list(self._states))
