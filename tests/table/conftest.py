from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.table import catalog as catalog_mod
from app.table.catalog import threads_released


@pytest.fixture(autouse=True)
def _pyiceberg_pool_ended() -> Iterator[None]:
    """The tests read the table with pyiceberg directly: end its shared pool after each."""
    with threads_released():
        yield


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A moto server (S3 and Glue) on loopback with bucket ``lake``."""
    import urllib.request

    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    urllib.request.urlopen(
        urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")
    ).close()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "TABLECAST_S3_ENDPOINT": endpoint,
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="lake")
    try:
        yield env
    finally:
        catalog_mod._catalog.cache_clear()  # its clients point at this server
        server.stop()
