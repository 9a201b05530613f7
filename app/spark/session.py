"""The SparkSession the job and its tools run in.

Under ``spark-submit`` (the cluster) Spark's launcher has already started
the JVM and set the master; the session only adds the job's settings.
Started from Python (a laptop, the tests, ``make demo``), the JVM is
launched here with its standard output and error going to a log file
(:func:`spark_log_path`), so that a person at a terminal sees tablecast's
lines and nothing of log4j, the JVM or the Python workers; an error names
the file. Against a cluster, the session ships the job's own code to the
executors (:mod:`app.spark.code`). Where the executors' Python can import it,
Spark forks the Python workers from ``tablecast_preload``'s daemon, which has
imported their libraries already (:func:`preload_daemon`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from app.errors import ConfigurationError
from app.spark import class_archive, code

log = logging.getLogger(__name__)

APP_NAME = "tablecast"
LOG_ENV = "TABLECAST_SPARK_LOG"
# Spark's Python daemon with the workers' libraries imported (ami/files/python);
# the image installs it on every node and run-job names it; never part of ``app``.
PRELOAD_MODULE = "tablecast_preload"
DAEMON_MODULE_KEY = "spark.python.daemon.module"
JAVA_OPTIONS_KEY = "spark.driver.extraJavaOptions"
# The JVM this process launches (local mode) lives for one run and, with the
# job's records kept out of it (app.sources.ranges), mostly starts and plans:
# C1 alone compiles what it runs without C2's seconds of optimising, and the
# serial collector runs no threads beside the two cores' work. Measured on the
# heavy bench, JVM start included: 6 to 9 core-seconds less per run, for the
# job, the stateless copy and the idle job alike (docs/design.md).
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_java_options() -> str:
    """The job's JVM options in local mode: :data:`LOCAL_JAVA_OPTIONS`, and the class
    archive ``make setup`` made (:mod:`app.spark.class_archive`) where there is one."""
    return f"{LOCAL_JAVA_OPTIONS} {class_archive.java_options()}".strip()


class _JvmLog:
    path: Path | None = None  # set once this process launched its JVM


def spark_log_path() -> Path | None:
    """Where the JVM of this process writes its log (None under spark-submit)."""
    return _JvmLog.path


def spark_session(
    master: str | None = None,
    java_options: str | None = None,
    notice: Callable[[str], None] | None = None,
    while_launching: Callable[[], None] | None = None,
    data_sources: bool = False,
) -> Any:
    """A SparkSession for the job; under spark-submit the master is already set.

    ``java_options``: the JVM's options where this process launches it in local
    mode (None: :func:`local_java_options`; ``""``: Spark's defaults, as the bench's
    baselines run). ``notice``: a
    line before and after this process launches a JVM (seconds on a laptop).
    ``while_launching``: work with no side effects (imports) that runs on a thread while
    this process launches the JVM, whose start leaves most of a core idle; not run when
    the JVM is already there. It is done (or failed, logged) when the session returns.
    ``data_sources``: this process registers a Python data source (the job's run): Spark's
    lookup of the installed ones starts beside the session's creation
    (:func:`_look_up_data_sources`) where this process launches the JVM.
    """
    # pandas' FutureWarnings from inside PySpark's worker are noise to an operator.
    os.environ.setdefault("PYTHONWARNINGS", "ignore::FutureWarning")
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if under_submit:
        # Connect to spark-submit's JVM first: a SparkConf made before that knows
        # nothing of the master and settings spark-submit was given.
        SparkContext._ensure_initialized()
    conf = SparkConf()
    if not conf.contains("spark.app.name"):
        conf.setAppName(APP_NAME)
    if not conf.contains("spark.master"):
        conf.setMaster(master or "local[2]")
    if conf.get("spark.master", "").startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # one machine, one interpreter
    elif "PYSPARK_PYTHON" not in os.environ:
        # PySpark takes the executors' interpreter from this variable alone (spark-submit
        # sets it from spark.pyspark.python): this machine's path would not exist there.
        raise ConfigurationError(
            f"--master {conf.get('spark.master')}: set PYSPARK_PYTHON to the Python "
            "interpreter of the cluster's workers (on the image: /opt/tablecast/venv/bin/python)"
        )
    conf.set("spark.sql.session.timeZone", "UTC")
    conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    conf.set("spark.ui.showConsoleProgress", "false")
    conf.set("spark.executorEnv.PYTHONWARNINGS", "ignore::FutureWarning")
    if conf.get("spark.master", "").startswith("local"):
        conf.set("spark.ui.enabled", "false")
        if "TABLECAST_DRIVER_MEMORY" in os.environ:  # else Spark's default (1g): enough
            conf.set("spark.driver.memory", os.environ["TABLECAST_DRIVER_MEMORY"])
    preload_daemon(conf)
    launching = SparkContext._active_spark_context is None and not under_submit
    if launching and conf.get("spark.master", "").startswith("local"):
        options = local_java_options() if java_options is None else java_options
        conf.setIfMissing(JAVA_OPTIONS_KEY, options)  # a user's own are kept
    if launching:
        say = notice or (lambda line: None)
        say(f"starting Spark ({conf.get('spark.master')}): its JVM takes a few seconds")
        began = time.monotonic()
        before = signal.getsignal(signal.SIGINT)
        with _alongside(while_launching):
            gateway = _launch_gateway(conf)
        context = SparkContext(conf=conf, gateway=gateway)
        _plain_interrupt(before)
        if data_sources:
            _look_up_data_sources(context)
        say(f"Spark started in {time.monotonic() - began:.1f} s")
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    code.ship(spark)
    return spark


@contextlib.contextmanager
def _alongside(work: Callable[[], None] | None) -> Iterator[None]:
    """Run ``work`` on a thread for the time of the block, then wait for it (not after a
    failure or a Ctrl-C: the thread is a daemon). The block's own imports are done before
    it starts: two threads importing one package's cycle may each see it half made."""
    if work is None:
        yield
        return

    def run() -> None:
        try:
            work()
        except Exception as exc:  # what it prepares is done again where it is needed
            log.debug("work alongside the JVM's launch failed: %s", exc)

    thread = threading.Thread(target=run, name="tablecast-alongside-launch", daemon=True)
    thread.start()
    yield
    thread.join()


def _look_up_data_sources(context: Any) -> threading.Thread:
    """Start Spark's lookup of the installed Python data sources, on a thread.

    Spark looks them up once per JVM, at the first registration of a Python data source:
    a check of the interpreter, then a cold Python process (0.3 to 0.4 s), which the
    registration waits for. Started once the context is up, the lookup runs beside the
    session's creation, the JVM loading SQL's classes on the other core. The lookup is a
    lazy value of Spark's: a registration made meanwhile waits for it, as it would have
    run it. ``DataSourceManager`` is Spark's own class (public in its bytecode, not in
    its API): where a Spark has it no more, the failure is logged at debug level and the
    registration looks them up as before.
    """

    def run() -> None:
        try:
            manager = context._jvm.org.apache.spark.sql.execution.datasources.DataSourceManager()
            manager.dataSourceExists(APP_NAME)  # the lookup, the first time in this JVM
        except Exception as exc:
            log.debug("looking up Spark's Python data sources beside the session: %s", exc)

    thread = threading.Thread(target=run, name="tablecast-data-sources", daemon=True)
    thread.start()
    return thread


def _plain_interrupt(before: Any) -> None:
    """Ctrl-C handled as before the context again (``before``: the command's handler, or
    Python's). PySpark's handler asks the JVM to cancel its jobs from inside the signal, on
    the connection the interrupted call is using: py4j then logs two tracebacks. The
    command's own stop (the query's, the JVM's exit with this process) cancels them
    anyway."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, before if callable(before) else signal.default_int_handler)


def preload_daemon(conf: Any, module: str = PRELOAD_MODULE) -> bool:
    """Name ``module`` as the Python daemon where every worker can import it.

    A daemon module the executors' Python cannot import would fail every task,
    so it is named only in local mode with this very interpreter as the
    workers' and the module importable here. On the image, run-job names it
    (``--conf``) because the image installs it on every node; a setting made
    before (run-job's, a user's) is kept. Returns whether the daemon preloads.
    """
    if conf.contains(DAEMON_MODULE_KEY):
        return bool(conf.get(DAEMON_MODULE_KEY) == module)
    if not conf.get("spark.master", "").startswith("local"):
        return False  # the executors' interpreter is another machine's
    if os.environ.get("PYSPARK_PYTHON") != sys.executable:
        return False
    # find_spec of a submodule imports its package, and raises when there is none.
    if (
        importlib.util.find_spec(module) is None
        or importlib.util.find_spec(f"{module}.__main__") is None
    ):
        return False
    conf.set(DAEMON_MODULE_KEY, module)
    return True


def _launch_gateway(conf: Any) -> Any:
    """Start the JVM with its output in the log file."""
    from pyspark import java_gateway

    path = Path(os.environ.get(LOG_ENV) or _default_log_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.open("ab")
    popen = getattr(java_gateway, _POPEN)
    setattr(java_gateway, _POPEN, _LaunchIgnoringCtrlC)
    try:
        gateway = java_gateway.launch_gateway(  # type: ignore[no-untyped-call]
            conf, popen_kwargs={"stdout": log, "stderr": log}
        )
    except BaseException:
        # Given up (a Ctrl-C as it starts, an error): PySpark removes the folder where the
        # JVM writes its gateway's port, and a JVM that had started its gateway's thread
        # failed in its main thread and lived on, never reaching its read of our end.
        _LaunchIgnoringCtrlC.end_launched()
        raise
    finally:
        setattr(java_gateway, _POPEN, popen)
        _LaunchIgnoringCtrlC.launched = None
        log.close()  # the JVM holds its own descriptors
    _JvmLog.path = path
    return gateway


_POPEN = "Popen"  # the name pyspark.java_gateway.launch_gateway starts the JVM with


class _LaunchIgnoringCtrlC(subprocess.Popen[bytes]):
    """PySpark's launch of the JVM, which ignores SIGINT as PySpark means it to.

    PySpark keeps a terminal's Ctrl-C from the JVM with a ``preexec_fn`` that ignores
    SIGINT in the child. A ``preexec_fn`` makes this process run its at-fork hooks, in
    Python, and a Ctrl-C arriving in one was lost: logging's hook (Python 3.11) took the
    KeyboardInterrupt inside its lock, the interpreter printed "Exception ignored" with a
    traceback, and the run went on. A shell's ``trap`` ignores it instead, and ``exec``
    keeps it ignored in spark-submit and the JVM (same process, same group, so that a
    signal to the group still stops the JVM with this process); the fork runs no Python.
    """

    launched: _LaunchIgnoringCtrlC | None = None  # the JVM being launched (one at a time)

    def __init__(self, args: list[str], **kwargs: Any) -> None:
        kwargs.pop("preexec_fn", None)
        super().__init__(["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh", *args], **kwargs)
        _LaunchIgnoringCtrlC.launched = self

    @classmethod
    def end_launched(cls) -> None:
        """Kill the JVM whose launch was given up (it ignores SIGINT), with everything it
        started, and reap it.

        Before its ``exec`` into the JVM, spark-class runs Spark's launcher (a JVM of its
        own) in a forked shell that feeds it the command line: killing spark-class alone
        left that shell and JVM to init, running on for seconds. Each is stopped before
        any is killed, so that none can start another unseen or be orphaned first.
        """
        process, cls.launched = cls.launched, None
        if process is None or process.poll() is not None:
            return
        stopped: set[int] = set()
        _signal(process.pid, signal.SIGSTOP)
        while found := _descendants(process.pid) - stopped:
            for pid in found:
                _signal(pid, signal.SIGSTOP)
            stopped |= found
        process.kill()
        for pid in stopped:
            _signal(pid, signal.SIGKILL)
        process.wait()
        # Init reaps the others, in its own time: a killed process is gone once a zombie.
        deadline = time.monotonic() + 5.0
        while any(_running(pid) for pid in stopped) and time.monotonic() < deadline:
            time.sleep(0.01)


def _stat(pid: int | str) -> tuple[str, int] | None:
    """A process's state letter and parent (from /proc; None once it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: fields follow its ")".
    state, ppid = stat[stat.rindex(")") + 2 :].split(maxsplit=2)[:2]
    return state, int(ppid)


def _running(pid: int) -> bool:
    found = _stat(pid)
    return found is not None and found[0] != "Z"


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # ended by itself meanwhile
        os.kill(pid, signum)


def _descendants(root: int) -> set[int]:
    """The processes below ``root`` (read from /proc; none where there is no /proc)."""
    children: dict[int, list[int]] = {}
    proc = Path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else ():
        if not entry.name.isdigit():
            continue
        stat = _stat(entry.name)
        if stat is not None:  # None: ended while we looked
            children.setdefault(stat[1], []).append(int(entry.name))
    found: set[int] = set()
    below = children.get(root, [])
    while below:
        pid = below.pop()
        found.add(pid)
        below.extend(children.get(pid, []))
    return found


def _default_log_path() -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%S")
    return Path(tempfile.gettempdir()) / "tablecast" / f"spark-{stamp}-{os.getpid()}.log"
