"""One Kafka client configuration for the job and the tools: plaintext, or MSK's sign-ins.

Every librdkafka client of the project (the job's source, its optional
consumer-group commits, the operator's topic, produce and archive tools,
repair) takes its settings from :meth:`KafkaEndpoint.config`.

MSK's client authentication modes (:class:`KafkaAuth`), each on its own
bootstrap brokers:

- ``iam`` (``bootstrap-brokers-iam``, port 9098): SASL/OAUTHBEARER over TLS,
  the token made from the caller's AWS credentials by
  ``aws-msk-iam-sasl-signer-python`` (librdkafka has no ``AWS_MSK_IAM``
  mechanism; MSK accepts either);
- ``tls`` (``bootstrap-brokers-tls``, port 9094): TLS only, the client
  unauthenticated (or by the certificate its ``--kafka-option ssl.*``
  settings name: mutual TLS);
- ``scram`` (``bootstrap-brokers-sasl-scram``, port 9096): SASL/SCRAM-SHA-512
  over TLS, user name and password read from the AWS Secrets Manager secret
  associated with the cluster (``{"username": ..., "password": ...}``, a name
  starting ``AmazonMSK_``), once per process.

Client settings of the operator's (``--kafka-option key=value``) pass
through to every client. Every setting the source sets itself is either
refused (:data:`OWNED_SETTINGS`, in one line naming the option to use
instead, if there is one) or honoured where a value of the operator's is
safe (:data:`HONOURED_SETTINGS`): a longer ``fetch.wait.max.ms``, a CA
bundle of its own for TLS. docs/operations.md lists them all, in a table a
test checks against these two.
"""

from __future__ import annotations

import functools
import importlib
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import orjson

from app.errors import ConfigurationError

__all__ = [
    "FETCH_WAIT_MS",
    "HONOURED_SETTINGS",
    "MAX_FETCH_WAIT_MS",
    "OWNED_SETTINGS",
    "SIGNER_MODULE",
    "Isolation",
    "KafkaAuth",
    "KafkaEndpoint",
    "parse_option",
]

# The package keeps its API in a submodule of the same name as the class it imitates.
SIGNER_MODULE = "aws_msk_iam_sasl_signer.MSKAuthTokenProvider"
_CLIENT_LOG = logging.getLogger("app.sources.kafka_client.librdkafka")


class KafkaAuth(StrEnum):
    NONE = "none"  # plaintext, for a local broker
    IAM = "iam"  # MSK with IAM client authentication over TLS
    TLS = "tls"  # TLS only
    SCRAM = "scram"  # SASL/SCRAM-SHA-512 over TLS, the secret in AWS Secrets Manager


class Isolation(StrEnum):
    """Which records the job's source reads (librdkafka's ``isolation.level``).

    ``read_committed`` (the default): records of committed transactions and
    non-transactional ones, each micro-batch planned up to the last stable
    offset; ``read_uncommitted``: every record up to the high watermark,
    aborted transactions' too.
    """

    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


# What the endpoint sets (where the brokers are, how to sign in) and what the
# job's source relies on (it reads assigned partitions, commits nothing, never
# skips offsets, reads what its planner planned, bounds librdkafka's prefetch,
# learns of refused sign-ins from its error callback): never an operator's option.
OWNED_SETTINGS: Final = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",
        "security.protocol",
        "sasl.mechanisms",
        "sasl.mechanism",
        "sasl.username",
        "sasl.password",
        "sasl.oauthbearer.config",
        "oauth_cb",
        "logger",
        "client.rack",
        "group.id",
        "group.instance.id",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "enable.partition.eof",
        "isolation.level",
        "error_cb",
        # The range readers' prefetch bounds (app.sources.kafka, measured by
        # bench/kafka_source.py): what a range fetches past its end, and what
        # every Python worker holds off the JVM's heap.
        "max.partition.fetch.bytes",
        "queued.min.messages",
        "queued.max.messages.kbytes",
        "fetch.queue.backoff.ms",
    }
)
# The source's fetch wait: at a partition's end the broker holds a fetch this
# long before it says there is nothing more, so a range whose last offsets hold
# no record learns its end so. A longer one is honoured (a broker slower to
# answer a fetch), up to MAX_FETCH_WAIT_MS: every such range waits it out once.
FETCH_WAIT_MS: Final = 10
MAX_FETCH_WAIT_MS: Final = 5000
# Settings the source sets whose operator's value it takes instead (where it is
# safe), with what it does with it.
HONOURED_SETTINGS: Final = {
    "fetch.wait.max.ms": f"the longer of the operator's and the source's {FETCH_WAIT_MS} ms, "
    f"up to {MAX_FETCH_WAIT_MS} ms",
    "ssl.ca.location": 'the operator\'s CA bundle instead of "probe" (TLS sign-ins)',
}
# Owned settings with an option of their own.
_OPTION_FOR: Final = {
    "isolation.level": "--kafka-isolation-level",
    "client.rack": "--kafka-client-rack",
    "bootstrap.servers": "--bootstrap-servers",
    "security.protocol": "--kafka-auth",
}


def parse_option(text: str) -> tuple[str, str]:
    """``key=value`` of ``--kafka-option``; a one-line error for a malformed or owned one."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigurationError(f"--kafka-option {text!r} is not key=value")
    if key in OWNED_SETTINGS or key.startswith("sasl."):
        instead = _OPTION_FOR.get(key)
        raise ConfigurationError(
            f"--kafka-option {key}: the source sets {key} itself"
            + (f" (use {instead})" if instead else "")
        )
    if key == "fetch.wait.max.ms":
        _fetch_wait(value)
    return key, value


def _fetch_wait(value: str) -> int:
    """An operator's ``fetch.wait.max.ms``, checked: from the source's own to the longest."""
    text = value.strip()
    if not text.isdigit() or not FETCH_WAIT_MS <= int(text) <= MAX_FETCH_WAIT_MS:
        raise ConfigurationError(
            f"--kafka-option fetch.wait.max.ms={value}: give milliseconds from the "
            f"source's {FETCH_WAIT_MS} to {MAX_FETCH_WAIT_MS} (a range whose last offsets "
            "hold no record waits this long for its end)"
        )
    return int(text)


@dataclass(frozen=True, slots=True)
class KafkaEndpoint:
    """Where the brokers are and how to sign in (picklable: the job ships it to executors).

    :param bootstrap_servers: ``HOST:PORT,...``.
    :param auth: plaintext, or MSK's IAM over TLS.
    :param region: the AWS region whose credentials sign IAM tokens (IAM only).
    :param client_rack: librdkafka's ``client.rack``, the availability zone id
        (e.g. ``euw1-az1``) of this client: with MSK's rack-aware replica
        selector the brokers let it fetch from a replica in its own zone.
    :param secret_arn: SCRAM only: the Secrets Manager secret (ARN or name)
        that holds the user name and password, read in ``region``.
    :param options: the operator's librdkafka settings (``--kafka-option``),
        for every client; none of :data:`OWNED_SETTINGS`.
    """

    bootstrap_servers: str
    auth: KafkaAuth = KafkaAuth.NONE
    region: str = ""
    client_rack: str = ""
    secret_arn: str = ""
    options: tuple[tuple[str, str], ...] = ()

    @property
    def description(self) -> str:
        return f"Kafka at {self.bootstrap_servers}"

    def fetch_wait_ms(self) -> int | None:
        """The operator's ``fetch.wait.max.ms`` (:data:`HONOURED_SETTINGS`), or None."""
        for key, value in self.options:
            if key == "fetch.wait.max.ms":
                return _fetch_wait(value)
        return None

    def config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for a client of this endpoint, plus ``extra``.

        ``extra`` never silently replaces an operator's setting: a key given
        both ways is refused, but for :data:`HONOURED_SETTINGS`, whose
        ``extra`` value the caller made from the operator's.
        """
        given = {key for key, _ in self.options}
        clash = sorted(given & set(extra) - set(HONOURED_SETTINGS))
        if clash:
            raise ConfigurationError(
                f"--kafka-option {clash[0]}: this client sets {clash[0]} itself"
            )
        settings: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _ClientLog(),
        }
        if self.client_rack:
            settings["client.rack"] = self.client_rack
        if self.auth is not KafkaAuth.NONE:
            # The wheel's own OpenSSL does not know where Debian keeps its CA
            # certificates; "probe" looks in the usual places.
            settings["ssl.ca.location"] = "probe"
        settings.update(self.options)  # none of them owned: parse_option refused those
        if self.auth is KafkaAuth.IAM:
            settings.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanisms": "OAUTHBEARER",
                    "oauth_cb": _msk_token_callback(self.region),
                }
            )
        elif self.auth is KafkaAuth.TLS:
            settings["security.protocol"] = "SSL"
        elif self.auth is KafkaAuth.SCRAM:
            username, password = scram_credentials(self.secret_arn, self.region)
            settings.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanisms": "SCRAM-SHA-512",
                    "sasl.username": username,
                    "sasl.password": password,
                }
            )
        settings.update(extra)
        return settings

    def prime(self, client: Any) -> None:
        """Serve the token callback once, before the client's first request."""
        if self.auth is KafkaAuth.IAM:
            client.poll(0)


class _ClientLog:
    """librdkafka's log lines, at most at INFO.

    librdkafka retries by itself and logs every failed attempt (a refused
    connection every few milliseconds); what the project gives up on it
    reports itself, in one line. The attempts stay in the logs that keep
    INFO (the cluster's JSON lines), out of an operator's terminal.
    """

    def log(self, level: int, msg: str, *args: object) -> None:
        _CLIENT_LOG.log(min(level, logging.INFO), msg, *args)


def _msk_token_callback(region: str) -> Any:
    try:
        signer: Any = importlib.import_module(SIGNER_MODULE)
    except ImportError:
        raise ConfigurationError(
            "MSK with IAM needs the aws-msk-iam-sasl-signer-python package "
            "(or pass --kafka-auth none for a plaintext broker)"
        ) from None
    if not region:
        raise ConfigurationError(
            "MSK with IAM needs the AWS region (--region, or AWS_REGION in the environment)"
        )

    def token(_config: str) -> tuple[str, float]:
        value, expiry_ms = signer.generate_auth_token(region)
        return value, expiry_ms / 1000

    return token


@functools.cache
def scram_credentials(secret_arn: str, region: str) -> tuple[str, str]:
    """The user name and password of MSK's SCRAM secret (read once per process)."""
    if not secret_arn:
        raise ConfigurationError(
            "--kafka-auth scram needs --kafka-secret-arn (the cluster's Secrets Manager secret)"
        )
    if not region:
        raise ConfigurationError(
            "--kafka-auth scram needs the AWS region (--region, or AWS_REGION in the environment)"
        )
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    client: Any = boto3.client("secretsmanager", region_name=region)
    try:
        text = client.get_secret_value(SecretId=secret_arn)["SecretString"]
    except (ClientError, BotoCoreError, KeyError) as exc:
        raise ConfigurationError(
            f"--kafka-secret-arn {secret_arn}: could not read the secret in {region}: {exc}"
        ) from None
    try:
        doc = orjson.loads(text)
        username, password = doc["username"], doc["password"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        raise ConfigurationError(
            f"--kafka-secret-arn {secret_arn}: the secret is not a JSON object with "
            "username and password (MSK's SCRAM secret)"
        ) from None
    return str(username), str(password)
