"""Kafka client settings for the tools: a local broker in plaintext, or MSK with IAM.

On MSK the brokers come from the hand-off (``bootstrap-brokers-iam``, port
9098) and clients sign in with SASL/OAUTHBEARER, the token made from the
caller's AWS credentials by ``aws-msk-iam-sasl-signer-python`` (librdkafka
has no ``AWS_MSK_IAM`` mechanism; MSK accepts either).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from app.ops.errors import OpsError
from app.sources.kafka import KafkaAuth

SIGNER_MODULE = "aws_msk_iam_sasl_signer"


@dataclass(frozen=True, slots=True)
class KafkaEndpoint:
    bootstrap_servers: str
    auth: KafkaAuth = KafkaAuth.NONE
    region: str = ""

    def config(self, **extra: Any) -> dict[str, Any]:
        """librdkafka settings for a client of this endpoint, plus ``extra``."""
        settings: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        if self.auth is KafkaAuth.IAM:
            settings.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanisms": "OAUTHBEARER",
                    "oauth_cb": _msk_token_callback(self.region),
                }
            )
        settings.update(extra)
        return settings

    def prime(self, client: Any) -> None:
        """Serve the token callback once, before the client's first request."""
        if self.auth is KafkaAuth.IAM:
            client.poll(0)


def _msk_token_callback(region: str) -> Any:
    try:
        signer: Any = importlib.import_module(SIGNER_MODULE)
    except ImportError:
        raise OpsError(
            "MSK with IAM needs the aws-msk-iam-sasl-signer-python package "
            "(or pass --kafka-auth none for a plaintext broker)"
        ) from None
    if not region:
        raise OpsError("MSK with IAM needs the environment's region")

    def token(_config: str) -> tuple[str, float]:
        value, expiry_ms = signer.MSKAuthTokenProvider.generate_auth_token(region)
        return value, expiry_ms / 1000

    return token
