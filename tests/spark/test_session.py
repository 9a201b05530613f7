"""The session's JVM, as spark_session launches it in local mode."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from app.spark import class_archive
from app.spark.session import LOCAL_JAVA_OPTIONS, local_java_options


def test_the_local_jvm_runs_with_c1_and_the_serial_collector(spark: Any) -> None:
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert set(LOCAL_JAVA_OPTIONS.split()) <= set(runtime.getInputArguments())


def test_the_local_jvm_maps_the_class_archive_setup_made(spark: Any) -> None:
    """`make setup` made the archive; the session's JVM names it, and a JVM launched the
    same way with sharing required (``-Xshare:on``: no start without it) starts: the
    archive fits this JDK and the job's class path."""
    assert class_archive.ARCHIVE.is_file(), "make setup makes it (app/spark/class_archive.py)"
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert f"-XX:SharedArchiveFile={class_archive.ARCHIVE}" in runtime.getInputArguments()
    script = textwrap.dedent(
        f"""
        from app.spark.session import spark_session
        spark = spark_session("local[1]", {local_java_options() + " -Xshare:on"!r})
        print("rows", spark.range(3).count())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stdout + done.stderr[-2000:]


def test_an_archive_that_is_not_there_or_not_this_jvms_is_passed_over_silently(
    tmp_path: Path,
) -> None:
    """No archive: no option. One another JVM made (here: not an archive at all): the JVM
    starts without it, and nothing of CDS reaches the terminal."""
    assert class_archive.java_options(tmp_path / "absent.jsa") == ""
    foreign = tmp_path / "foreign.jsa"
    foreign.write_bytes(b"not a CDS archive")
    done = subprocess.run(
        ["java", *class_archive.java_options(foreign).split(), "-version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "cds" not in (done.stdout + done.stderr).lower(), done.stderr
    assert "archive" not in (done.stdout + done.stderr).lower(), done.stderr


def test_setup_without_a_jvm_says_so_in_one_line_and_goes_on() -> None:
    """The archive only saves seconds: a machine whose Java does not start gets one line from
    `make setup`'s step, exit 0, and the archive it had stays as it was."""
    env = {**os.environ, "JAVA_HOME": "/nonexistent"}
    before = class_archive.ARCHIVE.stat().st_mtime_ns if class_archive.ARCHIVE.exists() else None
    done = subprocess.run(
        [sys.executable, "-m", "app.cli.class_archive"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert done.stdout.startswith("setup: class archive of the local JVM: none: "), said
    assert len(done.stdout.splitlines()) == 1 and "Traceback" not in said, said
    after = class_archive.ARCHIVE.stat().st_mtime_ns if class_archive.ARCHIVE.exists() else None
    assert after == before
