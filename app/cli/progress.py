"""A progress line for the commands that work through many parts (generate, replay)."""

from __future__ import annotations

import sys
import time


class Progress:
    """A progress line on standard error: redrawn on a terminal, a few plain lines otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last < (0.2 if self.tty else 5.0) and done < total:
            return
        self.last = now
        line = f"{self.label}: {done:,}/{total:,} ({100 * done // max(total, 1)}%)"
        print(("\r" + line) if self.tty else line, end="" if self.tty else "\n", file=sys.stderr)

    def finish(self) -> None:
        if self.tty:
            print(file=sys.stderr)
