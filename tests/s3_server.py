"""A moto S3 server on loopback for a block of a test, its settings in the environment.

pyarrow's S3 filesystem (``app.storage``) and boto3 (its conditional writes)
both reach it through ``TABLECAST_S3_ENDPOINT``; the previous values come
back when the block ends.
"""

from __future__ import annotations

import os
import urllib.request
from types import TracebackType
from typing import Any


class S3Server:
    """``with S3Server() as server: server.create_bucket("lake")``; ``server.env`` for
    the processes a test starts."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint = ""
        self.env: dict[str, str] = {}
        self._saved: dict[str, str | None] = {}

    def __enter__(self) -> S3Server:
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        # moto's backends live in the process: without a reset this test would see
        # the buckets and objects of the previous one.
        urllib.request.urlopen(
            urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        ).close()
        settings = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "TABLECAST_S3_ENDPOINT": self.endpoint,
        }
        self._saved = {k: os.environ.get(k) for k in settings}
        os.environ.update(settings)
        self.env = {**os.environ}
        return self

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for key, value in self._saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._server.stop()
