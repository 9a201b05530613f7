"""A local filesystem with HDFS's rename, recording what reaches it (a test seam).

HDFS's rename refuses an existing target, unlike a local rename; this
machine has no HDFS, so storage's HDFS path is exercised over this
pyarrow filesystem, which also logs every write, rename and delete so that a
test can tell whether a visible name was ever written in place or removed.
"""

from __future__ import annotations

import posixpath
import threading
from typing import Any

import pyarrow.fs as pafs


class RecordingHandler(pafs.FileSystemHandler):  # type: ignore[misc]
    """Local files underneath; ``hdfs_rename``: a rename onto an existing file fails."""

    def __init__(self, hdfs_rename: bool) -> None:
        self.local = pafs.LocalFileSystem()
        self.hdfs_rename = hdfs_rename
        self._namenode = threading.Lock()
        self.log: list[tuple[str, str]] = []  # (operation, path)

    def get_type_name(self) -> str:
        return "recording"

    def equals(self, other: Any) -> bool:
        return other is self

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return list(self.local.get_file_info(paths))

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return list(self.local.get_file_info(selector))

    def create_dir(self, path: str, recursive: bool) -> None:
        self.local.create_dir(path, recursive=recursive)

    def delete_dir(self, path: str) -> None:
        self.log.append(("delete_dir", path))
        self.local.delete_dir(path)

    def delete_dir_contents(self, path: str, missing_dir_ok: bool = False) -> None:
        self.local.delete_dir_contents(path, missing_dir_ok=missing_dir_ok)

    def delete_root_dir_contents(self) -> None:
        raise OSError("refused: the root")

    def delete_file(self, path: str) -> None:
        self.log.append(("delete", path))
        self.local.delete_file(path)

    def move(self, src: str, dest: str) -> None:
        # The NameNode serialises renames: the check and the rename are one step.
        with self._namenode:
            if self.hdfs_rename and self.local.get_file_info(dest).type != pafs.FileType.NotFound:
                raise OSError(f"rename {src} -> {dest}: destination exists")
            self.log.append(("rename", f"{src} -> {dest}"))
            self.local.move(src, dest)

    def copy_file(self, src: str, dest: str) -> None:
        self.log.append(("copy", f"{src} -> {dest}"))
        self.local.copy_file(src, dest)

    def open_input_stream(self, path: str) -> Any:
        return self.local.open_input_stream(path)

    def open_input_file(self, path: str) -> Any:
        return self.local.open_input_file(path)

    def open_output_stream(self, path: str, metadata: Any) -> Any:
        self.log.append(("write", path))
        return self.local.open_output_stream(path)

    def open_append_stream(self, path: str, metadata: Any) -> Any:
        raise OSError("no appends")

    def written_in_place(self) -> list[str]:
        """Visible names written directly (not under a hidden temporary name)."""
        return [
            p for op, p in self.log if op == "write" and not posixpath.basename(p).startswith(".")
        ]
