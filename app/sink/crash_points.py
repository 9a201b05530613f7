"""Test seam: where the sink's commit dies on purpose, to reach every step of the protocol.

Random moments rarely hit a given step; a :class:`CrashPoint` does, every
time. It is installed into the commit protocol's step hook
(:func:`app.sink.commit.install_step_hook`) by a test (:func:`crashing`, in
its own process), or, for a test that starts ``tablecast run`` as a process,
by the command line from the environment (:func:`install_from_environment`):
``TABLECAST_CRASH_AFTER_STEP=<step>[.<files>][:<batch>]`` and
``TABLECAST_CRASH_MODE=sigkill|raise|sigstop`` (default ``sigkill``). Nothing in the
protocol reads them; unset, as in production, nothing is installed and the
hook does nothing.

Between two batches, where Spark plans the next one, a :class:`PlanningStop`
(``TABLECAST_CRASH_AFTER_STEP=plan:<n>``, with ``TABLECAST_CRASH_MODE=sigstop``)
stops the driver as its source is about to hand Spark the end of this run's
``n``-th trigger, before the source's fence check (:mod:`app.spark.planning`,
which carries it to the source in Spark's planner process).
"""

from __future__ import annotations

import enum
import logging
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app.errors import ConfigurationError
from app.sink.commit import COUNTED_STEPS, LAST_STEP, install_step_hook

log = logging.getLogger(__name__)

CRASH_ENV = "TABLECAST_CRASH_AFTER_STEP"
CRASH_MODE_ENV = "TABLECAST_CRASH_MODE"
PLANNING = "plan:"  # TABLECAST_CRASH_AFTER_STEP=plan:<trigger>: a PlanningStop


class CrashMode(enum.Enum):
    """How the sink dies at its crash point."""

    SIGKILL = "sigkill"
    """The driver's process, as a power cut or the OOM killer would: the real thing."""
    RAISE = "raise"
    """:class:`SimulatedCrash` out of ``foreachBatch``: the query fails with nothing
    cleaned up (the sink has no cleanup on any error), and a test resumes in the
    same process and SparkSession, without paying a JVM's start-up per case."""
    SIGSTOP = "sigstop"
    """The driver stops itself there with its process group (its JVM and Python
    workers), as a frozen VM would: a test starts another writer meanwhile, then
    wakes the group with SIGCONT. The whole group, because the kernel wakes a
    stopped process whose orphaned group loses a member (a Python worker that
    ends), and a frozen machine runs none of them."""


class SimulatedCrash(Exception):
    """Raised at a :class:`CrashPoint` whose mode is :attr:`CrashMode.RAISE`."""


@dataclass(frozen=True)
class CrashPoint:
    """Where the sink dies: right after ``step`` of batch ``batch`` (None: any).

    ``files`` (steps 6, 9 and 12) dies inside the step, after that many files
    were published (6) or deleted (9: the table's unreferenced files; 12: folded
    ledger entries).
    """

    step: int
    batch: int | None = None
    mode: CrashMode = CrashMode.SIGKILL
    files: int | None = None  # inside step 6, 9 or 12: after this many files

    @classmethod
    def from_environment(cls) -> CrashPoint | None:
        text = os.environ.get(CRASH_ENV, "").strip()
        if not text or text.startswith(PLANNING):
            return None
        match = re.fullmatch(r"(\d+)(?:\.(\d+))?(?::(\d+))?", text)
        if (
            match is None
            or not 1 <= int(match.group(1)) <= LAST_STEP
            or (match.group(2) is not None and int(match.group(1)) not in COUNTED_STEPS)
        ):
            counted = ", ".join(map(str, COUNTED_STEPS))
            raise ConfigurationError(
                f"{CRASH_ENV}={text!r} must be <step>[.<files>][:<batch>] with a step from 1 "
                f"to {LAST_STEP} (.<files> for steps {counted} only)"
            )
        files, batch = match.group(2), match.group(3)
        return cls(
            step=int(match.group(1)),
            batch=None if batch is None else int(batch),
            mode=_mode_from_environment(),
            files=None if files is None else int(files),
        )

    def reached(self, step: int, batch_id: int, files: int | None = None) -> bool:
        return step == self.step and self.batch in (None, batch_id) and files == self.files

    def __call__(self, step: int, batch_id: int, files: int | None = None) -> None:
        """The step hook: die like a SIGKILL of the job, without any cleanup, if reached."""
        if not self.reached(step, batch_id, files):
            return
        where = f"{step}" if files is None else f"{step}.{files}"
        if self.mode is CrashMode.RAISE:
            raise SimulatedCrash(f"{CRASH_ENV}: crashed after step {where} of batch {batch_id}")
        if self.mode is CrashMode.SIGSTOP:
            log.warning(
                "%s: stopping the driver after step %s of batch %d", CRASH_ENV, where, batch_id
            )
            _stop_until_continued()
            return
        log.warning("%s: killing the driver after step %s of batch %d", CRASH_ENV, where, batch_id)
        os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True)
class PlanningStop:
    """Where the driver stops between two batches: as its source is about to hand Spark
    the end of this run's ``trigger``-th trigger (from 1), which Spark then records in the
    checkpoint's offset log, before the source checks its fence. Spark has recorded the
    batch before in the checkpoint's commit log by then."""

    trigger: int

    @classmethod
    def from_environment(cls) -> PlanningStop | None:
        text = os.environ.get(CRASH_ENV, "").strip()
        if not text.startswith(PLANNING):
            return None
        number = text.removeprefix(PLANNING)
        if not number.isdigit() or int(number) < 1:
            raise ConfigurationError(
                f"{CRASH_ENV}={text!r} must be {PLANNING}<trigger> with a trigger from 1"
            )
        if _mode_from_environment() is not CrashMode.SIGSTOP:
            raise ConfigurationError(
                f"{CRASH_ENV}={text!r} stops the driver: it needs "
                f"{CRASH_MODE_ENV}={CrashMode.SIGSTOP.value}"
            )
        return cls(int(number))

    def __call__(self, trigger: int) -> None:
        """Stop the driver's process group (the planner is one of it) if ``trigger`` is the one."""
        if trigger != self.trigger:
            return
        log.warning("%s: stopping the driver as Spark plans trigger %d", CRASH_ENV, trigger)
        _stop_until_continued()


def _mode_from_environment() -> CrashMode:
    mode_text = os.environ.get(CRASH_MODE_ENV, CrashMode.SIGKILL.value).strip()
    try:
        return CrashMode(mode_text)
    except ValueError:
        known = "|".join(m.value for m in CrashMode)
        raise ConfigurationError(f"{CRASH_MODE_ENV}={mode_text!r} must be {known}") from None


def _stop_until_continued() -> None:
    """Stop this process group until a SIGCONT, as a frozen machine would be.

    The stop takes effect as the group's threads are scheduled, which on a
    loaded machine may be a while after ``killpg`` returns: meanwhile this
    thread only sleeps, in short naps, until one of them lasts far longer
    than asked (it was stopped, then continued). Nothing of the batch runs
    between the stop being sent and the SIGCONT.
    """
    last = time.monotonic()
    os.killpg(os.getpgrp(), signal.SIGSTOP)
    while True:
        time.sleep(_NAP_S)
        now = time.monotonic()
        if now - last > STOPPED_S:
            return
        last = now


_NAP_S = 0.05
STOPPED_S = 2.0  # a test wakes a stopped driver after seconds, a nap never lasts this long


@contextmanager
def crashing(point: CrashPoint) -> Iterator[CrashPoint]:
    """Sinks made inside the block die at ``point``; none made after it do."""
    install_step_hook(point)
    try:
        yield point
    finally:
        install_step_hook(None)


def install_from_environment() -> None:
    """``tablecast run`` dies where :data:`CRASH_ENV` says, or nowhere when it is unset."""
    install_step_hook(CrashPoint.from_environment())
