"""The one mapping between the job's source settings and the data source's options.

``tablecast run`` builds the options (:func:`archive_options`,
:func:`kafka_options`, :func:`tiered_options` for both), Spark hands them to
:class:`app.sources.stream.TablecastSource` as strings, and
:func:`from_options` rebuilds the backend from them on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.contract.offsets import Offsets
from app.errors import ConfigurationError
from app.sources.archive import ArchiveBackend
from app.sources.backend import Backend
from app.sources.kafka import DEFAULT_TIMEOUT_S, KafkaBackend
from app.sources.kafka_client import KafkaAuth, KafkaEndpoint
from app.sources.stream import starting_offsets_option
from app.sources.tiered import TieredBackend

ARCHIVE = "archive"
KAFKA = "kafka"
TIERED = "tiered"  # Kafka, and the archive for the offsets Kafka no longer holds


def common_options(
    topic_pattern: str, max_offsets_per_trigger: int, starting: Offsets | None
) -> dict[str, str]:
    options = {
        "topicPattern": topic_pattern,
        "maxOffsetsPerTrigger": str(max_offsets_per_trigger),
    }
    if starting:
        options["startingOffsets"] = starting_offsets_option(starting)
    return options


def archive_options(uri: str) -> dict[str, str]:
    return {"backend": ARCHIVE, "path": uri}


def kafka_options(endpoint: KafkaEndpoint, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, str]:
    options = {
        "backend": KAFKA,
        "bootstrapServers": endpoint.bootstrap_servers,
        "kafkaAuth": endpoint.auth.value,
        "timeoutMs": str(round(timeout_s * 1000)),
    }
    if endpoint.region:
        options["region"] = endpoint.region
    if endpoint.client_rack:
        options["clientRack"] = endpoint.client_rack
    return options


def tiered_options(
    endpoint: KafkaEndpoint, archive_uri: str, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, str]:
    return kafka_options(endpoint, timeout_s) | archive_options(archive_uri) | {"backend": TIERED}


def from_options(options: Mapping[str, str]) -> Backend:
    kind = options.get("backend", ARCHIVE)
    if kind == ARCHIVE:
        return _archive(options)
    if kind == KAFKA:
        return _kafka(options)
    if kind == TIERED:
        return TieredBackend(_kafka(options), _archive(options))
    raise ConfigurationError(f"unknown source backend {kind!r}")


def _archive(options: Mapping[str, str]) -> ArchiveBackend:
    return ArchiveBackend(options["path"], options["topicPattern"])


def _kafka(options: Mapping[str, str]) -> KafkaBackend:
    endpoint = KafkaEndpoint(
        options["bootstrapServers"],
        KafkaAuth(options.get("kafkaAuth", KafkaAuth.NONE)),
        region=options.get("region", ""),
        client_rack=options.get("clientRack", ""),
    )
    timeout_s = int(options.get("timeoutMs", str(round(DEFAULT_TIMEOUT_S * 1000)))) / 1000
    return KafkaBackend(endpoint, options["topicPattern"], timeout_s)
