"""Options for Spark's own Kafka source, as the job uses it on the cluster.

The connector jar (``spark-sql-kafka-0-10``) and the MSK IAM library are
baked into the AMI; this machine cannot load them, so tests check that the
options built here are exactly right.
"""

from __future__ import annotations

import orjson

from app import offsets as offsets_mod
from app.kafka_client import KafkaAuth
from app.offsets import Offsets

__all__ = ["FORMAT", "KafkaAuth", "source_options"]

FORMAT = "kafka"


def source_options(
    *,
    bootstrap_servers: str,
    topic_pattern: str,
    max_offsets_per_trigger: int,
    auth: KafkaAuth,
    starting_offsets: Offsets | None = None,
    topic_refresh_ms: int = 60_000,
) -> dict[str, str]:
    """The ``spark.readStream.format("kafka")`` options of the job."""
    options = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribePattern": topic_pattern,
        # A new query reads every record still on the brokers ...
        "startingOffsets": "earliest",
        # ... and fails instead of silently skipping offsets that expired.
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        # How often new topics matching the pattern are discovered.
        "kafka.metadata.max.age.ms": str(topic_refresh_ms),
    }
    if max_offsets_per_trigger > 0:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    if starting_offsets:
        # After `tablecast repair`: partitions not named start at the earliest offset (-2).
        options["startingOffsets"] = orjson.dumps(
            offsets_mod.to_kafka_json(starting_offsets)
        ).decode()
    if auth is KafkaAuth.IAM:
        options.update(
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "AWS_MSK_IAM",
                "kafka.sasl.jaas.config": ("software.amazon.msk.auth.iam.IAMLoginModule required;"),
                "kafka.sasl.client.callback.handler.class": (
                    "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
                ),
            }
        )
    return options
