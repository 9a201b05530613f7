"""``python -m app.cli.class_archive``: the local JVM's class archive, made (``make setup``).

The job's command line over a small generated capture, in a JVM that writes
the classes it loaded as it exits (:mod:`app.spark.class_archive` says what
the archive is for, how a JVM uses it and why its name changes). Silent when
this JDK's archive is there already, so that every ``make setup`` may ask.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import tempfile
from pathlib import Path

from app.errors import one_line
from app.spark import class_archive

__all__ = ["main", "make"]


def make(archive: Path) -> str:
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
    os.replace(dumped, archive)  # whole or not at all
    # Archives of other JDKs or pins would only fill the disk; a JVM mapping one keeps it.
    for other in archive.parent.glob("spark-classes*.jsa"):
        if other != archive:
            other.unlink(missing_ok=True)
    return f"{archive} ({archive.stat().st_size / 2**20:.0f} MiB)"


def main() -> int:
    archive = class_archive.current()
    if archive is None:
        print(
            "setup: class archive of the local JVM: none: no JDK (JAVA_HOME, or java on the path)"
        )
        return 0
    if archive.is_file():
        return 0
    print("setup: recording the classes a local JVM loads for the job (about 30 s)", flush=True)
    try:
        made = make(archive)
    except Exception as exc:  # no Java, no Spark, a full disk: one line, and setup goes on
        made = f"none: {one_line(exc)}"
    print(f"setup: class archive of the local JVM: {made}", flush=True)
    return 0  # an archive only saves seconds: setup goes on without one


if __name__ == "__main__":
    sys.exit(main())
