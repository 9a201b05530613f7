"""Live progress of ``tablecast run``: what an operator watches on a terminal.

On a terminal one status line (batches, messages per second, records behind
the readable ends and the high watermarks,
sessions in state; for a job reading Kafka and the archive, the records each
served) is redrawn in place after every micro-batch, and other
lines (trace lines, log-sink lines) are printed above it. Anywhere else
(a pipe, a log file, a service's journal) every batch gets one plain line.
Either way a summary closes the run.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from app.metrics.listener import BatchMetrics, SourceLag
from app.metrics.publisher import PublishStats
from app.sink.commit import BatchReport

__all__ = ["Console", "ProgressDisplay", "RunTotals"]

_CLEAR_LINE = "\r\x1b[K"


class Console:
    """Permanent lines, plus one status line redrawn in place on a terminal."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() if tty is None else tty
        self._status = ""
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        """A line that stays (printed above the status line on a terminal)."""
        with self._lock:
            if self.tty and self._status:
                self.stream.write(f"{_CLEAR_LINE}{text}\n{self._status}")
            else:
                self.stream.write(f"{text}\n")
            self.stream.flush()

    def status(self, text: str) -> None:
        """Redraw the status line on a terminal; elsewhere it is not shown."""
        if not self.tty:
            return
        width = max(20, shutil.get_terminal_size((120, 24)).columns - 1)
        with self._lock:
            self._status = text[:width]
            self.stream.write(f"{_CLEAR_LINE}{self._status}")
            self.stream.flush()

    def end_status(self) -> None:
        """Leave the last status line on screen and move below it."""
        with self._lock:
            if self.tty and self._status:
                self.stream.write("\n")
                self.stream.flush()
            self._status = ""


@dataclass
class RunTotals:
    """Sums over the batches of one run."""

    batches: int = 0
    messages: int = 0
    rows: int = 0
    files: int = 0
    bytes: int = 0
    quarantined: int = 0
    violations: int = 0
    dropped: int = 0
    missing: int = 0
    sessions: int = 0  # in state after the last batch
    lag: SourceLag | None = None  # after the last batch
    served: dict[str, int] = field(default_factory=dict)  # records per source tier

    def add(self, m: BatchMetrics) -> None:
        self.batches += 1
        self.messages += m.input_messages
        self.rows += m.rows_written
        self.files += m.output_files
        self.bytes += m.output_bytes
        self.quarantined += m.quarantined
        self.violations += m.violations
        self.dropped += m.dropped
        self.missing += m.missing
        self.sessions = m.sessions_in_state
        self.lag = m.lag
        for tier, count in m.served.items():
            self.served[tier] = self.served.get(tier, 0) + count


class ProgressDisplay:
    """Observer of the metrics listener (and of the sink's reports, for trace lines)."""

    def __init__(
        self,
        console: Console,
        clock: Callable[[], float] = time.monotonic,
        *,
        to_the_end: bool = False,
    ) -> None:
        """``to_the_end``: the run stops once caught up (available-now), so each batch also
        says how much of the way is done and about how long the rest takes."""
        self.console = console
        self.clock = clock
        self.started = clock()
        self.totals = RunTotals()
        self.to_the_end = to_the_end
        self._lock = threading.Lock()

    def on_report(self, report: BatchReport) -> None:
        """``--trace``: every message of a traced session, as the job applied it; and, class
        once, where sessions ended or timed out with seqs missing (a sample)."""
        for line in report.trace:
            self.console.line(f"trace {line}")
        for line in report.gaps:
            self.console.line(f"gap {line}")

    def on_metrics(self, metrics: BatchMetrics) -> None:
        with self._lock:
            self.totals.add(metrics)
            elapsed = self.clock() - self.started
            way = remaining(self.totals, elapsed) if self.to_the_end else ""
            if self.console.tty:
                self.console.status(
                    " | ".join(filter(None, (status_line(self.totals, elapsed), way)))
                )
            else:
                self.console.line(", ".join(filter(None, (batch_line(metrics), way))))

    def finish(self, sink: str, stats: PublishStats, *, finished: bool = True) -> None:
        """End the status line and print the run's summary (``finished``: no failure). A run
        that failed before its first batch has nothing to sum up: its error says it all."""
        self.console.end_status()
        if not finished and not self.totals.batches:
            return
        elapsed = self.clock() - self.started
        for line in summary_lines(self.totals, elapsed, sink, stats, finished=finished):
            self.console.line(line)


def remaining(totals: RunTotals, elapsed_s: float) -> str:
    """How much of a run to the end is done, and about how long the rest takes at this
    run's rate: ``62% read, about 40 s left`` (empty while the lag is unknown)."""
    if totals.lag is None:
        return ""
    behind = totals.lag.readable.total
    done = 100 * totals.messages // max(1, totals.messages + behind)
    if not behind:
        return "100% read"
    rate = totals.messages / elapsed_s if elapsed_s > 0 else 0.0
    left = f"about {_duration(behind / rate)} left" if rate > 0 else "time left unknown"
    return f"{done}% read, {left}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 5400:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def batch_line(m: BatchMetrics) -> str:
    """One plain line per batch, for logs."""
    parts = [
        f"batch {m.batch_id}: {m.input_messages:,} messages ({m.messages_per_second:,.0f}/s"
        + (f", {_served(m.served)})" if m.served else ")"),
        f"{m.rows_written:,} rows in {m.output_files} files",
        f"behind {_lag(m.lag)}",
        f"{m.sessions_in_state:,} sessions in state",
    ]
    if m.quarantined:
        parts.append(f"{m.quarantined:,} quarantined")
    if m.violations:
        parts.append(f"{m.violations:,} violations")
    if m.dropped:
        parts.append(f"{m.dropped:,} dropped")
    if m.missing:
        parts.append(f"{m.missing:,} seqs missing")
    line = ", ".join(parts)
    return line if m.published else f"{line} (already published)"


def status_line(totals: RunTotals, elapsed_s: float) -> str:
    """The redrawn line on a terminal."""
    rate = totals.messages / elapsed_s if elapsed_s > 0 else 0.0
    parts = [
        f"batches {totals.batches:,}",
        f"{totals.messages:,} messages ({rate:,.0f}/s)",
        *([_served(totals.served)] if totals.served else []),
        f"behind {_lag(totals.lag)}",
        f"{totals.sessions:,} sessions",
        f"{totals.rows:,} rows",
    ]
    if totals.quarantined:
        parts.append(f"{totals.quarantined:,} quarantined")
    if totals.dropped:
        parts.append(f"{totals.dropped:,} dropped")
    if totals.missing:
        parts.append(f"{totals.missing:,} seqs missing")
    return " | ".join(parts)


def summary_lines(
    totals: RunTotals, elapsed_s: float, sink: str, stats: PublishStats, *, finished: bool = True
) -> list[str]:
    rate = totals.messages / elapsed_s if elapsed_s > 0 else 0.0
    lines = [
        f"{'done' if finished else 'stopped'}: {totals.batches} "
        f"{'batch' if totals.batches == 1 else 'batches'}, "
        f"{totals.messages:,} messages ({rate:,.0f}/s), "
        f"{totals.rows:,} rows in {totals.files} files ({_size(totals.bytes)}), "
        f"{totals.quarantined:,} quarantined, {totals.violations:,} violations, "
        f"{elapsed_s:.1f} s",
        f"at the end: {totals.sessions:,} sessions in state"
        if totals.lag is None
        else f"at the end: behind {_lag(totals.lag)}, {totals.sessions:,} sessions in state",
    ]
    if totals.served:
        lines.insert(1, f"messages served: {_served(totals.served)}")
    if totals.dropped or totals.missing:
        lines.insert(
            1,
            f"integrity class: {totals.dropped:,} messages dropped, "
            f"{totals.missing:,} seqs missing",
        )
    if sink != "none":  # nothing to say of metrics nobody asked for
        lines.append(
            f"metrics ({sink}): {stats.sent:,} sent, {stats.dropped:,} dropped"
            + (f" in {stats.failed_calls} failed calls" if stats.failed_calls else "")
        )
    return lines


def _served(served: Mapping[str, int]) -> str:
    """Records per source tier: ``120 from archive, 30 from kafka``."""
    return ", ".join(f"{count:,} from {tier}" for tier, count in served.items())


def _lag(lag: SourceLag | None) -> str:
    """Behind the readable ends, beside the high watermarks: ``12 (worst s:1: 8), 40 to the
    high watermark, a last stable offset stalled 95 s``."""
    if lag is None:
        return "unknown"
    readable = lag.readable
    text = (
        "0"
        if readable.worst is None
        else f"{readable.total:,} (worst {readable.worst.key()}: {readable.worst_behind:,})"
    )
    if lag.high is not None:
        text += f", {lag.high.total:,} to the high watermark"
    if lag.stable_stalled_s >= 1:
        text += f", a last stable offset stalled {lag.stable_stalled_s:,.0f} s"
    return text


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError(n)
