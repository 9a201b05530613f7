"""The local JVM's class data sharing archive: Spark's classes mapped at start, not loaded.

A JVM this process launches (the job on one machine, every ``tablecast``
command that starts Spark, the tests) spends most of its first seconds
loading, parsing and verifying tens of thousands of Spark's classes, one
core at a time. A dynamic CDS archive dumped from a JVM that has run the
job holds them ready to map: a session and a small query take 5.6 s with it
against 8.9 s without (docs/design.md, "Measurements").

``make setup`` makes it (``python -m app.spark.class_archive``: the job over
a small generated capture in a JVM started with ``-XX:ArchiveClassesAtExit``,
which writes what it loaded as it exits), in the virtualenv beside the jars it was made
from, and again whenever the pins change. A JVM whose JDK or class path are
not the archive's ignores it and starts as it would without: the options
turn CDS's warnings off, so a stale archive costs seconds, never a line on
the terminal. The cluster's JVMs (spark-submit on the image) do not use it.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

__all__ = ["ARCHIVE", "java_options", "main"]

ARCHIVE = Path(sys.prefix) / "share" / "tablecast" / "spark-classes.jsa"


def java_options(archive: Path = ARCHIVE) -> str:
    """The JVM options that map ``archive`` where it exists ("" where it does not)."""
    if not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off"


def make(archive: Path = ARCHIVE) -> str:
    """Dump ``archive`` from a JVM that ran the job over a small capture; what happened."""
    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    from app.cli import main as cli_main
    from app.spark.session import LOCAL_JAVA_OPTIONS, spark_session
    from app.tools import generate as gen

    archive.parent.mkdir(parents=True, exist_ok=True)
    dumped = archive.with_name(f".{archive.name}.{os.getpid()}")
    with tempfile.TemporaryDirectory(prefix="tablecast-classes-") as work:
        spec = gen.CaptureSpec(topics=1, partitions=2, sessions=4, updates=20)
        gen.write_archive(gen.generate(spec), f"{work}/archive", spec)
        spark = spark_session("local[2]", f"{LOCAL_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={dumped}")
        argv = ["run", "--archive", f"{work}/archive", "--output", f"{work}/out"]
        argv += ["--checkpoint", f"{work}/checkpoint", "--trigger", "available-now"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            ran = cli_main(argv)
        gateway = SparkContext._gateway
        assert gateway is not None  # the session above launched it
        spark.stop()  # its accumulator server too, which would see the JVM's end as an error
        # The archive is written as the JVM exits: through System.exit, which PySpark's own
        # end (a kill) would skip; the gateway's connection drops with it.
        with contextlib.suppress(Py4JError, OSError):
            gateway.jvm.java.lang.System.exit(0)
        gateway.proc.wait(timeout=300)
    if ran != 0 or not dumped.is_file():
        dumped.unlink(missing_ok=True)
        return f"none: the JVM that ran the job (exit {ran}) wrote no archive"
    os.replace(dumped, archive)  # whole or not at all: a JVM may be mapping the old one
    return f"{archive} ({archive.stat().st_size / 2**20:.0f} MiB)"


def main() -> int:
    print(f"setup: class archive of the local JVM: {make()}", flush=True)
    return 0  # an archive only saves seconds: setup goes on without one


if __name__ == "__main__":
    sys.exit(main())
