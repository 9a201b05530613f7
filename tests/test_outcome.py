"""A command's end as the operator sees it: app.cli.outcome."""

from __future__ import annotations

import contextlib
import os
import signal

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
