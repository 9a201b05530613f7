"""The local JVM's class data sharing archive: Spark's classes mapped at start, not loaded.

A JVM this process launches (the job on one machine, every ``tablecast``
command that starts Spark, the tests) spends most of its first seconds
loading, parsing and verifying tens of thousands of Spark's classes, one
core at a time. A dynamic CDS archive dumped from a JVM that has run the
job holds them ready to map: a session and a small query take 5.6 s with it
against 8.9 s without (docs/design.md, "Measurements").

``make setup`` makes it (``python -m app.cli.class_archive``: the job over
a small generated capture in a JVM started with ``-XX:ArchiveClassesAtExit``,
which writes what it loaded as it exits), in the virtualenv beside the jars
it was made from. A JVM maps only an archive its own JDK dumped, with the
class path it was dumped with, and otherwise starts without a word (the
options turn CDS's warnings off), seconds slower. So the archive's name
carries the JDK it is for and PySpark's version (:func:`current`): after
the JDK is upgraded or ``JAVA_HOME`` names another, or after the pins
change, the name is new, and the next ``make setup`` makes it. The cluster's
JVMs (spark-submit on the image) do not use it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from importlib import metadata
from pathlib import Path

__all__ = ["FOLDER", "current", "java_home", "java_options"]

FOLDER = Path(sys.prefix) / "share" / "tablecast"


def java_home() -> Path | None:
    """The JDK Spark's launcher runs: ``JAVA_HOME``'s, else that of ``java`` on the path."""
    if home := os.environ.get("JAVA_HOME"):
        return Path(home).resolve() if Path(home, "bin", "java").is_file() else None
    java = shutil.which("java")
    return Path(java).resolve().parent.parent if java else None


def current(folder: Path = FOLDER) -> Path | None:
    """The archive for this JDK and this PySpark (None: no JDK found).

    A JDK is told by its folder and its class image (``lib/modules``: size and time,
    which every JDK update rewrites), so that asking costs a ``stat``, not a JVM.
    """
    home = java_home()
    try:
        image = (home / "lib" / "modules").stat() if home else None
    except OSError:
        image = None
    try:
        spark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return None
    if home is None or image is None:
        return None
    key = f"{home}|{image.st_size}|{image.st_mtime_ns}|{spark}"
    return folder / f"spark-classes-{hashlib.sha256(key.encode()).hexdigest()[:12]}.jsa"


def java_options(archive: Path | None = None) -> str:
    """The JVM options that map ``archive`` (by default :func:`current`'s) where it
    exists ("" where it does not)."""
    archive = current() if archive is None else archive
    if archive is None or not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
