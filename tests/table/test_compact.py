"""``tablecast compact``: small files of closed days merged, in one snapshot."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from app import cli
from app.errors import ConfigurationError, OutputStateError
from app.sink import rewrite as rewrite_mod
from app.storage import resolve
from app.table import commit as table_commit
from app.table import compact as table_compact
from app.tools import verify
from app.tools.generate import CaptureSpec
from tests.table.helpers import (
    assert_exact,
    capture_rows,
    compaction_step_one,
    cuts,
    load_table,
    publish_batches,
    table_files,
    table_rows,
)
from tests.table.planned_reader import PlannedReader, ReadPlannedAfterCommit

SPEC = CaptureSpec(
    topics=2, partitions=2, sessions=8, updates=30, records_per_file=40, resync_every=8, seed=7
)


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    return capture_rows(tmp_path_factory.mktemp("compact"), SPEC)


def test_compaction_merges_small_files_in_one_snapshot(
    expected: pa.Table, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    table_commit.catch_up(resolve(output))
    before = table_files(output)
    snapshots = {s.snapshot_id for s in load_table(output).snapshots()}

    assert cli.main(["compact", "--output", output, "--before", "2100-01-01"]) == 0
    assert "compacted" in capsys.readouterr().out
    after = table_files(output)
    days = {p.split("/")[-2] for p in before}
    assert len(after) == len(days) < len(before)  # one file per day at the default target
    assert all("part-compact-" in p for p in after)
    [snapshot] = [s for s in load_table(output).snapshots() if s.snapshot_id not in snapshots]
    assert snapshot.summary.operation.value == "overwrite"
    assert snapshot.summary.additional_properties[table_commit.KIND_KEY] == "compaction"
    # An overwrite that changes no row: the same rows just before and just after it.
    summary = snapshot.summary
    assert summary["added-records"] == summary["deleted-records"] == str(len(expected))
    assert summary["total-records"] == str(len(expected))
    assert_exact(expected, output)
    # Plain readers: the inputs are gone, the merged files are there.
    assert {table_commit.data_path(resolve(output), p) for p in verify_files(output)} == after
    records = table_compact.records(resolve(output))
    assert sum(len(r.inputs) for r in records) == len(before)
    # Again: nothing left to merge; the table still follows the ledger.
    assert table_compact.compact(resolve(output), before=None).groups == 0
    assert table_commit.catch_up(resolve(output)) == 0
    held = table_commit.position(load_table(output))
    assert held is not None and held.entry == 7


def verify_files(output: str) -> list[str]:
    from app.sink.visible import visible_files

    return [p for p in visible_files(resolve(output)) if not p.startswith("_quarantine/")]


def test_a_small_target_keeps_groups_under_it(expected: pa.Table, tmp_path: Path) -> None:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    table_commit.catch_up(resolve(output))
    sizes = {f.file_path: f.file_size_in_bytes for f in table_commit.data_files(load_table(output))}
    target = 3 * max(sizes.values())
    from datetime import date

    report = table_compact.compact(resolve(output), before=date(2100, 1, 1), target_bytes=target)
    assert report.groups > 1 and report.inputs > report.outputs
    assert_exact(expected, output)


def test_compaction_after_a_crash_before_retiring_finishes_it(
    expected: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash after the replace snapshot, before the inputs were deleted: a rerun deletes
    them; plain readers are exact again, the table never stopped being exact."""
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 4))
    location = resolve(output)
    monkeypatch.setattr(location.__class__, "delete_file", lambda self, path: None)
    table_compact.compact(location)
    monkeypatch.undo()
    assert verify.compare(expected, table_rows(output)).ok
    assert verify.compare(expected, verify.read_output(output)).duplicates > 0  # not retired
    # Its process died holding the rewrite's lease: a rerun waits for the lease to run out.
    with pytest.raises(OutputStateError, match="is in progress"):
        table_compact.compact(resolve(output))
    later = rewrite_mod._now() + rewrite_mod.LEASE_SECONDS + 1
    monkeypatch.setattr(rewrite_mod, "_now", lambda: later)
    table_compact.compact(resolve(output))
    assert_exact(expected, output)


def test_bad_sizes_and_days_are_one_line_errors(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("12XB", "-3MiB", "MiB", "0"):
        with pytest.raises(ConfigurationError, match="--target-size"):
            table_compact.parse_size(bad)
    assert table_compact.parse_size("2MiB") == 2 * 1024 * 1024
    assert cli.main(["compact", "--output", "/nonexistent", "--before", "Tuesday"]) == 64
    assert "--before 'Tuesday'" in capsys.readouterr().err
    for grace, said in (("soon", "is not a duration"), ("2 hours", "must be from 0 to 3600 s")):
        assert cli.main(["compact", "--output", "/nonexistent", "--retire-grace", grace]) == 64
        err = capsys.readouterr().err
        assert "--retire-grace" in err and said in err and err.count("\n") == 1


class Crashed(Exception):
    """A crash in the middle of a compaction: nothing after it runs, nothing is cleaned up."""


class CrashAt(table_compact.CompactionSteps):
    def __init__(self, step: str) -> None:
        self.step = step

    def _at(self, step: str) -> None:
        if step == self.step:
            raise Crashed(step)

    def staged(self) -> None:
        self._at("staged")

    def planned(self) -> None:
        self._at("planned")

    def recorded(self) -> None:
        self._at("recorded")

    def published(self) -> None:
        self._at("published")


def _plain_rows_are_exact_or_doubled(expected: pa.Table, output: str) -> None:
    """What a plain reader sees at a crash: every row, some perhaps twice, none lost."""
    comparison = verify.compare(expected, verify.read_output(output))
    assert comparison.missing == 0, comparison.report()
    assert comparison.unexpected == comparison.duplicates, comparison.report()


@pytest.mark.parametrize("step", ["staged", "planned", "recorded", "published"])
def test_a_crash_at_each_step_of_a_compaction_is_finished_exactly(
    step: str, expected: pa.Table, tmp_path: Path
) -> None:
    """Iceberg readers are exact throughout; plain readers are exact once the next
    compaction (or the job's start, :func:`finish_interrupted`) has run, even when the
    next compaction plans other groups (another target size)."""
    from datetime import date

    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    location = resolve(output)
    table_commit.catch_up(location)
    with pytest.raises(Crashed):
        table_compact.compact(location, before=date(2100, 1, 1), steps=CrashAt(step))
    assert verify.compare(expected, table_rows(output)).ok
    _plain_rows_are_exact_or_doubled(expected, output)
    if step != "published":  # before the merged files were published, plain readers are exact
        assert_exact(expected, output)

    assert compaction_step_one(resolve(output)) == (step in ("recorded", "published"))
    assert_exact(expected, output)
    sizes = [f.file_size_in_bytes for f in table_commit.data_files(load_table(output))]
    table_compact.compact(resolve(output), before=date(2100, 1, 1), target_bytes=3 * max(sizes))
    assert_exact(expected, output)
    # The history says what was merged, and nothing that was not: every input it names is
    # gone, and every merged file is visible or was itself merged since.
    visible = set(verify_files(output))
    names = table_compact.records(resolve(output))
    assert names
    merged_since = {r for record in names for r in record.inputs}
    for record in names:
        assert not set(record.inputs) & visible
        assert record.output in visible or record.output in merged_since
    assert not list((tmp_path / "out" / "_tablecast").rglob("compact/*"))  # no staging left
    assert not list((tmp_path / "out" / table_compact.PENDING_DIR).glob("*"))  # nor pending


def test_a_crash_before_the_merge_is_recorded_shows_plain_readers_no_merged_file(
    expected: pa.Table, tmp_path: Path
) -> None:
    """The merged files stay hidden until the compaction is recorded: a crash before leaves
    no file that a later compaction (planning other groups) would not retire."""
    from datetime import date

    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    location = resolve(output)
    write = location.__class__.write_bytes_atomic

    def crash_on_records(self: object, path: str, data: bytes) -> None:
        if "/compactions/" in path:
            raise Crashed(path)
        write(self, path, data)  # type: ignore[arg-type]

    # A patch of its own: undoing the test's monkeypatch would undo conftest's grace of 0 too,
    # and the compaction below would wait out the default grace.
    with pytest.MonkeyPatch.context() as crashing:
        crashing.setattr(location.__class__, "write_bytes_atomic", crash_on_records)
        with pytest.raises(Crashed):
            table_compact.compact(location, before=date(2100, 1, 1))
    assert_exact(expected, output)
    sizes = [f.file_size_in_bytes for f in table_commit.data_files(load_table(output))]
    table_compact.compact(resolve(output), before=date(2100, 1, 1), target_bytes=3 * max(sizes))
    assert_exact(expected, output)


def test_pyiceberg_cannot_write_a_replace_snapshot() -> None:
    """Why compaction commits ``overwrite`` (docs/design.md): pyiceberg 0.12 summarises only
    append, overwrite and delete, and offers no rewrite of files. When this fails, pyiceberg
    can write ``replace``: commit compactions with it."""
    from pyiceberg.table.snapshots import Operation, Summary, update_snapshot_summaries
    from pyiceberg.table.update.snapshot import UpdateSnapshot

    with pytest.raises(ValueError, match="Operation not implemented"):
        update_snapshot_summaries(Summary(operation=Operation.REPLACE))
    public = {name for name in vars(UpdateSnapshot) if not name.startswith("_")}
    assert not {"replace", "rewrite", "rewrite_files", "replace_files"} & public


class ReadBothSnapshots(table_compact.CompactionSteps):
    """The table just before the compaction's commit and just after it, each by its snapshot
    id: the one before is expired with the commit (it holds the inputs, retired after the
    grace), so it is read while it is offered."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.rows: dict[str, pa.Table] = {}
        self.before: int | None = None

    def recorded(self) -> None:
        current = load_table(self.output).current_snapshot()
        assert current is not None
        self.before = current.snapshot_id
        self.rows["before"] = table_rows(self.output, snapshot_id=current.snapshot_id)

    def published(self) -> None:
        table = load_table(self.output)
        current = table.current_snapshot()
        assert current is not None and self.before is not None
        assert table.snapshot_by_id(self.before) is None  # no longer offered
        self.rows["after"] = table_rows(self.output, snapshot_id=current.snapshot_id)


def test_the_compaction_snapshot_changes_no_row(expected: pa.Table, tmp_path: Path) -> None:
    from datetime import date

    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    steps = ReadBothSnapshots(output)
    table_compact.compact(resolve(output), before=date(2100, 1, 1), steps=steps)
    for when in ("before", "after"):
        comparison = verify.compare(expected, steps.rows[when])
        assert comparison.ok, (when, comparison.report())


READER_GRACE_S = 1.0  # the owner pauses in it at least once (its hook waits for the read)


def test_a_reader_that_planned_before_the_compaction_reads_its_whole_snapshot(
    expected: pa.Table, tmp_path: Path
) -> None:
    from datetime import date

    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    table_commit.catch_up(resolve(output))
    reader = PlannedReader(output)
    try:
        table_compact.compact(
            resolve(output),
            before=date(2100, 1, 1),
            steps=ReadPlannedAfterCommit(reader),
            retirement=rewrite_mod.Retirement(grace_s=READER_GRACE_S),
        )
    finally:
        reader.join()
    assert reader.errors == []
    assert reader.rows is not None
    comparison = verify.compare(expected, reader.rows.select(expected.schema.names))
    assert comparison.ok, comparison.report()
    assert_exact(expected, output)


def test_compact_no_wait_leaves_the_inputs_to_the_next_command_which_waits_for_them(
    expected: pa.Table, tmp_path: Path
) -> None:
    output = str(tmp_path / "out")
    publish_batches(output, expected, cuts(expected, 8))
    command = ["compact", "--output", output, "--before", "2100-01-01"]
    assert cli.main([*command, "--retire-grace", "3s", "--no-wait"]) == 0
    (record,) = rewrite_mod.open_rewrites(resolve(output))
    assert record.published and record.grace_s == 3.0
    assert verify.compare(expected, table_rows(output)).ok
    assert verify.compare(expected, verify.read_output(output)).duplicates > 0  # for the grace

    assert cli.main(command) == 0  # finishes it first, after what is left of its grace
    assert rewrite_mod.open_rewrites(resolve(output)) == []
    assert rewrite_mod._now() >= record.retire_at
    assert_exact(expected, output)
