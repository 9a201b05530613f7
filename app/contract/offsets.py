"""Per topic-partition offsets, the one key that outlives a checkpoint.

Offsets are kept as ``{TopicPartition: next_offset}``. The job's source
records them in Spark's checkpoint as ``{"topic:partition": n}``, whatever
its backend; Spark's own Kafka source, which the job used before, as
``{"topic": {"partition": n}}``. Both parse here.

Beside the offsets the job's source keeps each topic's identity (Kafka's
topic ID), under the key ``"@topic-ids"`` (``@`` is in no Kafka topic
name): ``{"sensor-1:0": 12, "@topic-ids": {"sensor-1": "AaIJ9qb5d+C8v84tquj6gQ"}}``.
Every reader of offsets skips the keys that start with ``@``;
:func:`identities_from_json` reads this one.

The newest offsets the source reports with each trigger (Spark's
``latestOffset`` in a query's progress, never in the checkpoint) are each
partition's readable end (the last stable offset under ``read_committed``)
and, beside them, under ``"@high-watermarks"``, each partition's high
watermark, and under ``"@stable-since"``, since when (milliseconds since
the epoch) a partition's last stable offset has stayed where it is with
records beyond it (:class:`SourceReport`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def is_topic_name(name: str) -> bool:
    """Whether Kafka takes ``name`` as a topic's: ASCII letters, digits, ``.``, ``_`` and
    ``-``, 1 to 249 of them, not ``.`` or ``..`` (so also a safe folder of the archive)."""
    return _TOPIC_NAME.fullmatch(name) is not None and name not in {".", ".."}


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def key(self) -> str:
        return f"{self.topic}:{self.partition}"

    def __str__(self) -> str:
        return f"topic {self.topic} partition {self.partition}"


Offsets = dict[TopicPartition, int]
Identities = dict[str, str]  # topic -> its identity (Kafka's topic ID)

IDENTITIES_KEY = "@topic-ids"
HIGH_WATERMARKS_KEY = "@high-watermarks"
STABLE_SINCE_KEY = "@stable-since"
_META = "@"  # the first character of every key that is not a partition's


def parse_key(key: str) -> TopicPartition:
    topic, _, partition = key.rpartition(":")
    return TopicPartition(topic, int(partition))


def from_json(doc: Any) -> Offsets:
    """Offsets from either source's JSON form."""
    if isinstance(doc, str | bytes):
        doc = orjson.loads(doc)
    offsets: Offsets = {}
    for key, value in doc.items():
        if key.startswith(_META):
            continue
        if isinstance(value, dict):  # Kafka: {"topic": {"0": 12}}
            for partition, offset in value.items():
                offsets[TopicPartition(key, int(partition))] = int(offset)
        else:  # archive: {"topic:0": 12}
            offsets[parse_key(key)] = int(value)
    return offsets


def identities_from_json(doc: Any) -> Identities:
    """The topics' identities kept beside the offsets (``{}`` where none are)."""
    if isinstance(doc, str | bytes):
        doc = orjson.loads(doc)
    found = doc.get(IDENTITIES_KEY) or {}
    return {str(topic): str(identity) for topic, identity in found.items()}


def to_archive_json(offsets: Offsets) -> dict[str, int]:
    return {tp.key(): offsets[tp] for tp in sorted(offsets)}


def to_source_json(offsets: Offsets, identities: Identities) -> dict[str, Any]:
    """The job source's offsets: :func:`to_archive_json`, and the identities of their topics."""
    doc: dict[str, Any] = dict(to_archive_json(offsets))
    kept = {t: identities[t] for t in sorted({tp.topic for tp in offsets}) if identities.get(t)}
    if kept:
        doc[IDENTITIES_KEY] = kept
    return doc


@dataclass(frozen=True, slots=True)
class SourceReport:
    """What the source reports as its newest offsets with each trigger (not kept anywhere).

    ``readable``: where a micro-batch may read up to (the last stable offset
    under ``read_committed``); ``high_watermarks``: each partition's high
    watermark (None from a source that reports none); ``stable_since``: for
    each partition whose last stable offset has records beyond it, since
    when (milliseconds since the epoch) it has stayed at that offset.
    """

    readable: Offsets
    high_watermarks: Offsets | None = None
    stable_since: dict[TopicPartition, int] = field(default_factory=dict)

    def to_json(self, identities: Identities) -> dict[str, Any]:
        doc = to_source_json(self.readable, identities)
        if self.high_watermarks is not None:
            doc[HIGH_WATERMARKS_KEY] = to_archive_json(self.high_watermarks)
        if self.stable_since:
            doc[STABLE_SINCE_KEY] = to_archive_json(self.stable_since)
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> SourceReport:
        if isinstance(doc, str | bytes):
            doc = orjson.loads(doc)
        high = doc.get(HIGH_WATERMARKS_KEY)
        return cls(
            readable=from_json(doc),
            high_watermarks=None if high is None else from_json(high),
            stable_since=from_json(doc.get(STABLE_SINCE_KEY) or {}),
        )


def fingerprint(offsets: Offsets) -> str:
    """A short name for a range end: equal offsets, equal name."""
    canonical = orjson.dumps(to_archive_json(offsets))
    return hashlib.sha256(canonical).hexdigest()[:20]


def describe(offsets: Offsets) -> str:
    return ", ".join(f"{tp.key()}@{offsets[tp]}" for tp in sorted(offsets)) or "(none)"
