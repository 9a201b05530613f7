"""The raw archive's layout (CONTRACT.md section 4): list, check, read, write.

``<archive>/<topic>/<partition>/<start>-<end>.parquet`` holds the records of
offsets ``[start, end)``; a partition's files continue one another, and a
hole between two files is data loss.

A topic's identity (:data:`IDENTITY_FILE`, optional): ``<archive>/<topic>/_topic-id``
holds the Kafka topic ID whose records the topic's files are, as text. Its
name starts with ``_``, so it is outside section 4's layout: the readers of
that layout skip such names (as they skip files still being written), and
an archive without it reads as before, its identity unknown. With it, the
job's checkpoint keeps the identity beside the offsets, and an archive whose
topic was replaced by another one's records is refused as data loss
(:mod:`app.sources.stream`), as a topic re-created in Kafka is.
"""

from __future__ import annotations

import itertools
import posixpath
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from app.contract.envelope import Record
from app.contract.offsets import TopicPartition
from app.errors import ArchiveLayoutError, ConfigurationError, DataLossError
from app.sources.backend import Bounds
from app.sources.records import Tier, conform, served_by, typed_records
from app.sources.starting import TIME_NEEDS_KAFKA
from app.storage import Location, resolve

_FILE_NAME = re.compile(r"^(\d{20})-(\d{20})\.parquet$")
IDENTITY_FILE = "_topic-id"


@dataclass(frozen=True, slots=True)
class ArchiveFile:
    tp: TopicPartition
    start: int
    end: int
    path: str


@dataclass(slots=True)
class ArchiveIndex:
    """What the archive held when it was listed: each partition's files."""

    files: dict[TopicPartition, list[ArchiveFile]] = field(default_factory=dict)
    identities: dict[str, str] = field(default_factory=dict)  # topic -> its _topic-id

    def earliest(self, tp: TopicPartition) -> int:
        return self.files[tp][0].start

    def latest(self, tp: TopicPartition) -> int:
        return self.files[tp][-1].end

    def covering(self, tp: TopicPartition, start: int, end: int) -> list[ArchiveFile]:
        """The files holding offsets ``[start, end)``; data loss if any are gone."""
        found = [f for f in self.files.get(tp, []) if f.end > start and f.start < end]
        if start < end and (not found or found[0].start > start):
            first = found[0].start if found else "none"
            raise DataLossError(
                f"data loss in the archive: {tp} offsets from {start} are needed but "
                f"the earliest file starts at {first}",
                source="the archive",
                topic=tp.topic,
                partition=tp.partition,
                offset=start,
                **({"earliest": found[0].start} if found else {}),
            )
        _check_continuous(tp, found)  # an index listed with holes=True may have them
        return found


def require_root(uri: str) -> Location:
    """The archive's location; a one-line error if its root does not exist (a typo).

    An existing root with nothing in it yet is an archive a job may wait on.
    On S3 the bucket must exist; a prefix exists as soon as a file is under it.
    """
    location = resolve(uri)
    if location.is_local:
        if not location.exists(location.path):
            raise ConfigurationError(f"archive {uri} does not exist")
    else:
        bucket = location.path.split("/", 1)[0]
        if not location.exists(bucket):
            raise ConfigurationError(f"archive {uri}: bucket {bucket} does not exist")
    return location


def file_name(start: int, end: int) -> str:
    return f"{start:020d}-{end:020d}.parquet"


def scan(location: Location, topic_pattern: str, *, holes: bool = False) -> ArchiveIndex:
    """List every partition of the topics matching ``topic_pattern``.

    Topics match as Kafka's ``subscribePattern`` does: the whole name. A hole
    between two files of a partition is data loss, unless ``holes``: a source
    that also reads Kafka may not need the missing offsets
    (:mod:`app.sources.tiered`); :meth:`ArchiveIndex.covering` still refuses
    a range with a hole.
    """
    pattern = re.compile(topic_pattern)
    index = ArchiveIndex()
    for topic_info in location.list_dir(location.path):
        topic = topic_info.base_name
        if topic_info.type != pafs.FileType.Directory or topic.startswith((".", "_")):
            continue
        if not pattern.fullmatch(topic):
            continue
        for part_info in location.list_dir(topic_info.path):
            if part_info.base_name == IDENTITY_FILE and part_info.type == pafs.FileType.File:
                index.identities[topic] = _identity(location, part_info)
                continue
            if part_info.type != pafs.FileType.Directory or part_info.base_name.startswith(
                (".", "_")
            ):
                continue
            if not part_info.base_name.isdigit():
                raise ArchiveLayoutError(
                    f"archive directory {part_info.path} is not a partition number",
                    path=part_info.path,
                    topic=topic,
                )
            tp = TopicPartition(topic, int(part_info.base_name))
            files = _partition_files(location, tp, part_info.path, holes)
            if files:
                index.files[tp] = files
    return index


def write_identity(location: Location, topic: str, identity: str) -> None:
    """Record whose records ``topic``'s files are (the archiver, when it starts a topic)."""
    location.write_bytes_atomic(location.child(topic, IDENTITY_FILE), identity.encode())


def claim_identity(location: Location, index: ArchiveIndex, topic: str, identity: str) -> None:
    """Record ``identity`` for ``topic`` (the archiver, before it archives the topic).

    Data loss if the archive holds the records of another topic of that name
    (one deleted and created again since): the archive cannot continue it.
    """
    held = index.identities.get(topic)
    if held and identity and held != identity:
        where = f"the archive {location.path}"
        raise DataLossError(
            f"data loss in {where}: topic {topic} holds the records of topic ID {held} but "
            f"Kafka's topic {topic} is {identity} (deleted and created again): archive it "
            f"under another archive, or move {location.child(topic)} aside",
            source=where,
            topic=topic,
            identity=identity,
            previous_identity=held,
        )
    if identity and not held:
        write_identity(location, topic, identity)
        index.identities[topic] = identity


# Identity files read, by (path, modification time, size): a topic's file
# changes only when the topic is archived afresh, so one read each.
_IDENTITIES: dict[tuple[str, int | None, int | None], str] = {}


def _identity(location: Location, info: pafs.FileInfo) -> str:
    key = (info.path, info.mtime_ns, info.size)
    found = _IDENTITIES.get(key)
    if found is None:
        found = _IDENTITIES[key] = location.read_bytes(info.path).decode().strip()
    return found


def _partition_files(
    location: Location, tp: TopicPartition, path: str, holes: bool = False
) -> list[ArchiveFile]:
    files: list[ArchiveFile] = []
    for info in location.list_dir(path):
        name = info.base_name
        if name.startswith((".", "_")):  # files still being written
            continue
        match = _FILE_NAME.match(name)
        if info.type != pafs.FileType.File or match is None:
            raise ArchiveLayoutError(
                f"archive file {info.path} is not named <start>-<end>.parquet "
                "with 20-digit offsets",
                path=info.path,
                topic=tp.topic,
                partition=tp.partition,
            )
        start, end = int(match.group(1)), int(match.group(2))
        if end <= start:
            raise ArchiveLayoutError(
                f"archive file {info.path} ends at or before its start",
                path=info.path,
                topic=tp.topic,
                partition=tp.partition,
            )
        files.append(ArchiveFile(tp, start, end, info.path))
    files.sort(key=lambda f: f.start)
    for previous, current in itertools.pairwise(files):
        if current.start < previous.end:
            raise ArchiveLayoutError(
                f"archive files {previous.path} and {current.path} overlap ({tp})",
                path=current.path,
                overlaps=previous.path,
                topic=tp.topic,
                partition=tp.partition,
            )
    if not holes:
        _check_continuous(tp, files)
    return files


def _check_continuous(tp: TopicPartition, files: list[ArchiveFile]) -> None:
    """Data loss if one of ``files`` (sorted) does not start where the previous one ends."""
    for previous, current in itertools.pairwise(files):
        if current.start > previous.end:
            raise DataLossError(
                f"data loss in the archive: {tp} offsets {previous.end} to "
                f"{current.start - 1} are missing between {posixpath.basename(previous.path)} "
                f"and {posixpath.basename(current.path)}",
                source="the archive",
                topic=tp.topic,
                partition=tp.partition,
                first_missing=previous.end,
                last_missing=current.start - 1,
                path=current.path,
            )


def read_range(
    location: Location, files: list[ArchiveFile], start: int, end: int
) -> Iterator[pa.RecordBatch]:
    """The records of offsets ``[start, end)``, in offset order."""
    for archive_file in files:
        # The file itself, not a dataset of it: a quarter of read_table's time per file,
        # which counts when a batch reads hundreds of partitions' small files.
        with location.fs.open_input_file(archive_file.path) as handle:
            table = pq.ParquetFile(handle).read()
        table = _conform(table, archive_file)
        offsets = table.column("offset")
        if len(table):
            least, most = pc.min(offsets).as_py(), pc.max(offsets).as_py()
            if least < archive_file.start or most >= archive_file.end:
                raise ArchiveLayoutError(
                    f"archive file {archive_file.path} holds offsets outside its name's range",
                    **_file_facts(archive_file),
                )
            if least < start or most >= end:  # a filter copies every value, so only here
                table = table.filter(
                    pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
                )
        yield from table.to_batches(max_chunksize=65_536)


def _conform(table: pa.Table, archive_file: ArchiveFile) -> pa.Table:
    """The file's records as :data:`~app.sources.records.SCHEMA` (a file without headers: none)."""
    try:
        table = conform(table)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ArchiveLayoutError(
            f"archive file {archive_file.path} does not have the Kafka columns: {exc}",
            **_file_facts(archive_file),
        ) from None
    _check_whole(table, archive_file)
    offsets = table.column("offset").to_numpy()
    if len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all():
        raise ArchiveLayoutError(
            f"archive file {archive_file.path} is not sorted by offset", **_file_facts(archive_file)
        )
    return table


# The columns Spark's Kafka source never gives null (key and value may be).
_NEVER_NULL: Final = ("topic", "partition", "offset", "timestamp", "timestampType")


def _check_whole(table: pa.Table, archive_file: ArchiveFile) -> None:
    """Every record whole and of the file's own partition (CONTRACT.md 4).

    The job takes a record's partition from the file's folder, the tools
    (verify, replay) from its columns: a record naming another would be read
    two ways.
    """
    for name in _NEVER_NULL:
        if table.column(name).null_count:
            raise ArchiveLayoutError(
                f"archive file {archive_file.path} holds a null {name}", **_file_facts(archive_file)
            )
    tp = archive_file.tp
    for name, own in (("topic", tp.topic), ("partition", tp.partition)):
        other = pc.not_equal(table.column(name), own)
        if pc.any(other).as_py():
            at = pc.index(other, True).as_py()
            raise ArchiveLayoutError(
                f"archive file {archive_file.path} holds a record of {name} "
                f"{table.column(name)[at].as_py()!r} at offset "
                f"{table.column('offset')[at].as_py()}, not of its folder's {tp}",
                **_file_facts(archive_file),
            )


def _file_facts(archive_file: ArchiveFile) -> dict[str, str | int]:
    return {
        "path": archive_file.path,
        "topic": archive_file.tp.topic,
        "partition": archive_file.tp.partition,
    }


def write_file(
    location: Location, tp: TopicPartition, start: int, end: int, table: pa.Table
) -> str:
    """Write one archive file whole (write, then rename into place).

    ``table`` without a ``headers`` column is written with empty ones.
    """
    path = location.child(tp.topic, str(tp.partition), file_name(start, end))
    sink = pa.BufferOutputStream()
    pq.write_table(conform(table), sink, compression="zstd")
    location.write_bytes_atomic(path, sink.getvalue().to_pybytes())
    return path


def iter_records(
    location: Location, files: list[ArchiveFile], start: int, end: int
) -> Iterator[Record]:
    """The typed records of offsets ``[start, end)`` of one partition, in order."""
    for batch in read_range(location, files, start, end):
        yield from typed_records(batch)


@dataclass(frozen=True)
class ArchiveRange:
    """A task's read of one partition's range from the archive (pickled to executors)."""

    uri: str
    files: tuple[ArchiveFile, ...]
    start: int
    end: int

    def read(self) -> Iterator[pa.RecordBatch]:
        """The range's records in offset order, with the source's columns (from the archive)."""
        for batch in read_range(resolve(self.uri), list(self.files), self.start, self.end):
            yield served_by(batch, Tier.ARCHIVE)


@dataclass
class _Listing:
    """The last listing :meth:`ArchiveBackend.bounds` made, for the readers of the same plan."""

    index: ArchiveIndex | None = None


@dataclass(frozen=True)
class ArchiveBackend:
    """The raw archive as a :class:`~app.sources.stream.Backend` (local path or ``s3://``)."""

    uri: str
    topic_pattern: str
    _listing: _Listing = field(default_factory=_Listing, init=False, compare=False, repr=False)

    @property
    def description(self) -> str:
        return f"the archive {self.uri}"

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.topic_pattern, topic) is not None

    def index(self, *, holes: bool = False) -> ArchiveIndex:
        return scan(resolve(self.uri), self.topic_pattern, holes=holes)

    def bounds(self, expected: Collection[TopicPartition] = ()) -> dict[TopicPartition, Bounds]:
        """The archive's partitions now (a listing is the archive: ``expected`` changes nothing)."""
        index = self._listing.index = self.index()
        return {
            tp: Bounds(
                index.earliest(tp), index.latest(tp), identity=index.identities.get(tp.topic, "")
            )
            for tp in index.files
        }

    def offsets_at(self, timestamp_ms: int) -> dict[TopicPartition, int]:
        raise ConfigurationError(TIME_NEEDS_KAFKA)

    def reader(self, tp: TopicPartition, start: int, end: int) -> ArchiveRange:
        """The range's files, from the last listing (one listing per trigger, not per range)."""
        index = self._listing.index
        if index is None or not index.files.get(tp) or index.latest(tp) < end:
            index = self._listing.index = self.index()  # planned from a listing it lacks
        return ArchiveRange(self.uri, tuple(index.covering(tp, start, end)), start, end)
