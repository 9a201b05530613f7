"""Per topic-partition offsets, the one key that outlives a checkpoint.

Offsets are kept as ``{TopicPartition: next_offset}``. The job's source
records them in Spark's checkpoint as ``{"topic:partition": n}``, whatever
its backend; Spark's own Kafka source, which the job used before, as
``{"topic": {"partition": n}}``. Both parse here.

Beside the offsets the job's source keeps each topic's identity (Kafka's
topic ID), under the key ``"@topic-ids"`` (``@`` is in no Kafka topic
name): ``{"sensor-1:0": 12, "@topic-ids": {"sensor-1": "AaIJ9qb5d+C8v84tquj6gQ"}}``.
Every reader of offsets skips it; :func:`identities_from_json` reads it.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import orjson


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


def parse_key(key: str) -> TopicPartition:
    topic, _, partition = key.rpartition(":")
    return TopicPartition(topic, int(partition))


def from_json(doc: Any) -> Offsets:
    """Offsets from either source's JSON form."""
    if isinstance(doc, str | bytes):
        doc = orjson.loads(doc)
    offsets: Offsets = {}
    for key, value in doc.items():
        if key == IDENTITIES_KEY:
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


def fingerprint(offsets: Offsets) -> str:
    """A short name for a range end: equal offsets, equal name."""
    canonical = orjson.dumps(to_archive_json(offsets))
    return hashlib.sha256(canonical).hexdigest()[:20]


def describe(offsets: Offsets) -> str:
    return ", ".join(f"{tp.key()}@{offsets[tp]}" for tp in sorted(offsets)) or "(none)"
