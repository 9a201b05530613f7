"""MSK's ``server_properties`` for an environment: durability and retention settings.

checkov has no checks for ``aws_msk_configuration``; tests/infra asserts these.
"""

from infra.config.model import EnvironmentConfig

RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"

# How far ahead of the broker's clock a producer's CreateTime may be (Kafka
# 3.6's KIP-937; MSK 3.8 keeps Kafka's "no limit"). The job's idle clock is a
# partition's largest record timestamp (docs/design.md, "Idle sessions"): one
# record stamped a year ahead would expire every session of its partition, and
# one past int64 microseconds cannot be read at all. Well under the job's
# session timeout (an hour by default): another producer's clock can bring a
# session's expiry forward by at most this. A producer further ahead is refused
# (INVALID_TIMESTAMP) and says so, instead of the job failing later.
MAX_TIMESTAMP_AHEAD_MS = 5 * 60 * 1000


def broker_properties(config: EnvironmentConfig) -> dict[str, str]:
    """Kafka broker settings, by name."""
    replication = str(config.replication_factor)
    min_insync = str(config.min_insync_replicas)
    return {
        # Topics are created on purpose by the operator's tool, with their
        # partition count; a typo in a producer must not create one.
        "auto.create.topics.enable": "false",
        "default.replication.factor": replication,
        "min.insync.replicas": min_insync,
        # Kafka's internal topics get the same durability as ours.
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": min_insync,
        # An out-of-sync replica must never become leader: that loses
        # acknowledged records, and the job's integrity check would fail.
        "unclean.leader.election.enable": "false",
        "log.retention.hours": str(config.retention_hours),
        # Retention by time only; storage is sized for it.
        "log.retention.bytes": "-1",
        # Consumers that name their zone (client.rack = the zone id, which MSK
        # gives each broker as broker.rack) fetch from an in-sync replica in
        # their own zone instead of crossing to the leader's (KIP-392).
        "replica.selector.class": RACK_AWARE_REPLICA_SELECTOR,
        "log.message.timestamp.after.max.ms": str(MAX_TIMESTAMP_AHEAD_MS),
    }


def server_properties(config: EnvironmentConfig) -> str:
    """The properties as MSK wants them: ``key=value`` lines."""
    return "".join(f"{key}={value}\n" for key, value in broker_properties(config).items())
