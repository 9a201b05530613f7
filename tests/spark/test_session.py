"""The session's JVM, as spark_session launches it in local mode."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from app.spark import class_archive
from app.spark.session import (
    LOCAL_JAVA_OPTIONS,
    _alongside,
    _look_up_data_sources,
    local_java_options,
    spark_session,
)


def test_the_local_jvm_runs_with_c1_and_the_serial_collector(spark: Any) -> None:
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert set(LOCAL_JAVA_OPTIONS.split()) <= set(runtime.getInputArguments())


def test_the_local_jvm_maps_the_class_archive_setup_made(spark: Any) -> None:
    """`make setup` made the archive; the session's JVM names it, and a JVM launched the
    same way with sharing required (``-Xshare:on``: no start without it) starts: the
    archive fits this JDK and the job's class path."""
    archive = class_archive.current()
    assert archive is not None and archive.is_file(), (
        "make setup makes it (app/cli/class_archive.py)"
    )
    runtime = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert f"-XX:SharedArchiveFile={archive}" in runtime.getInputArguments()
    # The same launch runs work beside it (imports, in the job), on a thread of its own, done
    # by the time the session is there; and, asked to, Spark's lookup of the installed Python
    # data sources, which no registration made here (Spark keeps its result per JVM).
    script = textwrap.dedent(
        f"""
        import threading, time
        from app.spark.session import spark_session
        beside = []
        def work():
            time.sleep(0.5)
            beside.append(threading.current_thread() is not threading.main_thread())
        spark = spark_session(
            "local[1]",
            {local_java_options() + " -Xshare:on"!r},
            while_launching=work,
            data_sources=True,
        )
        print("beside", beside)
        datasources = spark.sparkContext._jvm.org.apache.spark.sql.execution.datasources
        lookup = getattr(getattr(datasources, "DataSourceManager$"), "MODULE$")
        deadline = time.monotonic() + 60
        while not lookup.dataSourceBuilders().isDefined() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("looked up", lookup.dataSourceBuilders().isDefined())
        print("rows", spark.range(3).count())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "beside [True]\n" in done.stdout
    assert "looked up True\n" in done.stdout


def test_work_beside_a_launch_runs_only_then_and_its_failure_is_only_logged(
    spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []
    assert spark_session(while_launching=lambda: ran.append("no launch")) is spark
    assert ran == []  # the JVM was there: nothing to overlap

    def failing() -> None:
        raise ImportError("no module named 'pyiceberg.catalog.hive'")

    with caplog.at_level(logging.DEBUG, logger="app.spark.session"), _alongside(failing):
        ran.append("block")
    assert ran == ["block"]
    assert "no module named 'pyiceberg.catalog.hive'" in caplog.text

    class Moved:  # a Spark whose lookup of its data sources is no longer where it was
        @property
        def _jvm(self) -> Any:
            raise AttributeError("DataSourceManager")

    with caplog.at_level(logging.DEBUG, logger="app.spark.session"):
        _look_up_data_sources(Moved()).join(timeout=30)
    assert "looking up Spark's Python data sources beside the session: DataSourceManager" in (
        caplog.text
    )


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


def _setup_step(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`make setup`'s class archive step."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli.class_archive"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )


def _archives() -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in class_archive.FOLDER.glob("*.jsa")}


def test_setup_without_a_jvm_says_so_in_one_line_and_goes_on() -> None:
    """The archive only saves seconds: a machine without a JDK gets one line from
    `make setup`'s step, exit 0, and the archives it had stay as they were."""
    before = _archives()
    done = _setup_step({**os.environ, "JAVA_HOME": "/nonexistent"})
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert done.stdout.startswith("setup: class archive of the local JVM: none: "), said
    assert len(done.stdout.splitlines()) == 1 and "Traceback" not in said, said
    assert _archives() == before


def test_the_archive_is_named_for_its_jdk_so_that_another_jdk_gets_its_own(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A JVM passes over an archive another JDK dumped without a word: were the name fixed,
    an upgraded JDK would run without one, seconds slower, until someone deleted it. Named
    for the JDK, an upgrade (its class image rewritten) or another ``JAVA_HOME`` asks for an
    archive not made yet, which the next `make setup` makes; with this JDK's there, the
    step does nothing and says nothing."""
    ours = class_archive.current()
    assert ours is not None and ours.is_file()
    before = _archives()
    done = _setup_step(dict(os.environ))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert _archives() == before

    jdk = tmp_path / "jdk"
    (jdk / "bin").mkdir(parents=True)
    (jdk / "lib").mkdir()
    (jdk / "bin" / "java").write_text("#!/bin/sh\n", encoding="utf-8")
    (jdk / "lib" / "modules").write_bytes(b"17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(jdk))
    other = class_archive.current()
    assert other is not None and other.parent == ours.parent and other != ours
    assert class_archive.java_options() == ""  # none made for it yet: no option
    (jdk / "lib" / "modules").write_bytes(b"17.0.16 upgraded")
    assert class_archive.current() not in (ours, other)


# A Ctrl-C once a JVM of this process's runs the class given (Spark's launcher, which
# spark-class runs in a forked shell before its exec; or the JVM itself, after it): then
# what this process started that is still alive (its children and what init adopted).
_CTRL_C_WHILE_THE_JVM_STARTS = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    from pathlib import Path
    from app.spark.session import spark_session
    from tests.leaks import child_processes

    ours = f"TABLECAST_TEST_PROCESS={os.getpid()}".encode()  # tests.leaks's mark

    def running(main_class):
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\\0")
                if argv[0].endswith(b"java") and main_class.encode() in argv:
                    if ours in (entry / "environ").read_bytes().split(b"\\0"):
                        return True
            except OSError:
                continue
        return False

    def ctrl_c():
        while not running(sys.argv[1]):
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()
    try:
        spark_session("local[1]")
    except KeyboardInterrupt:
        pass
    else:
        raise SystemExit("Spark started before the Ctrl-C")
    print(sorted(child_processes().values()))
    """
)


@pytest.mark.parametrize(
    "main_class", ["org.apache.spark.launcher.Main", "org.apache.spark.deploy.SparkSubmit"]
)
def test_a_ctrl_c_while_the_jvm_starts_leaves_no_jvm_behind(
    main_class: str, tmp_path: Path
) -> None:
    """PySpark removes the folder where the JVM writes its gateway's port when its wait is
    interrupted; the JVM, its gateway's thread started, then failed in its main thread and
    lived on (until killed: it never reached its read of the Python side's end). Killed
    while Spark's launcher still ran, spark-class left the launcher's shell and JVM to init."""
    env = {**os.environ, "TABLECAST_SPARK_LOG": str(tmp_path / "spark.log")}
    done = subprocess.run(
        [sys.executable, "-c", _CTRL_C_WHILE_THE_JVM_STARTS, main_class],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
