"""A command's end as the operator sees it: app.cli.outcome."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest

from app.cli.outcome import outcome
from app.errors import ExitCode


def _swallowed_ctrl_c() -> int:
    """A Ctrl-C whose KeyboardInterrupt a library takes for a failure of its own, as py4j's
    connection did mid-call while Spark started (the command then failed later)."""
    with contextlib.suppress(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
    raise RuntimeError("Error while obtaining a new communication channel")


def _plain_failure() -> int:
    raise RuntimeError("Error while obtaining a new communication channel")


def test_a_ctrl_c_a_library_swallowed_still_ends_as_interrupted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = signal.getsignal(signal.SIGINT)
    assert outcome("tablecast run", _swallowed_ctrl_c) == ExitCode.INTERRUPTED
    assert capsys.readouterr().err == "tablecast run: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is before  # the command's handler is gone with it
    # The same failure without a Ctrl-C is what it is: unexpected, one line.
    assert outcome("tablecast run", _plain_failure) == ExitCode.UNEXPECTED
    err = capsys.readouterr().err
    assert err.startswith("tablecast run: unexpected error RuntimeError: Error while obtaining")
    assert err.count("\n") == 1


def test_kafka_brokers_that_do_not_answer_an_admin_call_are_one_line_and_exit_5(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An operator tool's metadata call to brokers nobody listens for (tablecast-ops produce
    did this before it checked anything else) was an unexpected error with a traceback."""
    from confluent_kafka.admin import AdminClient

    from app.local.processes import LOOPBACK, free_port

    admin = AdminClient({"bootstrap.servers": f"{LOOPBACK}:{free_port()}", "log_level": 0})

    def produce() -> int:
        admin.list_topics(timeout=1)
        return 0

    assert outcome("tablecast-ops produce", produce) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert err == (
        "tablecast-ops produce: Kafka's brokers did not answer: Failed to get metadata: "
        "Local: Broker transport failure\n"
    )


def test_leaving_keeps_the_exit_code_what_was_printed_and_the_exit_handlers() -> None:
    # Buffered output on a pipe, a handler registered before and after logging's: all of it
    # reaches the reader, and the code is the command's, with the interpreter's teardown
    # skipped (a finalizer of an object still alive would have printed at teardown).
    script = (
        "import atexit, logging, sys\n"
        "from app.cli.outcome import leave\n"
        "atexit.register(print, 'handler')\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "logging.getLogger('x').warning('logged')\n"
        "class Kept:\n"
        "    def __del__(self): print('torn down')\n"
        "kept = Kept()\n"
        "print('out', end='; ')\n"
        "leave(3)\n"
        "print('not reached')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    expected = (3, "out; handler\n", "WARNING:x:logged\n")
    assert (done.returncode, done.stdout, done.stderr) == expected
