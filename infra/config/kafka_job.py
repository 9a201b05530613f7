"""How the job (and the archiver) read the environment's Kafka: `tablecast run`'s Kafka options.

The hand-off carries these to ``run-job`` (``ami/files/bin/run-job``) and to
``tablecast-ops archive``; the nodes' roles get the secret of SCRAM's
sign-in (``infra/constructs/node_permissions.py``). The defaults are the
job's own: IAM, ``read_committed``, from the earliest offsets, every topic
of the environment's pattern, no minimum batch.
"""

import re
from dataclasses import dataclass

from app.errors import ConfigurationError
from app.sources.kafka_client import Isolation, KafkaAuth, parse_option
from app.sources.starting import StartingPosition
from infra.config import parsing

# MSK reads a SCRAM secret only under a name starting AmazonMSK_.
_SECRET_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:(?P<region>[a-z0-9-]+):\d{12}:secret:AmazonMSK_[\w/+=.@-]+$"
)
_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:(?P<region>[a-z0-9-]+):\d{12}:key/[0-9a-f-]{36}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# The modes the deployed cluster offers beside IAM (which is always on: the tools use it).
DEPLOYED_AUTH = (KafkaAuth.IAM, KafkaAuth.TLS, KafkaAuth.SCRAM)


@dataclass(frozen=True, kw_only=True)
class KafkaJobSettings:
    """The job's Kafka options in one environment (each named as `tablecast run`'s option)."""

    auth: KafkaAuth = KafkaAuth.IAM
    """``--kafka-auth``: ``iam``; ``tls`` (TLS only: the cluster also lets unauthenticated
    TLS clients in); ``scram`` (SASL/SCRAM over TLS with ``secret_arn``)."""
    secret_arn: str = ""
    """``--kafka-secret-arn``: scram only, the Secrets Manager secret (``AmazonMSK_...``) MSK
    associates with the cluster; the driver, workers and archiver may read exactly it."""
    secret_key_arn: str = ""
    """The customer managed KMS key the secret is encrypted with (MSK requires one):
    the same roles may decrypt with it, through Secrets Manager only."""
    isolation_level: Isolation = Isolation.READ_COMMITTED
    """``--kafka-isolation-level``, the job's and the archiver's."""
    options: tuple[str, ...] = ()
    """``--kafka-option key=value`` each (not a setting the source owns)."""
    starting_offsets: str = "earliest"
    """``--starting-offsets``: where a fresh checkpoint starts."""
    topics: tuple[str, ...] = ()
    """``--topics`` instead of the topic pattern; each must match the pattern (the grants)."""
    min_offsets_per_trigger: int = 0
    """``--min-offsets-per-trigger``; 0: none."""
    max_trigger_delay: str = ""
    """``--max-trigger-delay`` (``"15 minutes"``), with ``min_offsets_per_trigger`` only."""

    def problem(self, *, region: str, topic_pattern: str) -> tuple[str, str] | None:
        """The first wrong setting as ``(field, problem)``, or None."""
        if self.auth not in DEPLOYED_AUTH:
            return "kafka.auth", f"must be one of {', '.join(DEPLOYED_AUTH)}"
        if self.auth == KafkaAuth.SCRAM:
            match = _SECRET_ARN.match(self.secret_arn)
            if match is None:
                return "kafka.secret_arn", (
                    f"{self.secret_arn!r} is not the ARN of a Secrets Manager secret named "
                    "AmazonMSK_... (scram needs one)"
                )
            if match["region"] != region:
                return "kafka.secret_arn", f"is in {match['region']}, not in {region}"
            key = _KEY_ARN.match(self.secret_key_arn)
            if key is None or key["region"] != region:
                return "kafka.secret_key_arn", (
                    f"{self.secret_key_arn!r} is not the ARN of a KMS key in {region} (MSK's "
                    "SCRAM secrets are encrypted with a customer managed key)"
                )
        elif self.secret_arn or self.secret_key_arn:
            return "kafka.secret_arn", f"only with auth scram (auth is {self.auth})"
        if self.isolation_level not in tuple(Isolation):
            return "kafka.isolation_level", f"must be one of {', '.join(Isolation)}"
        for option in self.options:
            try:
                parse_option(option)
            except ConfigurationError as exc:
                return "kafka.options", str(exc)
        try:
            StartingPosition.parse(self.starting_offsets)
        except ConfigurationError as exc:
            return "kafka.starting_offsets", str(exc)
        for topic in self.topics:
            if not _TOPIC.match(topic):
                return "kafka.topics", f"{topic!r} is not a Kafka topic name"
            if re.fullmatch(topic_pattern, topic) is None:
                return "kafka.topics", (
                    f"{topic!r} does not match topic_pattern {topic_pattern!r} (the nodes may "
                    "read only its topics)"
                )
        if self.min_offsets_per_trigger < 0:
            return "kafka.min_offsets_per_trigger", "must not be negative"
        if self.max_trigger_delay:
            if not self.min_offsets_per_trigger:
                return "kafka.max_trigger_delay", "only with min_offsets_per_trigger"
            try:
                parsing.trigger_seconds(self.max_trigger_delay)
            except ValueError as exc:
                return "kafka.max_trigger_delay", str(exc)
        return None
