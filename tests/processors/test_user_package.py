"""A user's processor from its own wheel, outside this repository, through the whole job.

The example ``meter-energy`` is copied out of the repository and built as
its user builds it (``pip wheel``), then installed without an index into a
directory of its own that only the CLI's processes see (``PYTHONPATH``): no
import of it reaches the job from this repository. Its first release
(0.9.0) has a bug, which the run writes exactly once through a SIGKILL,
verified, traced and inspected with its state type; the fixed 1.0.0 is then
rolled out with ``tablecast correct --processor-version 0.9.0``, as
docs/processors.md tells, and a replay and a repair after a lost checkpoint
rerun it. Every step is checked against the processor run in this process
(``verify``'s expectation), and read by pyarrow, DuckDB and pyiceberg.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from app.engine.machine import IntegrityMode
from app.sink.ledger import Ledger
from app.storage import resolve
from app.tools import generate as gen
from app.tools import verify
from tests.spark.helpers import copy_files, repair_argv, run_argv_over, write_capture
from tests.spark.killed_runs import kill_group, start_cli
from tests.table.helpers import assert_follows_ledger, load_table

pytestmark = pytest.mark.spark

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "meter-energy"
NAME = "meter_energy.energy:HourlyEnergy"
PATTERN = "^sensor-.+"
CUT = 60  # the offset the first release reads up to (of about 130 a partition)
# 0.9.0's bug: an hour's use is its last reading plus the one before, not less.
BUG = ("round(open_hour.last - open_hour.base, 6)", "round(open_hour.last + open_hour.base, 6)")


def _install(root: Path, version: str, *, buggy: bool) -> Path:
    """The example at ``version`` built into a wheel and installed into ``root/site``."""
    source = root / f"meter-energy-{version}"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("tests", "*.egg-info"))
    project = source / "pyproject.toml"
    project.write_text(project.read_text().replace('version = "1.0.0"', f'version = "{version}"'))
    code = source / "src" / "meter_energy" / "energy.py"
    text = code.read_text()
    assert BUG[0] in text
    if buggy:
        code.write_text(text.replace(*BUG))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    dist = root / f"dist-{version}"
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(dist), str(source)],
        capture_output=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr.decode()[-2000:]
    (wheel,) = dist.glob("meter_energy-*.whl")
    site = root / f"site-{version}"
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        capture_output=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr.decode()[-2000:]
    return site


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``tablecast ARGS`` in its own process, which imports the processor from ``env``'s
    PYTHONPATH alone (run from outside the repository)."""
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=env["HOME"],
        timeout=600,
        check=False,
    )


def _env(site: Path, home: Path) -> dict[str, str]:
    home.mkdir(exist_ok=True)
    return {**os.environ, "PYTHONPATH": str(site), "HOME": str(home)}


def _expected(archive: Path) -> pa.Table:
    """The rows the fixed processor writes for the whole archive, run in this process (the
    repository's example)."""
    from meter_energy import HourlyEnergy

    rows = verify.expected_output(
        str(archive), PATTERN, IntegrityMode.ORDERED, processor=HourlyEnergy()
    ).rows
    assert rows.num_rows > 0
    return rows


def _read_everywhere(output: Path, columns: list[str]) -> pa.Table:
    """The output's rows by pyarrow (the dataset), asserting DuckDB's plain read of the
    files and pyiceberg's scan of the table hold the same."""
    import duckdb
    from meter_energy.energy import OUTPUT

    plain = verify.read_output(str(output), schema=OUTPUT).select(columns)
    glob = str(output / "*" / "*.parquet")
    con = duckdb.connect()
    try:
        ducked = con.execute(
            f"SELECT * FROM read_parquet('{glob}', hive_partitioning=true)"
        ).to_arrow_table()
    finally:
        con.close()
    assert verify.compare(plain, ducked.select(columns)).ok
    scanned = load_table(output).scan().to_arrow().select(columns)
    assert verify.compare(plain, scanned).ok
    fields = {f.name: f for f in load_table(output).schema().fields}
    assert {"meter", "hour", "kwh_used", "readings", "complete"} <= set(fields)
    assert fields["meter"].required and fields["hour"].required
    return plain


def _open_session(archive: Path) -> str:
    """A session still open at the archive's end, with the latest message of sensor-0."""
    import orjson
    import pyarrow.parquet as pq

    last: dict[str, str] = {}
    for path in sorted((archive / "sensor-0" / "0").glob("*.parquet")):
        records = pq.read_table(path, columns=["key", "value"]).to_pydict()
        for key, value in zip(records["key"], records["value"], strict=True):
            last.pop(key.decode(), None)
            last[key.decode()] = orjson.loads(value)["type"]
    return [session for session, kind in last.items() if kind != "end"][-1]


def _same(expected: pa.Table, actual: pa.Table) -> None:
    comparison = verify.compare(expected, actual.select(expected.column_names))
    assert comparison.ok, comparison.report()


def test_a_processor_from_its_own_wheel_runs_end_to_end(
    tmp_path: Path, iceberg_pool_ended: None
) -> None:
    full, archive = tmp_path / "full", tmp_path / "archive"
    output, checkpoint = tmp_path / "out", tmp_path / "ckpt"
    from meter_energy.energy import INPUT

    write_capture(
        full,
        gen.CaptureSpec(
            topics=2,
            partitions=1,
            sessions=6,
            updates=40,
            records_per_file=30,
            resync_every=12,
            concurrent=3,
            schema=INPUT,
            faults=(gen.Fault.SEQ_REPEAT, gen.Fault.SEQ_GAP),
            seed=11,
        ),
    )
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) < CUT)
    buggy = _env(_install(tmp_path, "0.9.0", buggy=True), tmp_path / "home-0.9.0")
    session = _open_session(archive)
    options = ["--processor", NAME, "--integrity", "ordered", "--max-offsets-per-trigger", "30"]
    run = [*run_argv_over(archive, output, checkpoint), *options]

    # 0.9.0 is killed once it has published, and resumed to the end of the archive.
    process = start_cli(*run, env=buggy)
    deadline = time.monotonic() + 300
    ledger = Ledger(resolve(str(output)))
    while (not output.exists() or ledger.head() is None) and (
        process.poll() is None and time.monotonic() < deadline
    ):
        time.sleep(0.5)
    assert process.poll() is None, process.communicate()[1].decode()[-3000:]
    kill_group(process)
    resumed = _cli(buggy, *run, "--trace", session)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    traced = [line for line in resumed.stdout.splitlines() if line.startswith("trace ")]
    assert traced and all(f"session {session}:" in line for line in traced), resumed.stdout
    assert any(": applied" in line for line in traced), traced
    head = ledger.head()
    assert head is not None and head.processor is not None
    assert (head.processor.name, head.processor.version) == (NAME, "0.9.0")
    columns = _expected(archive).column_names
    assert not verify.compare(_expected(archive), _read_everywhere(output, columns)).ok
    assert_follows_ledger(output)

    # verify runs 0.9.0 in its process, as the ledger names it: the output is what it writes.
    checked = _cli(buggy, "verify", "--archive", str(archive), "--output", str(output))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"processor: {NAME} (state version 1)" in checked.stdout

    # inspect decodes the sessions' states with the processor's state type.
    shown = _cli(
        buggy, "inspect", "--checkpoint", str(checkpoint), "--output", str(output),
        "--session", session,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert f"state           {NAME} version 1" in shown.stdout, shown.stdout
    assert "meters" in shown.stdout, shown.stdout

    # 1.0.0 fixes it. Deployed (installed in its place), it carries on with the rest of the
    # archive from 0.9.0's states, then corrects what 0.9.0 published.
    copy_files(full, archive, lambda r: int(r.stem.split("-")[0]) >= CUT)
    good = _env(_install(tmp_path, "1.0.0", buggy=False), tmp_path / "home-1.0.0")
    carried = _cli(good, *run)
    assert carried.returncode == 0, carried.stderr[-3000:]
    fixed = _expected(full)
    checked = _cli(good, "verify", "--archive", str(full), "--output", str(output))
    assert checked.returncode == 1, checked.stdout + checked.stderr  # 0.9.0's rows differ
    corrected = _cli(
        good, "correct", "--archive", str(full), "--output", str(output),
        "--processor-version", "0.9.0", "--retire-grace", "0s",
    )  # fmt: skip
    assert corrected.returncode == 0, corrected.stdout + corrected.stderr[-3000:]
    _same(fixed, _read_everywhere(output, columns))
    assert_follows_ledger(output)
    checked = _cli(good, "verify", "--archive", str(full), "--output", str(output))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    # The capture's repeat was dropped and its gap counted, as by the live job.
    assert "integrity class: 1 dropped, 1 seqs missing" in checked.stdout, checked.stdout

    # A replay of every day reruns it: the same rows.
    replayed = _cli(
        good, "replay", "--archive", str(full), "--output", str(output),
        "--since", "2000-01-01T00:00:00", "--until", "2100-01-01T00:00:00",
        "--retire-grace", "0s",
    )  # fmt: skip
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr[-3000:]
    _same(fixed, _read_everywhere(output, columns))

    # The checkpoint is lost: repair restarts the sessions, the run after it carries on.
    shutil.rmtree(checkpoint)
    repaired = _cli(good, *repair_argv(full, output, checkpoint, "--yes"))
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr[-3000:]
    again = _cli(good, *run_argv_over(full, output, checkpoint), *options)
    assert again.returncode == 0, again.stderr[-3000:]
    _same(fixed, _read_everywhere(output, columns))
    assert_follows_ledger(output)
    checked = _cli(good, "verify", "--archive", str(full), "--output", str(output))
    assert checked.returncode == 0, checked.stdout + checked.stderr
