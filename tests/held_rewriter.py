"""A rewriter in a process of its own, held at a point of its steps, frozen there and woken.

The process runs a script that calls ``hold()`` at a hook of the rewriter's
steps: ``hold`` tells the test it is there and waits until the test lets it
go. The test freezes it (SIGSTOP to its process group: the driver, and its
JVM and Python workers if it has them, as a frozen VM would), lets its lease
run out while another rewriter takes the claim over, then lets it go and
wakes the group (SIGCONT). The hold makes the moment of the freeze
deterministic: the process cannot pass the hook before the test lets it go,
which it does only once the other rewriter has finished.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from tests.process_groups import reap_group

# A day after every day the tests' outputs hold: a compaction takes them all.
LATER = date(2100, 1, 1)

# What every held script starts with: its own arguments follow in sys.argv[3:].
PREAMBLE = '''
import pathlib, sys, time

_held, _go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])


def hold():
    """Tell the test this process is at its hold; wait there until it is let go."""
    _held.touch()
    while not _go.exists():
        time.sleep(0.05)
'''


@dataclass
class HeldRewriter:
    process: subprocess.Popen[bytes]
    folder: Path  # its hold's files, and its standard error

    @property
    def stderr(self) -> str:
        return (self.folder / "stderr").read_text(errors="replace")

    def freeze(self, timeout_s: float = 60) -> None:
        """SIGSTOP its process group; returns once every thread of the process is stopped
        (its lease's renewer too: no renewal lands after this)."""
        os.killpg(self.process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + timeout_s
        while not _stopped(self.process.pid):
            assert time.monotonic() < deadline, "the held process did not stop"
            time.sleep(0.05)

    def wake(self, timeout_s: float = 120) -> tuple[int, str]:
        """Let it go and SIGCONT its group; its exit code and standard error once it ends."""
        (self.folder / "go").touch()
        os.killpg(self.process.pid, signal.SIGCONT)
        code = self.process.wait(timeout=timeout_s)
        return code, self.stderr


def _stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped (state ``T``)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        states.append(stat.rpartition(")")[2].split()[0])
    return bool(states) and all(state == "T" for state in states)


@contextmanager
def held_rewriter(
    script: str, *args: str, folder: Path, timeout_s: float = 300
) -> Iterator[HeldRewriter]:
    """``PREAMBLE + script`` in a process group of its own, yielded once it is at its
    hold; the whole group is killed when the block ends (a stopped one too)."""
    folder.mkdir()
    with open(folder / "stderr", "wb") as stderr:  # a pipe nobody reads could fill
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                PREAMBLE + script,
                *(str(folder / n) for n in ("held", "go")),
                *args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            # Not a session of its own: the kernel wakes a stopped orphaned group (one
            # whose leader's parent is outside its session) whenever one of its members exits.
            process_group=0,
        )
    held = HeldRewriter(process, folder)
    try:
        deadline = time.monotonic() + timeout_s
        while not (folder / "held").exists():
            code = process.poll()
            assert code is None, f"ended ({code}) before its hold: {held.stderr[-3000:]}"
            assert time.monotonic() < deadline, f"not at its hold in {timeout_s:g} s"
            time.sleep(0.05)
        yield held
    finally:
        reap_group(process)
        if process.poll() is None:
            process.wait(timeout=20)


def output_files(root: Path) -> dict[str, bytes]:
    """Every file of an output and its bytes, staging included, but the leases (a live or
    woken holder may still renew its own)."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and "leases" not in p.parts
    }


def assert_fenced(code: int, err: str, command: str, output: Path, before: str) -> None:
    """A woken rewriter's end: the ownership-lost exit and one line naming the compaction of
    this process that took its claim over, and the step it stopped ``before``."""
    from app.errors import ExitCode

    assert code == ExitCode.OWNERSHIP_LOST and "Traceback" not in err, err
    [line] = [x for x in err.splitlines() if "took the rewriter claim over" in x]
    assert line.startswith(f"tablecast {command}: output {output}: `tablecast compact` on host "), (
        line
    )
    assert f"(pid {os.getpid()})" in line and f"before {before}" in line, line


def take_over(output: Path, command: str, held: HeldRewriter) -> None:
    """A compaction in this process takes the frozen ``held`` rewriter's claim over once its
    lease has gone unrenewed for its length, and does its work; its notice names the holder."""
    import socket

    from app.sink import rewriter
    from app.storage import resolve
    from app.table import compact as table_compact

    lines: list[str] = []
    claimant = rewriter.Claimant("compact", notice=lines.append)
    report = table_compact.compact(resolve(str(output)), before=LATER, claimant=claimant)
    assert report.groups > 0
    [watched] = lines
    who = f"`tablecast {command}` on host {socket.gethostname()} (pid {held.process.pid})"
    assert who in watched, watched
