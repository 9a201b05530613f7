"""Read Spark's checkpoint (local path or HDFS) through the JVM's Hadoop FS.

The sink needs each micro-batch's end offsets, which Spark writes to
``<checkpoint>/offsets/<batch>`` before the batch runs; the start-up check
and ``repair`` need the last committed batch and the query id. Going through
Hadoop's FileSystem makes ``hdfs://`` work exactly as Spark sees it.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from app.contract import offsets as offsets_mod
from app.contract.offsets import Offsets


class OffsetLog(Protocol):
    """What the sink reads of a checkpoint: each batch's end offsets and the query's id."""

    uri: str

    def offsets(self, batch_id: int) -> Offsets | None: ...

    def query_id(self) -> str | None: ...


class CheckpointLog:
    def __init__(self, spark: Any, uri: str) -> None:
        self.uri = uri.rstrip("/")
        jvm = spark._jvm
        self._jvm = jvm
        self._path_class = jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(self.uri).getFileSystem(spark._jsc.hadoopConfiguration())

    def _path(self, uri: str) -> Any:
        return self._path_class(uri)

    def _read(self, uri: str) -> str | None:
        path = self._path(uri)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def _batches(self, subdir: str) -> list[int]:
        path = self._path(f"{self.uri}/{subdir}")
        if not self._fs.exists(path):
            return []
        names = [str(s.getPath().getName()) for s in self._fs.listStatus(path)]
        return sorted(int(n) for n in names if n.isdigit())

    def exists(self) -> bool:
        return bool(self._fs.exists(self._path(self.uri)))

    def query_id(self) -> str | None:
        text = self._read(f"{self.uri}/metadata")
        return None if text is None else str(orjson.loads(text)["id"])

    def is_fresh(self) -> bool:
        """True when Spark has not planned a single batch here."""
        return not self._batches("offsets")

    def last_planned(self) -> int | None:
        batches = self._batches("offsets")
        return batches[-1] if batches else None

    def last_committed(self) -> int | None:
        batches = self._batches("commits")
        return batches[-1] if batches else None

    def offsets(self, batch_id: int) -> Offsets | None:
        """The end offsets of ``batch_id`` (the single source's line of the log)."""
        text = self._read(f"{self.uri}/offsets/{batch_id}")
        if text is None:
            return None
        lines = [line for line in text.splitlines() if line.strip()]
        # "v1", the batch metadata, then one line per source.
        return offsets_mod.from_json(lines[2])

    def move_aside(self, suffix: str) -> str:
        """Rename the checkpoint out of the way (never delete it); return the new URI."""
        target = f"{self.uri}.{suffix}"
        if not self._fs.rename(self._path(self.uri), self._path(target)):
            raise OSError(f"could not rename checkpoint {self.uri} to {target}")
        return target
