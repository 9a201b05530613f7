"""Loopback ports for tests."""

from __future__ import annotations

import socket


def closed_port() -> int:
    """A loopback port nothing listens on: connections to it are refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens there any more: connections are refused
