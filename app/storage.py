"""Local paths and ``s3://bucket/prefix`` URIs behind one small interface.

The archive, the output and the output's ledger are read and written with
pyarrow's filesystems, on the driver and in Spark tasks alike, so the same
code serves a laptop and the cluster's bucket. ``TABLECAST_S3_ENDPOINT``
(or ``AWS_ENDPOINT_URL``) points S3 at another endpoint, as tests do with
moto's server.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from app.errors import ConfigurationError, StorageAccessError, TablecastError, one_line

# The machine's or the store's refusals: nothing is wrong with the data, something is
# wrong with where it goes. Run again once it is fixed.
_REFUSED_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS})
# The same refusals as text: pyarrow's S3 client, SQLite (the local catalog), and an
# error that crossed from another process as its message only.
_REFUSED_TEXT = (
    ("ACCESS_DENIED", "access denied"),
    ("AccessDenied", "access denied"),
    ("No space left on device", os.strerror(errno.ENOSPC)),
    ("database or disk is full", os.strerror(errno.ENOSPC)),
    ("Disk quota exceeded", os.strerror(errno.EDQUOT)),
    ("Read-only file system", os.strerror(errno.EROFS)),
    ("readonly database", os.strerror(errno.EROFS)),
    ("Permission denied", os.strerror(errno.EACCES)),
)


def refusal(exc: BaseException) -> str | None:
    """Why the storage refused an operation (a full disk, a denied write, a read-only
    filesystem, S3's AccessDenied), or None when ``exc`` is some other failure."""
    if isinstance(exc, OSError) and exc.errno in _REFUSED_ERRNOS:
        return os.strerror(exc.errno)
    text = str(exc)
    return next((cause for marker, cause in _REFUSED_TEXT if marker in text), None)


def refused_path(exc: BaseException) -> str:
    """The path a refusal's message names (pyarrow and SQLite quote it), or ""."""
    found = re.search(r"'([^']*/[^']*)'", str(exc))
    if found is not None:
        return found.group(1)
    return str(getattr(exc, "filename", "") or "")


def access_error(path: str, cause: str, doing: str = "write") -> StorageAccessError:
    """The one line for a refused read or write of ``path``."""
    return StorageAccessError(
        f"cannot {doing} {path or 'the output'}: {cause}; nothing committed is lost: free "
        "space or grant access there, then run the command again",
        path=path,
        cause=cause,
    )


@dataclass(frozen=True, slots=True)
class Location:
    """A directory on some filesystem: ``fs`` plus a path without scheme."""

    uri: str
    fs: pafs.FileSystem
    path: str
    is_local: bool
    atomic_rename: bool = False  # renames are atomic but refuse an existing target (HDFS)

    def child(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)

    def shown(self, path: str) -> str:
        """``path`` (of this filesystem) as a URI an operator can use: ``s3://...`` on S3."""
        scheme = self.uri[: len(self.uri) - len(self.path)] if self.uri.endswith(self.path) else ""
        return scheme + path

    @contextlib.contextmanager
    def refusing(self, path: str, doing: str = "write") -> Iterator[None]:
        """Around an operation on ``path``: a refusal by the storage becomes a
        :class:`StorageAccessError` naming the path and the cause (in a Spark worker too:
        it reaches the driver as itself, :mod:`app.worker_errors`)."""
        try:
            yield
        except TablecastError:
            raise
        except Exception as exc:  # OSError, or a library's own (SQLite's, boto3's)
            cause = refusal(exc)
            if cause is None:
                raise
            raise access_error(self.shown(path), cause, doing) from None

    def list_dir(self, path: str) -> list[pafs.FileInfo]:
        """The entries directly under ``path``; empty when it does not exist."""
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=False)
        return list(self.fs.get_file_info(selector))

    def list_tree(self, path: str) -> list[pafs.FileInfo]:
        selector = pafs.FileSelector(path, allow_not_found=True, recursive=True)
        return [i for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.File]

    def exists(self, path: str) -> bool:
        return bool(self.fs.get_file_info(path).type != pafs.FileType.NotFound)

    def read_bytes(self, path: str) -> bytes:
        with self.refusing(path, "read"), self.fs.open_input_stream(path) as stream:
            return bytes(stream.readall())

    def write_bytes_atomic(self, path: str, data: bytes) -> None:
        """Write a whole file so that readers never see it partly written."""
        self.write_whole(path, lambda out: out.write(data))

    def write_whole(self, path: str, write: Callable[[pa.NativeFile], object]) -> None:
        """Write ``path`` whole with ``write``: readers see no file or the whole file.

        S3: one upload, visible only when it completes. Local and HDFS: a
        hidden temporary name in the same directory, then a rename
        (:meth:`_put`).
        """
        with self.refusing(path):
            self._write_whole(path, write)

    def _write_whole(self, path: str, write: Callable[[pa.NativeFile], object]) -> None:
        self.fs.create_dir(posixpath.dirname(path), recursive=True)
        if not self.is_local and not self.atomic_rename:
            with self.fs.open_output_stream(path) as out:
                write(out)
            return
        temp = _temporary(path)
        try:
            with self.fs.open_output_stream(temp) as out:
                write(out)
            self._put(temp, path)
        finally:
            if self.exists(temp):
                self.fs.delete_file(temp)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Write ``path`` whole if no file is there; False, writing nothing, if one is.

        Two writers racing for one name: exactly one gets True, on every
        storage. Local disk: a hidden temporary file, then ``link`` to the name
        (which fails when the name exists; ``rename`` would replace it). HDFS:
        a hidden temporary file, then a rename, which HDFS refuses over an
        existing name. S3: one ``PutObject`` with ``If-None-Match: *``, which
        S3 refuses (412, or 409 to the loser of two concurrent requests) when
        the key exists; pyarrow's filesystem cannot send the header, so boto3
        does.
        """
        with self.refusing(path):
            return self._create_exclusive(path, data)

    def _create_exclusive(self, path: str, data: bytes) -> bool:
        if not self.is_local and not self.atomic_rename:
            return _s3_put_if_absent(path, data)  # an S3 path is bucket/key
        self.fs.create_dir(posixpath.dirname(path), recursive=True)
        temp = _temporary(path)
        with self.fs.open_output_stream(temp) as out:
            out.write(data)
        try:
            if self.is_local:
                try:
                    os.link(temp, path)
                except FileExistsError:
                    return False
                return True
            try:
                self.fs.move(temp, path)
            except OSError:
                if self.exists(path):
                    return False
                raise
            return True
        finally:
            if self.exists(temp):
                self.fs.delete_file(temp)

    def move(self, source: str, target: str) -> None:
        """Publish ``source`` under ``target``; a file already there is never replaced by
        different bytes while readers may read it.

        Local: ``rename``, atomic. HDFS: see :meth:`_put`. S3: copy, then
        delete the source; an object already under ``target`` is kept as it
        is (a crashed attempt published it: names are never reused for other
        content, and a copy over it would race readers that read its footer
        and then its pages, apache/arrow#41310).
        """
        with self.refusing(target):
            self.fs.create_dir(posixpath.dirname(target), recursive=True)
            if self.is_local or self.atomic_rename:
                self._put(source, target)
            else:
                if not self.exists(target):
                    self.fs.copy_file(source, target)
                self.fs.delete_file(source)

    def _put(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target`` without ``target`` ever missing.

        A local rename replaces its target atomically. HDFS's refuses an
        existing target: a name is only written again with the same bytes (a
        redone batch, a retried or speculative task), so the file in place is
        kept and the new copy dropped. Different bytes (a damaged file written
        again) move the old file aside first: then, and only then, the name is
        missing between two renames.
        """
        if self.is_local:
            os.replace(source, target)
            return
        try:
            self.fs.move(source, target)
            return
        except OSError:
            if not self.exists(target):
                raise
        if self.same_bytes(source, target):
            self.fs.delete_file(source)
            return
        aside = _temporary(target)
        self.fs.move(target, aside)
        self.fs.move(source, target)
        self.fs.delete_file(aside)

    def same_bytes(self, one: str, other: str) -> bool:
        """Whether two files hold the same bytes (sizes first)."""
        if self.fs.get_file_info(one).size != self.fs.get_file_info(other).size:
            return False
        return self.read_bytes(one) == self.read_bytes(other)

    def delete_file(self, path: str) -> None:
        with self.refusing(path, "delete"):
            if self.exists(path):
                self.fs.delete_file(path)

    def delete_dir(self, path: str) -> None:
        with self.refusing(path, "delete"):
            if self.exists(path):
                self.fs.delete_dir(path)


def _temporary(path: str) -> str:
    """A hidden name beside ``path`` (readers skip names starting with ``.``)."""
    parent, name = posixpath.split(path)
    return posixpath.join(parent, f".{name}.{uuid.uuid4().hex}.tmp")


# How long a conditional PutObject that S3 answers 409 (another conditional write of the
# key in flight) is tried again, doubling from the first pause: S3's advice is to retry.
_CONFLICT_PAUSES_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


def _s3_put_if_absent(path: str, data: bytes) -> bool:
    """``PutObject`` of ``bucket/key`` with ``If-None-Match: *``: False if the key holds
    other bytes.

    The SDK retries a request whose answer it did not get (a cut connection, a
    timeout), and S3 may have done the first: the retry then finds the key taken
    (412), or, while the first is still in flight, conflicting (409). So a 409
    is tried again until S3 settles it, and a taken key holding exactly ``data``
    is this call's own create: what this storage creates this way (claims,
    ledger entries) names its writer and the time, so no other writer's bytes
    are the same. Taken for lost, it refused a writer's own claim, or stopped a
    job at its own ledger entry as if another writer had taken the output.
    """
    from botocore.exceptions import ClientError

    bucket, _, key = path.partition("/")
    client = _s3_client()
    pauses = iter(_CONFLICT_PAUSES_S)
    while True:
        try:
            client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code == "PreconditionFailed" or status == 412:
                return _holds(client, bucket, key, data)
            if code != "ConditionalRequestConflict" and status != 409:
                raise
        pause = next(pauses, None)
        if pause is None:  # still in flight: another writer's, as far as this one knows
            return False
        time.sleep(pause)


def _holds(client: Any, bucket: str, key: str, data: bytes) -> bool:
    """Whether ``bucket/key`` holds exactly ``data`` (False if it is gone again)."""
    from botocore.exceptions import ClientError

    try:
        found = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code", "") in ("NoSuchKey", "404"):
            return False
        raise
    return bool(found == data)


_s3_clients: dict[tuple[str | None, str], Any] = {}


def _s3_client() -> Any:
    """A boto3 S3 client for the same endpoint and region as :func:`resolve`'s filesystem."""
    import boto3

    endpoint, region = _s3_endpoint()
    key = (endpoint, region)
    if key not in _s3_clients:
        _s3_clients[key] = boto3.client("s3", endpoint_url=endpoint, region_name=region)
    return _s3_clients[key]


def _s3_endpoint() -> tuple[str | None, str]:
    endpoint = os.environ.get("TABLECAST_S3_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return endpoint or None, region or "us-east-1"


# The schemes a path option may take, as the refusal spells them.
LOCAL, S3, HDFS = "local", "s3", "hdfs"
_SPELLED = {LOCAL: "a local path", S3: "s3://bucket/prefix", HDFS: "hdfs://namenode/path"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):/")


def require_scheme(option: str, uri: str, schemes: tuple[str, ...]) -> str:
    """``uri`` if it is a local path or URI of one of ``schemes`` (:data:`LOCAL`,
    :data:`S3`, :data:`HDFS`); else one line naming the option and what it takes.

    Checked before anything runs: an unknown scheme would otherwise be a local
    directory named ``s4:`` (pyarrow), or an error from deep inside Spark.
    """
    takes = " or ".join(_SPELLED[s] for s in schemes)
    if not uri.strip():
        raise ConfigurationError(f"{option} is empty: give {takes}")
    found = _SCHEME.match(uri)
    scheme = found.group(1).lower() if found else LOCAL
    if {LOCAL: LOCAL, "file": LOCAL, "s3": S3, "s3a": S3, "hdfs": HDFS}.get(scheme) not in schemes:
        raise ConfigurationError(
            f"{option} {uri!r}: give {takes}; {scheme}:// is not supported there"
        )
    return uri


def resolve(uri: str) -> Location:
    """The :class:`Location` of a local path, ``file://``, ``s3://`` or ``hdfs://`` URI."""
    if uri.startswith("hdfs://"):
        return _hdfs(uri)
    if uri.startswith("s3://") or uri.startswith("s3a://"):
        rest = uri.split("://", 1)[1].rstrip("/")
        endpoint, region = _s3_endpoint()
        fs = pafs.S3FileSystem(
            endpoint_override=endpoint,
            region=region,
            scheme="http" if endpoint and endpoint.startswith("http://") else "https",
            allow_bucket_creation=False,
        )
        return Location(f"s3://{rest}", fs, rest, is_local=False)
    path = uri[len("file://") :] if uri.startswith("file://") else uri
    path = os.path.abspath(path)
    return Location(path, pafs.LocalFileSystem(), path, is_local=True)


def _hdfs(uri: str) -> Location:
    """HDFS through libhdfs (the checkpoint's state files on the cluster).

    pyarrow loads ``libhdfs.so`` from ``ARROW_LIBHDFS_DIR`` and needs the
    Hadoop jars on ``CLASSPATH``; the image's ``spark-env.sh`` sets both for
    the driver and the executors.
    """
    from urllib.parse import urlparse

    parts = urlparse(uri)
    try:
        fs = pafs.HadoopFileSystem(parts.hostname or "default", parts.port or 8020)
    except OSError as exc:
        raise ConfigurationError(
            f"cannot open {uri}: HDFS needs libhdfs (ARROW_LIBHDFS_DIR) and Hadoop's jars on "
            f"CLASSPATH: {one_line(exc)}"
        ) from None
    path = parts.path.rstrip("/") or "/"
    return Location(f"hdfs://{parts.netloc}{path}", fs, path, is_local=False, atomic_rename=True)
