"""A test ends every thread and process it starts; the suite fails loudly on one left running.

A thread or child process that outlives its test runs on into the next ones:
it logs into their captured output (pytest's "--- Logging error ---" after
the stream it wrote to was closed), holds their ports and files, and makes a
good change fail at random. After each test (fixtures of the test's own scope
torn down), every thread and child process that started during it must have
ended; a short grace lets those that are finishing finish.

Spark's own threads (py4j's gateway and callback server) live as long as the
session-scoped SparkSession and start lazily, during whichever test first
needs them: they are the session fixture's, not the test's, and are not
counted. So is the CDK's jsii kernel (a node process and the thread that
drains its stderr), which the first import of ``cdktf`` starts for the rest
of the interpreter's life: in the whole suite a module's import starts it at
collection, run alone the first test that imports infra does. Everything
else is: ours, moto's servers, librdkafka's Python callbacks, subprocesses,
and daemons a subprocess left behind: a process that detaches (forks, and
its parent exits: gpg-agent, anything started with ``&`` by a script) is
adopted by init and is no child of ours any more, but it still carries the
environment variable this module sets, which every process the test process
starts inherits.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixture_processes import FIXTURE_OWNED

__all__ = ["child_processes", "leaked_threads"]

GRACE_S = 5.0
_SESSION_OWNED = ("py4j", "pyspark", "jsii")
_SESSION_PROCESSES = ("jsii-runtime.js",)
# Set in this process's environment, so inherited by every process it starts and theirs.
_MARK_NAME = "TABLECAST_TEST_PROCESS"
os.environ[_MARK_NAME] = str(os.getpid())
_MARK = f"{_MARK_NAME}={os.getpid()}".encode()


def _origin(thread: threading.Thread) -> str:
    target = getattr(thread, "_target", None)
    if target is not None:
        return getattr(target, "__module__", None) or type(target).__module__
    return type(thread).__module__


def leaked_threads(before: set[int]) -> list[threading.Thread]:
    """Threads alive now that were not in ``before`` (idents) and are not Spark's own."""
    return [
        t
        for t in threading.enumerate()
        if t.ident not in before
        and t is not threading.current_thread()
        and not _origin(t).startswith(_SESSION_OWNED)
    ]


def child_processes() -> dict[int, str]:
    """This process's live children, and the daemons its descendants left behind (adopted
    by init, this process's mark in their environment): pid -> command line (from /proc)."""
    me = os.getpid()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # The command name is in parentheses and may hold spaces: fields follow its ")".
            state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
            if state == "Z" or int(ppid) not in (me, 1):
                continue
            if int(ppid) == 1 and _MARK not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue  # ended while we looked
        found[int(entry.name)] = cmdline.strip()[:160]
    return found


def _describe(threads: list[threading.Thread], processes: dict[int, str]) -> str:
    parts = [f"thread {t.name!r} ({_origin(t)})" for t in threads]
    parts += [f"process {pid} ({cmd})" for pid, cmd in sorted(processes.items())]
    return "; ".join(parts)


@pytest.fixture(autouse=True)
def _ends_what_it_starts() -> Iterator[None]:
    threads_before = {t.ident for t in threading.enumerate() if t.ident is not None}
    processes_before = set(child_processes())
    yield
    deadline = time.monotonic() + GRACE_S
    while True:
        threads = leaked_threads(threads_before)
        processes = {
            pid: cmd
            for pid, cmd in child_processes().items()
            if pid not in processes_before
            and pid not in FIXTURE_OWNED
            and not any(marker in cmd for marker in _SESSION_PROCESSES)
        }
        if not threads and not processes:
            return
        if time.monotonic() >= deadline:
            break
        for thread in threads:
            thread.join(0.1)
        time.sleep(0.05)
    pytest.fail(f"left running after the test: {_describe(threads, processes)}", pytrace=False)
