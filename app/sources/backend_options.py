"""The one mapping between the job's source settings and the data source's options.

``tablecast run`` builds the options (:func:`archive_options`,
:func:`kafka_options`, :func:`tiered_options` for both), Spark hands them to
:class:`app.sources.stream.TablecastSource` as strings, and
:func:`from_options` rebuilds the backend from them on the driver.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets
from app.errors import ConfigurationError
from app.sources import broker_quirks
from app.sources.archive import ArchiveBackend
from app.sources.backend import Backend
from app.sources.kafka import DEFAULT_TIMEOUT_S, KafkaBackend
from app.sources.kafka_client import Isolation, KafkaAuth, KafkaEndpoint
from app.sources.retired import RETIRED_OPTION, retired_uri
from app.sources.starting import StartingPosition
from app.sources.tiered import TieredBackend

ARCHIVE = "archive"
KAFKA = "kafka"
TIERED = "tiered"  # Kafka, and the archive for the offsets Kafka no longer holds


def common_options(
    topic_pattern: str,
    max_offsets_per_trigger: int,
    starting: Offsets | None,
    *,
    starting_position: StartingPosition | None = None,
    min_offsets_per_trigger: int = 0,
    max_trigger_delay_s: float = 0.0,
) -> dict[str, str]:
    options = {
        "topicPattern": topic_pattern,
        "maxOffsetsPerTrigger": str(max_offsets_per_trigger),
    }
    if starting:
        options["startingOffsets"] = starting_offsets_option(starting)
    if starting_position is not None:
        options["startingPosition"] = starting_position.option()
    if min_offsets_per_trigger:
        options["minOffsetsPerTrigger"] = str(min_offsets_per_trigger)
    if max_trigger_delay_s:
        options["maxTriggerDelayMs"] = str(round(max_trigger_delay_s * 1000))
    return options


def starting_offsets_option(offsets: Offsets) -> str:
    """``startingOffsets``: a repair's offsets, ``{"topic:partition": n}``."""
    return orjson.dumps(offsets_mod.to_archive_json(offsets)).decode()


def retired_options(output_uri: str) -> dict[str, str]:
    """Where the job's output records its retired topics (:mod:`app.sources.retired`)."""
    return {RETIRED_OPTION: retired_uri(output_uri)}


def archive_options(uri: str) -> dict[str, str]:
    return {"backend": ARCHIVE, "path": uri}


def kafka_options(
    endpoint: KafkaEndpoint,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolation: Isolation = Isolation.READ_COMMITTED,
) -> dict[str, str]:
    options = {
        "backend": KAFKA,
        "bootstrapServers": endpoint.bootstrap_servers,
        "kafkaAuth": endpoint.auth.value,
        "timeoutMs": str(round(timeout_s * 1000)),
        "isolationLevel": isolation.value,
    }
    if endpoint.region:
        options["region"] = endpoint.region
    if endpoint.client_rack:
        options["clientRack"] = endpoint.client_rack
    if endpoint.secret_arn:
        options["secretArn"] = endpoint.secret_arn
    if endpoint.options:
        options["kafkaOptions"] = orjson.dumps(dict(endpoint.options)).decode()
    fetch_wait_ms = broker_quirks.installed_fetch_wait_ms()
    if fetch_wait_ms is not None:  # a test's broker (the planner runs in another process)
        options["fetchWaitMs"] = str(fetch_wait_ms)
    return options


def tiered_options(
    endpoint: KafkaEndpoint,
    archive_uri: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    isolation: Isolation = Isolation.READ_COMMITTED,
) -> dict[str, str]:
    return (
        kafka_options(endpoint, timeout_s, isolation)
        | archive_options(archive_uri)
        | {"backend": TIERED}
    )


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
        secret_arn=options.get("secretArn", ""),
        options=tuple(orjson.loads(options.get("kafkaOptions", "{}")).items()),
    )
    timeout_s = int(options.get("timeoutMs", str(round(DEFAULT_TIMEOUT_S * 1000)))) / 1000
    isolation = Isolation(options.get("isolationLevel", Isolation.READ_COMMITTED))
    fetch_wait_ms = int(options["fetchWaitMs"]) if "fetchWaitMs" in options else None
    return KafkaBackend(
        endpoint=endpoint,
        topic_pattern=options["topicPattern"],
        timeout_s=timeout_s,
        isolation=isolation,
        fetch_wait_ms=fetch_wait_ms,
    )
