"""Topics retired on purpose: read up to a recorded end, then never again.

A topic whose source is gone (a sensor decommissioned) is deleted from
Kafka. Deleted without a word, the job cannot tell whether records were
produced after it last listed the topic, so a deleted topic stops it as data
loss (:mod:`app.sources.stream`). Retired first (``tablecast-ops
retire-topic``, :mod:`app.ops.retire`), it has a recorded end: the job reads
it up to that end, then drops it from its offsets, whether or not Kafka
still has it, and carries on without it.

One record per topic, ``<output>/_tablecast/retired-topics/<topic>.json``
(beside the output's ledger: the output is where the operator's tools and
the job both reach, on a laptop and on AWS)::

    {"topic": "sensor-17", "identity": "AaIJ9qb5d+C8v84tquj6gQ",
     "ends": {"0": 1042, "1": 977}, "retired_at": "2026-11-25T10:00:00+00:00",
     "ends_from": "kafka"}

``ends`` holds each partition's next offset after its last record (what the
job reads it up to); ``ends_from`` says where they came from: ``kafka``, the
topic's high watermarks when it was retired, or ``ledger``, the offsets the
job had published when Kafka no longer had the topic. A retired topic is
never read again by the job that wrote that output, whatever its identity:
the state of its partitions in the checkpoint is the retired topic's, so a
topic created again under its name needs a new output and checkpoint.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from typing import Final

import msgspec

from app.contract.offsets import Offsets, TopicPartition
from app.errors import ConfigurationError
from app.storage import resolve

__all__ = [
    "RETIRED_DIR",
    "RETIRED_OPTION",
    "EndsFrom",
    "RetiredTopic",
    "read_retired",
    "retired_uri",
    "write",
]

# Beside the output's ledger (app.sink.ledger's control directory); readers of
# the dataset skip names starting with "_".
RETIRED_DIR: Final = "_tablecast/retired-topics"
RETIRED_OPTION: Final = "retiredTopics"  # the job's source option: where they are recorded


class EndsFrom(StrEnum):
    KAFKA = "kafka"  # the topic's high watermarks when it was retired
    LEDGER = "ledger"  # what the job had published: Kafka no longer had the topic


class RetiredTopic(msgspec.Struct, frozen=True, kw_only=True):
    """One retired topic and the offsets the job reads it up to."""

    topic: str
    identity: str  # Kafka's topic ID when retired; "" where Kafka no longer had it
    ends: dict[int, int]  # partition -> its next offset after the last record read
    ends_from: EndsFrom
    retired_at: str = msgspec.field(default_factory=lambda: datetime.now(UTC).isoformat())

    def end_offsets(self) -> Offsets:
        return {TopicPartition(self.topic, p): end for p, end in sorted(self.ends.items())}

    def unread(self, begin: Mapping[TopicPartition, int]) -> Offsets:
        """The partitions whose next offset in ``begin`` is short of their end: that offset."""
        return {
            tp: begin.get(tp, 0) for tp, end in self.end_offsets().items() if begin.get(tp, 0) < end
        }


def retired_uri(output_uri: str) -> str:
    """Where the retired topics of ``output_uri`` are recorded."""
    return posixpath.join(output_uri.rstrip("/"), RETIRED_DIR)


def read_retired(uri: str) -> dict[str, RetiredTopic]:
    """Every topic retired under ``uri`` (:func:`retired_uri`), by name; ``{}`` if none."""
    location = resolve(uri)
    found: dict[str, RetiredTopic] = {}
    for info in location.list_dir(location.path):
        if not info.is_file or not info.base_name.endswith(".json"):
            continue
        data = location.read_bytes(info.path)
        try:
            record = msgspec.json.decode(data, type=RetiredTopic)
        except msgspec.MsgspecError as exc:
            raise ConfigurationError(
                f"retired topic record {posixpath.join(uri, info.base_name)} is not one: {exc}"
            ) from None
        found[record.topic] = record
    return found


def write(uri: str, record: RetiredTopic) -> str:
    """Record ``record`` under ``uri`` (whole, or not at all); returns the record's URI."""
    location = resolve(uri)
    name = f"{record.topic}.json"
    location.write_bytes_atomic(location.child(name), msgspec.json.encode(record))
    return posixpath.join(uri.rstrip("/"), name)
