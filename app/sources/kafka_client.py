"""One Kafka client configuration for the job and the tools: plaintext, or MSK with IAM.

Every librdkafka client of the project (the job's source, its optional
consumer-group commits, the operator's topic, produce and archive tools,
repair) takes its settings from :meth:`KafkaEndpoint.config`.

On MSK the brokers come from the hand-off (``bootstrap-brokers-iam``, port
9098) and clients sign in with SASL/OAUTHBEARER over TLS, the token made from
the caller's AWS credentials by ``aws-msk-iam-sasl-signer-python`` (librdkafka
has no ``AWS_MSK_IAM`` mechanism; MSK accepts either).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from app.errors import ConfigurationError

__all__ = ["SIGNER_MODULE", "KafkaAuth", "KafkaEndpoint"]

# The package keeps its API in a submodule of the same name as the class it imitates.
SIGNER_MODULE = "aws_msk_iam_sasl_signer.MSKAuthTokenProvider"
_CLIENT_LOG = logging.getLogger("app.sources.kafka_client.librdkafka")


class KafkaAuth(StrEnum):
    NONE = "none"  # plaintext, for a local broker
    IAM = "iam"  # MSK with IAM client authentication over TLS


@dataclass(frozen=True, slots=True)
class KafkaEndpoint:
    """Where the brokers are and how to sign in (picklable: the job ships it to executors).

    :param bootstrap_servers: ``HOST:PORT,...``.
    :param auth: plaintext, or MSK's IAM over TLS.
    :param region: the AWS region whose credentials sign IAM tokens (IAM only).
    :param client_rack: librdkafka's ``client.rack``, the availability zone id
        (e.g. ``euw1-az1``) of this client: with MSK's rack-aware replica
        selector the brokers let it fetch from a replica in its own zone.
    """

    bootstrap_servers: str
    auth: KafkaAuth = KafkaAuth.NONE
    region: str = ""
    client_rack: str = ""

    @property
    def description(self) -> str:
        return f"Kafka at {self.bootstrap_servers}"

    def config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for a client of this endpoint, plus ``extra``."""
        settings: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": _ClientLog(),
        }
        if self.client_rack:
            settings["client.rack"] = self.client_rack
        if self.auth is KafkaAuth.IAM:
            settings.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanisms": "OAUTHBEARER",
                    "oauth_cb": _msk_token_callback(self.region),
                    # The wheel's own OpenSSL does not know where Debian keeps
                    # its CA certificates; "probe" looks in the usual places.
                    "ssl.ca.location": "probe",
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
