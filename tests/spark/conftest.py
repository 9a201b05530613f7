"""Fixtures of the Spark tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback with bucket ``lake``; its settings in this process's
    environment and in the returned one (for the CLI's subprocesses)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    # moto's backends live in the process, not in the server: without a reset
    # this test would see the buckets and objects of the previous one.
    import urllib.request

    urllib.request.urlopen(
        urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")
    ).close()
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "TABLECAST_S3_ENDPOINT": f"http://{host}:{port}",
    }
    import boto3

    boto3.client(
        "s3",
        endpoint_url=env["TABLECAST_S3_ENDPOINT"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket="lake")
    saved = {k: os.environ.get(k) for k in env if k.startswith(("AWS_", "TABLECAST_"))}
    os.environ.update({k: v for k, v in env.items() if k in saved})
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture
def iceberg_pool_ended() -> Iterator[None]:
    """For tests that read the output's table with pyiceberg themselves: its shared pool of
    threads ends with the test (tests/leaks.py)."""
    from app.table.catalog import threads_released

    with threads_released():
        yield
