"""The options given to Spark's Kafka source (its jar cannot load here)."""

from __future__ import annotations

import orjson

from app.offsets import TopicPartition
from app.sources.kafka import KafkaAuth, source_options


def test_plain_options_read_everything_and_fail_on_data_loss() -> None:
    options = source_options(
        bootstrap_servers="b1:9092,b2:9092", topic_pattern="^sensor-.+",
        max_offsets_per_trigger=500_000, auth=KafkaAuth.NONE,
    )  # fmt: skip
    assert options == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092",
        "subscribePattern": "^sensor-.+",
        "startingOffsets": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "kafka.metadata.max.age.ms": "60000",
        "maxOffsetsPerTrigger": "500000",
    }


def test_iam_options_are_what_msk_needs() -> None:
    options = source_options(
        bootstrap_servers="b-1.msk:9098", topic_pattern="^sensor-.+",
        max_offsets_per_trigger=1000, auth=KafkaAuth.IAM,
    )  # fmt: skip
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "AWS_MSK_IAM"
    assert (
        options["kafka.sasl.jaas.config"] == "software.amazon.msk.auth.iam.IAMLoginModule required;"
    )
    assert (
        options["kafka.sasl.client.callback.handler.class"]
        == "software.amazon.msk.auth.iam.IAMClientCallbackHandler"
    )


def test_starting_offsets_after_a_repair_use_kafkas_json_form() -> None:
    options = source_options(
        bootstrap_servers="b:9092", topic_pattern="^sensor-.+", max_offsets_per_trigger=10,
        auth=KafkaAuth.NONE,
        starting_offsets={TopicPartition("sensor-1", 0): 42, TopicPartition("sensor-1", 3): 7},
    )  # fmt: skip
    assert orjson.loads(options["startingOffsets"]) == {"sensor-1": {"0": 42, "3": 7}}
