"""How the job (and the archiver) read the environment's Kafka: `tablecast run`'s Kafka options.

The hand-off carries these to ``run-job`` (``ami/files/bin/run-job``) and to
``tablecast-ops archive``; the nodes' roles get the secret of SCRAM's
sign-in (``infra/constructs/node_permissions.py``). The defaults are the
job's own: IAM, ``read_committed``, from the earliest offsets, every topic
of the environment's pattern, no minimum batch.
"""

import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.errors import ConfigurationError
from app.sources.kafka_client import Isolation, KafkaAuth, parse_option
from app.sources.starting import StartingPosition
from infra.config import layout, parsing

# MSK reads a SCRAM secret only under a name starting AmazonMSK_.
_SECRET_ARN = re.compile(
    r"^arn:aws[a-z-]*:secretsmanager:(?P<region>[a-z0-9-]+):\d{12}:secret:AmazonMSK_[\w/+=.@-]+$"
)
_KEY_ARN = re.compile(r"^arn:aws[a-z-]*:kms:(?P<region>[a-z0-9-]+):\d{12}:key/[0-9a-f-]{36}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_CERTIFICATE_AUTHORITY_ARN = re.compile(
    r"^arn:aws[a-z-]*:acm-pca:(?P<region>[a-z0-9-]+):\d{12}:certificate-authority/[0-9a-f-]{36}$"
)
# The modes the deployed cluster offers beside IAM (which is always on: the tools use it).
DEPLOYED_AUTH = (KafkaAuth.IAM, KafkaAuth.TLS, KafkaAuth.SCRAM)
LISTENER_PORTS: Mapping[KafkaAuth, int] = {
    KafkaAuth.IAM: layout.KAFKA_IAM_PORT,
    KafkaAuth.TLS: layout.KAFKA_TLS_PORT,
    KafkaAuth.SCRAM: layout.KAFKA_SCRAM_PORT,
}
"""MSK's listener of each sign-in: the brokers open a port only for the sign-ins they take."""
# What a client certificate takes in librdkafka's settings (--kafka-option each).
CLIENT_CERTIFICATE_OPTIONS = ("ssl.certificate.location", "ssl.key.location")


@dataclass(frozen=True, kw_only=True)
class KafkaJobSettings:
    """The job's Kafka options in one environment (each named as `tablecast run`'s option)."""

    auth: KafkaAuth = KafkaAuth.IAM
    """``--kafka-auth``: ``iam``; ``tls`` (mutual TLS: MSK checks each client's certificate
    against ``certificate_authority_arns``); ``scram`` (SASL/SCRAM over TLS with
    ``secret_arn``)."""
    secret_arn: str = ""
    """``--kafka-secret-arn``: scram only, the Secrets Manager secret (``AmazonMSK_...``) MSK
    associates with the cluster; the driver, workers and archiver may read exactly it."""
    secret_key_arn: str = ""
    """The customer managed KMS key the secret is encrypted with (MSK requires one):
    the same roles may decrypt with it, through Secrets Manager only."""
    certificate_authority_arns: tuple[str, ...] = ()
    """tls only: the ACM Private CAs whose certificates MSK accepts from clients (never
    unauthenticated TLS: anyone who reached the port could write or delete any topic). The
    job's certificate and key are its ``options`` ``ssl.certificate.location`` and
    ``ssl.key.location``, files the operator puts on the nodes."""
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

    @property
    def ports(self) -> tuple[int, ...]:
        """The brokers' ports the Spark nodes reach: IAM's (the tools), and the job's sign-in's."""
        return tuple(sorted({LISTENER_PORTS[KafkaAuth.IAM], LISTENER_PORTS[self.auth]}))

    def problem(self, *, region: str, topic_pattern: str) -> tuple[str, str] | None:
        """The first wrong setting as ``(field, problem)``, or None."""
        if self.auth not in DEPLOYED_AUTH:
            return "kafka.auth", f"must be one of {', '.join(DEPLOYED_AUTH)}"
        problem = self._tls_problem(region)
        if problem is not None:
            return problem
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

    def _tls_problem(self, region: str) -> tuple[str, str] | None:
        """tls only with client certificates: MSK never lets an unauthenticated client in."""
        if self.auth != KafkaAuth.TLS:
            if self.certificate_authority_arns:
                return (
                    "kafka.certificate_authority_arns",
                    f"only with auth tls (auth is {self.auth})",
                )
            return None
        if not self.certificate_authority_arns:
            return "kafka.auth", (
                "tls needs client certificates: set kafka.certificate_authority_arns (ACM "
                "Private CA); unauthenticated TLS would let anyone who reaches port "
                f"{LISTENER_PORTS[KafkaAuth.TLS]} write or delete any topic"
            )
        for arn in self.certificate_authority_arns:
            match = _CERTIFICATE_AUTHORITY_ARN.match(arn)
            if match is None or match["region"] != region:
                return "kafka.certificate_authority_arns", (
                    f"{arn!r} is not the ARN of an ACM Private CA in {region}"
                )
        given = {option.split("=", 1)[0].strip() for option in self.options}
        missing = [name for name in CLIENT_CERTIFICATE_OPTIONS if name not in given]
        if missing:
            return "kafka.options", (
                f"tls signs the job in with a client certificate: give {' and '.join(missing)}"
            )
        return None
