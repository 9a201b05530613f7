"""The Kafka tests' own fixtures: a broker behind a proxy that can hide a topic's metadata."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka.metadata_proxy import Proxied, broker_behind_proxy


@pytest.fixture(scope="session")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    with broker_behind_proxy(tmp_path_factory.mktemp("tansu-proxied") / "tansu.log") as found:
        yield found
