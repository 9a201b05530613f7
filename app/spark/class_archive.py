"""The local JVM's class data sharing archive: Spark's classes mapped at start, not loaded.

A JVM this process launches (the job on one machine, every ``tablecast``
command that starts Spark, the tests) spends most of its first seconds
loading, parsing and verifying tens of thousands of Spark's classes, one
core at a time. A dynamic CDS archive dumped from a JVM that has run the
job holds them ready to map: a session and a small query take 5.6 s with it
against 8.9 s without (docs/design.md, "Measurements").

``make setup`` makes it (``python -m app.cli.class_archive``: the job over
a small generated capture in a JVM started with ``-XX:ArchiveClassesAtExit``,
which writes what it loaded as it exits), in the virtualenv beside the jars it was made
from, and again whenever the pins change. A JVM whose JDK or class path are
not the archive's ignores it and starts as it would without: the options
turn CDS's warnings off, so a stale archive costs seconds, never a line on
the terminal. The cluster's JVMs (spark-submit on the image) do not use it.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["ARCHIVE", "java_options"]

ARCHIVE = Path(sys.prefix) / "share" / "tablecast" / "spark-classes.jsa"


def java_options(archive: Path = ARCHIVE) -> str:
    """The JVM options that map ``archive`` where it exists ("" where it does not)."""
    if not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"
