"""Topics for new sources, created with the environment's retention and replication.

The policy comes from the hand-off (``retention-hours``, ``replication-factor``,
``topic-pattern``) and is checked before anything is created: at least 72
hours of retention (the job must be able to fall a weekend behind), no more
replicas than brokers, and a name the job's pattern picks up. Existing topics
are never altered; they are reported with their retention.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaException

# Public names of confluent_kafka.admin, which has no __all__ to say so.
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from app.contract.offsets import is_topic_name
from app.ops.errors import KafkaAdminError, TopicPolicyError
from app.sources.kafka_client import KafkaEndpoint

MIN_RETENTION_HOURS: Final = 72
HOUR_MS: Final = 3_600_000
RETENTION_MS: Final = "retention.ms"
CLEANUP_POLICY: Final = "cleanup.policy"
# Sessions need every message: compaction would keep one per key (session).
DELETE: Final = "delete"


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    retention_hours: int
    replication_factor: int
    partitions: int

    def configs(self) -> dict[str, str]:
        """The topic-level settings every new topic gets."""
        return {RETENTION_MS: str(self.retention_hours * HOUR_MS), CLEANUP_POLICY: DELETE}


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int
    retention_ms: int | None  # None: not set on the topic (the broker's default applies)
    cleanup_policy: str | None

    @property
    def retention(self) -> str:
        if self.retention_ms is None:
            return "broker default"
        if self.retention_ms < 0:
            return "unlimited"
        return f"{self.retention_ms / HOUR_MS:g} h"

    @property
    def below_minimum(self) -> bool:
        minimum = MIN_RETENTION_HOURS * HOUR_MS
        return self.retention_ms is not None and 0 <= self.retention_ms < minimum

    def line(self) -> str:
        return (
            f"{self.name}  partitions={self.partitions}  replication={self.replication_factor}  "
            f"retention={self.retention}  cleanup.policy={self.cleanup_policy or 'broker default'}"
            + (f"  (below the {MIN_RETENTION_HOURS} h minimum)" if self.below_minimum else "")
        )


@dataclass(frozen=True, slots=True)
class CreateResult:
    created: list[TopicInfo]
    existing: list[TopicInfo]


def policy_check(policy: TopicPolicy, *, brokers: int) -> None:
    """Refuse a policy below the minimum retention or beyond the cluster's brokers."""
    if policy.retention_hours < MIN_RETENTION_HOURS:
        raise TopicPolicyError(
            f"retention of {policy.retention_hours} h is under the minimum of "
            f"{MIN_RETENTION_HOURS} h: no topic created"
        )
    if policy.partitions < 1:
        raise TopicPolicyError(f"{policy.partitions} partitions: a topic needs at least one")
    if not 1 <= policy.replication_factor <= brokers:
        raise TopicPolicyError(
            f"replication factor {policy.replication_factor} needs 1 to {brokers} "
            f"(the cluster has {brokers} brokers): no topic created"
        )


def names_check(names: Sequence[str], topic_pattern: str | None) -> None:
    """Refuse names Kafka rejects, and names the job would not subscribe to."""
    if not names:
        raise TopicPolicyError("no topic named")
    for name in names:
        if not is_topic_name(name):
            raise TopicPolicyError(f"{name!r} is not a valid Kafka topic name")
        # Spark's subscribePattern matches the whole name (Java's Matcher.matches).
        if topic_pattern is not None and not re.fullmatch(topic_pattern, name):
            raise TopicPolicyError(
                f"topic {name!r} does not match the job's pattern {topic_pattern!r}: "
                "the job would never read it"
            )


class Topics:
    """Topic administration through one AdminClient."""

    def __init__(self, endpoint: KafkaEndpoint, *, timeout_s: float = 30.0) -> None:
        self._admin = AdminClient(endpoint.config())
        endpoint.prime(self._admin)
        self._timeout_s = timeout_s

    def brokers(self) -> int:
        return len(self._admin.list_topics(timeout=self._timeout_s).brokers)

    def list_topics(self, topic_pattern: str | None = None) -> list[TopicInfo]:
        """Topics (all but Kafka's internal ones, or those matching the pattern), by name."""
        metadata = self._admin.list_topics(timeout=self._timeout_s)
        names = sorted(
            name
            for name in metadata.topics
            if not name.startswith("__")
            and (topic_pattern is None or re.fullmatch(topic_pattern, name))
        )
        return self._describe(metadata, names)

    def create(
        self, names: Sequence[str], policy: TopicPolicy, *, topic_pattern: str | None
    ) -> CreateResult:
        """Create the topics that do not exist yet; report those that do, unchanged."""
        names_check(names, topic_pattern)
        metadata = self._admin.list_topics(timeout=self._timeout_s)
        policy_check(policy, brokers=len(metadata.brokers))
        wanted = list(dict.fromkeys(names))
        missing = [name for name in wanted if name not in metadata.topics]
        raced: list[str] = []
        if missing:
            futures = self._admin.create_topics(
                [
                    NewTopic(
                        name,
                        num_partitions=policy.partitions,
                        replication_factor=policy.replication_factor,
                        config=policy.configs(),
                    )
                    for name in missing
                ],
                operation_timeout=self._timeout_s,
                request_timeout=self._timeout_s,
            )
            for name, future in futures.items():
                try:
                    future.result()
                except KafkaException as exc:
                    error = exc.args[0]
                    if error.name() == "TOPIC_ALREADY_EXISTS":
                        raced.append(name)  # created meanwhile by someone else
                        continue
                    raise KafkaAdminError(name, "create", error.str()) from None
        metadata = self._admin.list_topics(timeout=self._timeout_s)
        infos = {info.name: info for info in self._describe(metadata, wanted)}
        created = [infos[name] for name in missing if name not in raced]
        for info in created:  # read back what the brokers made
            if info.retention_ms != policy.retention_hours * HOUR_MS:
                raise KafkaAdminError(
                    info.name, "create", f"the broker reports retention {info.retention}"
                )
        existing = [infos[name] for name in wanted if name not in missing or name in raced]
        return CreateResult(created, existing)

    def _describe(self, metadata: Any, names: Iterable[str]) -> list[TopicInfo]:
        names = [name for name in names if name in metadata.topics]
        configs: dict[str, dict[str, Any]] = {}
        if names:
            futures = self._admin.describe_configs(
                [ConfigResource(ResourceType.TOPIC, name) for name in names],
                request_timeout=self._timeout_s,
            )
            for resource, future in futures.items():
                try:
                    configs[resource.name] = future.result()
                except KafkaException as exc:
                    raise KafkaAdminError(resource.name, "describe", exc.args[0].str()) from None
        infos = []
        for name in names:
            partitions = metadata.topics[name].partitions
            entries = configs.get(name, {})
            infos.append(
                TopicInfo(
                    name=name,
                    partitions=len(partitions),
                    replication_factor=min(
                        (len(p.replicas) for p in partitions.values()), default=0
                    ),
                    retention_ms=_int_config(entries, RETENTION_MS),
                    cleanup_policy=_config(entries, CLEANUP_POLICY),
                )
            )
        return infos


def _config(entries: dict[str, Any], name: str) -> str | None:
    entry = entries.get(name)
    return None if entry is None or entry.value is None else str(entry.value)


def _int_config(entries: dict[str, Any], name: str) -> int | None:
    value = _config(entries, name)
    return None if value is None else int(value)
