"""``tablecast run`` as a process, as an operator meets it in the first hour: what it says
while Spark starts and how far it is, Ctrl-C, a mistyped checkpoint, a swapped archive.
Each ends in one line with its documented exit code and leaves the output as it was."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.errors import ExitCode
from app.sink.ledger import Ledger, LedgerEntry
from app.storage import resolve
from tests.command_lines import TABLECAST, run, started

pytestmark = pytest.mark.spark


def _generate(root: Path, archive: str, *extra: str) -> None:
    argv = ["generate", "--archive", archive, "--topic-count", "2", "--partitions", "2"]
    argv += ["--sessions", "8", "--updates", "60", "--resync-every", "20", *extra]
    generated = run(TABLECAST, *argv, cwd=root)
    assert generated.returncode == 0, generated.stderr


def _entries(root: Path) -> list[LedgerEntry]:
    """The output's data entries (batches and repairs; claims aside)."""
    return Ledger(resolve(str(root / "out"))).entries()


def test_a_run_says_when_spark_starts_and_how_far_it_is_and_refuses_a_wrong_checkpoint_or_archive(
    tmp_path: Path,
) -> None:
    _generate(tmp_path, "archive")
    paths = ["--output", "out", "--checkpoint", "ckpt"]
    done = run(
        TABLECAST,
        *("run", "--archive", "archive", *paths, "--trigger", "available-now"),
        "--max-offsets-per-trigger",
        "150",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "starting Spark (local[2]): its JVM takes a few seconds"
    assert lines[1].startswith("Spark started in ") and lines[1].endswith(" s")
    batches = [line for line in lines if line.startswith("batch ")]
    assert len(batches) >= 3
    assert "% read, about " in batches[0] and batches[-1].endswith(", 100% read")
    shares = [int(re.findall(r"(\d+)% read", b)[0]) for b in batches]
    assert shares == sorted(shares) and shares[-1] == 100
    assert lines[-2].startswith("done: ") and "stopped" not in done.stdout
    written = _entries(tmp_path)

    # A mistyped checkpoint beside an output: refused before Spark starts, naming the
    # checkpoint the output was written with; not a repair's advice alone.
    typo = run(
        TABLECAST,
        "run",
        "--archive",
        "archive",
        "--output",
        "out",
        "--checkpoint",
        "ckpy",
        cwd=tmp_path,
    )
    assert (typo.returncode, typo.stdout) == (ExitCode.START_REFUSED, "")
    [line] = typo.stderr.splitlines()
    assert line.startswith("tablecast run: checkpoint ckpy holds no progress, but output out ")
    assert "written with checkpoint ckpt: if --checkpoint is mistyped, run again with " in line
    assert "--checkpoint ckpt; only if that checkpoint is lost, run `tablecast repair" in line
    assert not (tmp_path / "ckpy").exists()
    inspected = run(TABLECAST, "inspect", "--output", "out", "--checkpoint", "ckpy", cwd=tmp_path)
    assert (inspected.returncode, inspected.stdout) == (ExitCode.USAGE, "")
    assert inspected.stderr == (
        "tablecast inspect: checkpoint ckpy does not exist: output out was written with "
        "checkpoint ckpt\n"
    )
    (tmp_path / "ckpz").mkdir()  # there, but not this output's
    inspected = run(TABLECAST, "inspect", "--output", "out", "--checkpoint", "ckpz", cwd=tmp_path)
    assert inspected.returncode == ExitCode.USAGE, inspected.stderr
    assert inspected.stderr.splitlines()[-1] == (
        "tablecast inspect: checkpoint ckpz has no committed batch yet: output out was written "
        "with checkpoint ckpt"
    )

    # Another archive under the same topics' names: refused at the first trigger, before a
    # record of it is read, instead of integrity violations of strangers' sessions.
    _generate(tmp_path, "other", "--seed", "8")
    swapped = run(TABLECAST, "run", "--archive", "other", *paths, cwd=tmp_path)
    assert swapped.returncode == ExitCode.DATA_LOSS, swapped.stderr
    [line] = swapped.stderr.splitlines()
    assert line.startswith("tablecast run: data loss in the archive other: its topic sensor-")
    assert "the archive was swapped, or the topic deleted and archived again" in line
    # A failure before the first batch has no summary to print.
    assert [x for x in swapped.stdout.splitlines() if not x.startswith(("starting", "Spark"))] == []
    assert _entries(tmp_path) == written

    verified = run(TABLECAST, "verify", "--archive", "archive", "--output", "out", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    table = run(TABLECAST, "table", "--output", "out", cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    assert json.loads(table.stdout)["metadata_location"].startswith(
        str(tmp_path / "out" / "_iceberg" / "table" / "metadata")
    )


def _wait_for(process: subprocess.Popen[str], start: str) -> list[str]:
    """The process's standard output up to the first line that starts with ``start``."""
    assert process.stdout is not None
    seen = []
    for line in process.stdout:
        seen.append(line.rstrip("\n"))
        if line.startswith(start):
            return seen
    raise AssertionError(f"no line starting {start!r}: {seen}")


@pytest.mark.parametrize("moment", ["starting Spark", "batch 0"])
def test_ctrl_c_is_one_line_and_exit_130_and_the_next_run_carries_on_exactly(
    moment: str, tmp_path: Path
) -> None:
    _generate(tmp_path, "archive")
    paths = ["--archive", "archive", "--output", "out", "--checkpoint", "ckpt"]
    job = started(TABLECAST, "run", *paths, "--trigger", "processing-time=1s", cwd=tmp_path)
    try:
        _wait_for(job, moment)
        job.send_signal(signal.SIGINT)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == int(ExitCode.INTERRUPTED) == 130
    assert err == "tablecast run: interrupted\n"  # no py4j traceback before it
    if moment == "batch 0":
        assert "stopped: 1 batch," in out
    # The next run presses Ctrl-C from any Python at-fork hook. A Ctrl-C that lands while
    # the JVM is forked was lost: PySpark's preexec_fn made the fork run logging's hook,
    # which took the KeyboardInterrupt inside its lock ("Exception ignored", a traceback,
    # the run going on). The JVM's launch now runs no Python at its fork.
    carried_on = run(_CTRL_C_AT_FORK, "run", *paths, "--trigger", "available-now", cwd=tmp_path)
    assert (carried_on.returncode, carried_on.stderr) == (0, "")
    assert not (tmp_path / "forked").exists()
    verified = run(TABLECAST, "verify", "--archive", "archive", "--output", "out", cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr


# tablecast, with a hook that leaves a mark and sends this process SIGINT before each fork
# that runs Python at-fork hooks (subprocess runs them for a preexec_fn).
_CTRL_C_AT_FORK = (
    sys.executable,
    "-c",
    "import os, runpy, signal, sys\n"
    "def ctrl_c():\n"
    "    open('forked', 'w').close()\n"
    "    os.kill(os.getpid(), signal.SIGINT)\n"
    "os.register_at_fork(before=ctrl_c)\n"
    "sys.argv[0] = 'tablecast'\n"
    "runpy.run_module('app', run_name='__main__', alter_sys=True)\n",
)


def test_verify_and_replay_keep_the_rules_the_ledger_records_and_replay_says_what_it_changed(
    tmp_path: Path,
) -> None:
    # A gap in a session's numbering: under resync its rows wait for the next snapshot, under
    # strict the run would stop; the expected output of the one differs from the other's.
    _generate(tmp_path, "archive", "--fault", "seq-gap")
    paths = ["--archive", "archive", "--output", "out"]
    done = run(
        TABLECAST,
        *("run", *paths, "--checkpoint", "ckpt", "--trigger", "available-now"),
        *("--integrity", "resync"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert ", 1 violations, " in done.stdout

    # No --integrity: the live job's, as its ledger records it.
    verified = run(TABLECAST, "verify", *paths, cwd=tmp_path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "rules: integrity resync, session timeout 1 hour\n" in verified.stdout
    assert verified.stdout.endswith("OK: the output is exactly the expected output\n")
    strict = run(TABLECAST, "verify", *paths, "--integrity", "strict", cwd=tmp_path)
    assert (strict.returncode, strict.stdout) == (ExitCode.USAGE, "")
    assert strict.stderr == (
        "tablecast verify: --integrity strict differs from the live job's integrity resync, "
        "which the ledger of out records: leave --integrity out to verify with the live job's\n"
    )

    # A replay of every day that recomputes the same rows rewrites nothing and says so.
    files = sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*.parquet"))
    window = ["--since", "2026-01-01T00:00:00Z", "--until", "2100-01-01T00:00:00Z"]
    planned = run(TABLECAST, "replay", *paths, *window, "--dry-run", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.endswith("dry run: nothing was changed\n")
    replayed = run(TABLECAST, "replay", *paths, *window, cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    last = replayed.stdout.splitlines()[-1]
    kept = re.fullmatch(
        r"replay of window .*: 4 partition tasks read 4\d\d messages into [\d,]+ rows; "
        r"0 files rewritten under new names, (\d+) identical \(kept\), 0 old names retired",
        last,
    )
    assert kept is not None, last
    assert int(kept.group(1)) == len(files)
    assert sorted(p.relative_to(tmp_path) for p in (tmp_path / "out").rglob("*.parquet")) == files
    again = run(TABLECAST, "verify", *paths, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
