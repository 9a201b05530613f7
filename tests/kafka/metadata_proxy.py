"""A loopback proxy in front of a Kafka-protocol broker that can withhold a topic from its
metadata answers: what a broker answering from an empty cache around a restart does.

Every byte passes through unchanged but the Metadata responses (Kafka's API key 3,
versions 0 to 13, flexible from 9), which it parses whole: while a topic is hidden,
an answer to a request for every topic leaves it out, and an answer to a request
that names it says it is unknown (``UNKNOWN_TOPIC_OR_PARTITION``), as a broker
with an empty metadata cache answers. The broker behind it must advertise the
proxy's address (:func:`broker_behind_proxy`), so that every connection a client
makes after the bootstrap goes through the proxy too.

One thread serves every connection (``selectors``); :meth:`MetadataProxy.close`
ends it and closes every socket.
"""

from __future__ import annotations

import itertools
import selectors
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from app.local import tansu
from app.local.processes import LOOPBACK, free_port
from app.sources.kafka_client import KafkaEndpoint
from tests.tansu import listening

__all__ = ["MetadataProxy", "Proxied", "broker_behind_proxy"]

METADATA = 3
UNKNOWN_TOPIC_OR_PARTITION = 3
_FLEXIBLE_FROM = 9  # Metadata's first flexible version (compact strings, tagged fields)


class _Reader:
    """Kafka's primitive types, read from ``data`` at ``pos``."""

    def __init__(self, data: bytes, pos: int, flexible: bool) -> None:
        self.data, self.pos, self.flexible = data, pos, flexible

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        value, shift = 0, 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def length(self, *, array: bool) -> int:
        """An array's count or a string's length; -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.take(">i" if array else ">h")

    def string(self) -> str | None:
        size = self.length(array=False)
        if size < 0:
            return None
        text = self.data[self.pos : self.pos + size].decode()
        self.pos += size
        return text

    def int32s(self) -> None:
        count = self.length(array=True)
        self.pos += 4 * max(0, count)

    def tagged(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                size = self.uvarint()
                self.pos += size


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _array_length(count: int, flexible: bool) -> bytes:
    return _uvarint(count + 1) if flexible else struct.pack(">i", count)


def _unknown_topic(name: str, version: int) -> bytes:
    """A Metadata response's topic entry saying ``name`` is unknown (no partitions)."""
    flexible = version >= _FLEXIBLE_FROM
    encoded = name.encode()
    out = struct.pack(">h", UNKNOWN_TOPIC_OR_PARTITION)
    out += (_uvarint(len(encoded) + 1) if flexible else struct.pack(">h", len(encoded))) + encoded
    if version >= 10:
        out += bytes(16)  # the zero topic ID
    if version >= 1:
        out += b"\x00"  # not internal
    out += _array_length(0, flexible)  # no partitions
    if version >= 8:
        out += struct.pack(">i", -(2**31))  # authorized operations: not asked
    if flexible:
        out += _uvarint(0)
    return out


def names_every_topic(frame: bytes) -> bool:
    """Whether a Metadata request (its frame, size first) asks for every topic."""
    reader = _Reader(frame, 4, False)
    reader.take(">h")  # api key
    version = reader.take(">h")
    reader.take(">i")  # correlation id
    reader.string()  # client id: never compact
    reader.flexible = version >= _FLEXIBLE_FROM
    reader.tagged()
    count = reader.length(array=True)
    return count < 0 or (version == 0 and count == 0)


def without_topics(frame: bytes, version: int, hidden: set[str], every_topic: bool) -> bytes:
    """A Metadata response (its frame, size first) without ``hidden``'s topics.

    Left out of an answer for every topic; said to be unknown in an answer for named ones.
    """
    flexible = version >= _FLEXIBLE_FROM
    reader = _Reader(frame, 4, False)
    reader.take(">i")  # correlation id
    reader.flexible = flexible
    reader.tagged()  # the response header's, from version 9
    if version >= 3:
        reader.take(">i")  # throttle time
    for _ in range(max(0, reader.length(array=True))):  # brokers
        reader.take(">i")
        reader.string()
        reader.take(">i")
        if version >= 1:
            reader.string()  # rack
        reader.tagged()
    if version >= 2:
        reader.string()  # cluster id
    if version >= 1:
        reader.take(">i")  # controller id
    topics_at = reader.pos
    entries: list[tuple[int, int, str | None]] = []
    for _ in range(max(0, reader.length(array=True))):
        begin = reader.pos
        reader.take(">h")  # error code
        name = reader.string()
        if version >= 10:
            reader.pos += 16  # topic ID
        if version >= 1:
            reader.take(">b")  # internal
        for _ in range(max(0, reader.length(array=True))):  # partitions
            reader.take(">h")
            reader.take(">i")
            reader.take(">i")
            if version >= 7:
                reader.take(">i")  # leader epoch
            reader.int32s()  # replicas
            reader.int32s()  # in-sync replicas
            if version >= 5:
                reader.int32s()  # offline replicas
            reader.tagged()
        if version >= 8:
            reader.take(">i")  # authorized operations
        reader.tagged()
        entries.append((begin, reader.pos, name))
    kept: list[bytes] = []
    for begin, end, name in entries:
        if name not in hidden:
            kept.append(frame[begin:end])
        elif not every_topic and name is not None:
            kept.append(_unknown_topic(name, version))
    body = (
        frame[4:topics_at]
        + _array_length(len(kept), flexible)
        + b"".join(kept)
        + frame[reader.pos :]
    )
    return struct.pack(">i", len(body)) + body


@dataclass
class _Connection:
    client: socket.socket
    broker: socket.socket
    from_client: bytearray = field(default_factory=bytearray)
    from_broker: bytearray = field(default_factory=bytearray)
    # correlation id -> (API key, version, asks for every topic)
    asked: dict[int, tuple[int, int, bool]] = field(default_factory=dict)


def _frames(buffer: bytearray) -> Iterator[bytes]:
    """The whole frames (size first) at the start of ``buffer``, taken out of it."""
    while len(buffer) >= 4:
        (size,) = struct.unpack_from(">i", buffer)
        if len(buffer) < 4 + size:
            return
        frame = bytes(buffer[: 4 + size])
        del buffer[: 4 + size]
        yield frame


class MetadataProxy:
    """Forwards a loopback port to a broker; hides topics from its metadata when told."""

    def __init__(self) -> None:
        self._listener = socket.create_server((LOOPBACK, 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self.address = f"{LOOPBACK}:{self.port}"
        self.broker_port = 0  # set before the first client connects
        self._lock = threading.Lock()
        # topic -> whether to hide it from this answer (given: is it one for every topic?)
        self._hidden: dict[str, Callable[[bool], bool]] = {}
        self.withheld = 0  # metadata answers a topic was hidden from
        self.answered = 0  # metadata answers given
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._connections: dict[socket.socket, _Connection] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="metadata-proxy", daemon=True)
        self._thread.start()

    # -- what a test asks of it --------------------------------------------------

    def hide_for(self, topic: str, seconds: float) -> None:
        """Answer without ``topic`` for ``seconds`` from now."""
        until = time.monotonic() + seconds
        self._set(topic, lambda every: time.monotonic() < until)

    def flap(self, topic: str) -> None:
        """Answers that disagree about ``topic``, until :meth:`show`: every answer that
        names it says it is unknown, every other answer for all topics lists it (brokers
        with and without it in their caches)."""
        turns = itertools.cycle((True, False))
        self._set(topic, lambda every: not every or next(turns))

    def show(self, topic: str) -> None:
        with self._lock:
            self._hidden.pop(topic, None)

    def _set(self, topic: str, hide: Callable[[bool], bool]) -> None:
        with self._lock:
            self._hidden[topic] = hide

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for connection in list(self._connections.values()):
            self._drop(connection)
        self._selector.close()
        self._listener.close()

    # -- the proxy's thread -------------------------------------------------------

    def _serve(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                elif sock in self._connections:
                    self._pump(self._connections[sock], sock)

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        try:
            broker = socket.create_connection((LOOPBACK, self.broker_port), timeout=5)
        except OSError:  # the broker is stopping: so is the client's connection
            client.close()
            return
        connection = _Connection(client, broker)
        for sock in (client, broker):
            sock.setblocking(True)
            self._connections[sock] = connection
            self._selector.register(sock, selectors.EVENT_READ)

    def _pump(self, connection: _Connection, sock: socket.socket) -> None:
        """Forward what ``sock`` has; a side that closed (or broke) closes both."""
        try:
            data = sock.recv(1 << 16)
            if data:
                self._forward(connection, sock, data)
                return
        except OSError:
            pass
        self._drop(connection)

    def _forward(self, connection: _Connection, sock: socket.socket, data: bytes) -> None:
        if sock is connection.client:
            connection.from_client += data
            for frame in _frames(connection.from_client):
                api_key, version, correlation = struct.unpack_from(">hhi", frame, 4)
                every = api_key == METADATA and names_every_topic(frame)
                connection.asked[correlation] = (api_key, version, every)
                connection.broker.sendall(frame)
        else:
            connection.from_broker += data
            for frame in _frames(connection.from_broker):
                (correlation,) = struct.unpack_from(">i", frame, 4)
                api_key, version, every = connection.asked.pop(correlation, (-1, 0, False))
                answer = self._answer(frame, version, every) if api_key == METADATA else frame
                connection.client.sendall(answer)

    def _answer(self, frame: bytes, version: int, every: bool) -> bytes:
        with self._lock:
            hidden = {topic for topic, hide in self._hidden.items() if hide(every)}
            self.answered += 1
            if hidden:
                self.withheld += 1
        return without_topics(frame, version, hidden, every) if hidden else frame

    def _drop(self, connection: _Connection) -> None:
        for sock in (connection.client, connection.broker):
            if self._connections.pop(sock, None) is not None:
                self._selector.unregister(sock)
            sock.close()


@dataclass(frozen=True)
class Proxied:
    """A tansu broker that clients reach through :attr:`proxy` only."""

    endpoint: KafkaEndpoint
    proxy: MetadataProxy


@contextmanager
def broker_behind_proxy(log_path: Path) -> Iterator[Proxied]:
    """A tansu broker reached through a :class:`MetadataProxy`, which it advertises.

    Yields the proxy's endpoint (what every client is given) and the proxy.
    """
    proxy = MetadataProxy()
    try:
        port = free_port()
        proxy.broker_port = port
        command = tansu.command(f"{LOOPBACK}:{port}")
        # Listen on its own port, advertise the proxy's: clients come back through it.
        advertised = command.index("--advertised-listener-url") + 1
        command[advertised] = f"tcp://{proxy.address}"
        with log_path.open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        with listening(process, port, log_path, kill=True):
            yield Proxied(KafkaEndpoint(proxy.address), proxy)
    finally:
        proxy.close()
