"""The one place a command's failure becomes one line and its documented exit code.

Our errors print their message; Ctrl-C, a closed pipe (``| head``), AWS's
SDK missing a region or credentials and a refused write each get their own
line; anything else is "unexpected", its innermost cause on the line and its
traceback kept in a file the line names. No traceback reaches a terminal.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

from app import storage
from app.errors import (
    ConfigurationError,
    ExitCode,
    SourceUnavailableError,
    TablecastError,
    one_line,
)

_TRACEBACK = "Traceback (most recent call last):"


def outcome(
    prog: str,
    call: Callable[[], int],
    *,
    report: Callable[[str, TablecastError], None] | None = None,
    traceback_file: Callable[[], Path | None] = lambda: None,
) -> int:
    """``call()``'s exit code; any failure as one line on standard error with its code.

    ``prog``: how the line starts (``tablecast run``). ``report``: prints one of our
    errors (the job's JSON log lines); by default a plain line. ``traceback_file``: where
    an unexpected error's traceback goes (the Spark log this process writes, if any).
    """
    say = report or (lambda prefix, exc: print(f"{prefix}: {exc}", file=sys.stderr))
    interrupted = _Interrupts()
    try:
        with interrupted.recorded():
            code = call()
        sys.stdout.flush()  # a reader gone (`| head`) is found here, not at the exit's flush
        return code
    except TablecastError as exc:
        say(prog, exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        _drop_stdout()
        return ExitCode.CLOSED_PIPE
    except Exception as exc:  # a failure nothing above knows: one line, details kept
        if interrupted.seen:
            # A Ctrl-C whose KeyboardInterrupt a library took for a failure of its own
            # (py4j's, mid-call as Spark starts) is still the operator's Ctrl-C.
            print(f"{prog}: interrupted", file=sys.stderr)
            return ExitCode.INTERRUPTED
        known = _known_failure(exc)
        if known is not None:
            say(prog, known)
            return known.exit_code
        where = _keep_traceback(prog, exc, traceback_file())
        print(f"{prog}: unexpected error {root_cause(exc)} (traceback in {where})", file=sys.stderr)
        return ExitCode.UNEXPECTED


def leave(code: int) -> NoReturn:
    """End this process with ``code`` once its command is done, skipping the interpreter's
    teardown: freeing the 1,300 modules ``tablecast run`` imports cost every run about a
    quarter of a second. Nothing of ours needs it: what we write is closed where it is
    written, and the exit handlers (logging's flush, finalizers) still run first. The JVM
    this process launched ends on its closed standard input, as after a normal exit."""
    atexit._run_exitfuncs()
    atexit._clear()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # as Python's own exit would meet it
        sys.exit(code)
    os._exit(code)


class _Interrupts:
    """Whether SIGINT reached this process while a command ran (main thread only: signal
    handlers are set there). Python's own handler still raises the KeyboardInterrupt."""

    def __init__(self) -> None:
        self.seen = False

    def _record(self, signum: int, frame: object) -> None:
        self.seen = True
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def recorded(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, self._record)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def _known_failure(exc: Exception) -> TablecastError | None:
    """The refusal or the missing setting behind a library's exception, as one of ours."""
    cause = storage.refusal(exc)
    if cause is not None:  # a write our storage layer did not make (the table's catalog)
        return storage.access_error(storage.refused_path(exc), cause)
    return aws_settings_error(exc) or kafka_unanswered(exc)


def kafka_unanswered(exc: BaseException) -> SourceUnavailableError | None:
    """librdkafka finding no broker to ask (an operator tool's admin call, say), as one line."""
    from confluent_kafka import KafkaError, KafkaException

    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(error, KafkaError) or error.code() not in {
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._RESOLVE,
    }:
        return None
    return SourceUnavailableError(f"Kafka's brokers did not answer: {error.str()}")


def aws_settings_error(exc: BaseException) -> ConfigurationError | None:
    """AWS's SDK missing a setting (region, credentials, profile), as one line naming it."""
    from botocore import exceptions as aws

    if isinstance(exc, aws.NoRegionError):
        return ConfigurationError(
            "AWS has no region: give --region, or set AWS_REGION (or a region in the "
            "profile of AWS_PROFILE)"
        )
    if isinstance(exc, aws.ProfileNotFound):
        return ConfigurationError(
            f"AWS profile {exc.kwargs.get('profile', '')!r} is not in the AWS configuration "
            "(~/.aws/config): name another with AWS_PROFILE, or create it"
        )
    if isinstance(exc, aws.PartialCredentialsError | aws.NoCredentialsError):
        return ConfigurationError(
            "AWS has no credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY), or run where an instance role provides them"
        )
    return None


def _drop_stdout() -> None:
    """After a closed pipe: point standard output at nothing, so that Python's own flush
    at exit finds no reader gone and prints nothing more."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real file behind sys.stdout (a test's capture)
        pass
    finally:
        os.close(devnull)


def root_cause(exc: BaseException) -> str:
    """``Name: message`` of the innermost Python exception behind ``exc``, on one line.

    Our own errors come back from Spark's workers typed (:mod:`app.worker_errors`);
    this is for the rest, which Spark hands over as text: the last Python traceback
    in it (the worker's: Spark's wrappers come first) ends, after its indented frames,
    with the exception's own line, as :mod:`traceback` prints it.
    """
    text = str(exc)
    if _TRACEBACK in text:
        for line in text.rpartition(_TRACEBACK)[2].splitlines()[1:]:
            if line and not line[0].isspace():
                name, _, message = line.partition(": ")
                return f"{name.rsplit('.', 1)[-1]}: {message.strip()[:300]}"
    return one_line(exc)


def _keep_traceback(prog: str, exc: BaseException, path: Path | None) -> Path:
    """Append the traceback to ``path`` (or a file of its own); return where."""
    path = path or Path(tempfile.gettempdir()) / "tablecast" / f"error-{os.getpid()}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write(f"\n=== {prog}: unexpected error at {time.strftime('%c')}\n")
        traceback.print_exception(exc, file=out)
    return path
