"""A full disk and a read-only filesystem, for real: one line naming the path and the cause,
exit 74, and nothing committed lost: once it is fixed, the next run carries on exactly.

The output lives on a small tmpfs mounted for the test (mounting needs root, as CI and
every machine of this project run; ``mount -o remount`` then gives it room or takes its
writes away).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app import cli
from app.errors import StorageAccessError
from app.tools.generate import CaptureSpec
from tests.spark.helpers import assert_exact, run_argv_over, write_capture
from tests.table.helpers import assert_follows_ledger

pytestmark = pytest.mark.usefixtures("iceberg_pool_ended")

SPEC = CaptureSpec(topics=1, partitions=2, sessions=6, updates=60, records_per_file=60, seed=12)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 192 KiB tmpfs, unmounted when the test ends."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI and this project's machines run as root)")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _remount(disk: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(disk)], check=True)


def _refusal(err: str, under: Path, cause: str) -> str:
    """The command's one line (after any progress lines)."""
    [line] = [line for line in err.splitlines() if line.startswith("tablecast ")]
    assert f"cannot write {under}/" in line or f"cannot delete {under}/" in line, line
    assert cause in line and "nothing committed is lost" in line, line
    return line


def test_a_full_disk_stops_the_run_in_one_line_and_the_next_run_carries_on(
    spark: Any, tmp_path: Path, small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, output, checkpoint = tmp_path / "archive", small_disk / "out", tmp_path / "ckpt"
    write_capture(archive, SPEC)
    argv = [*run_argv_over(archive, output, checkpoint), "--max-offsets-per-trigger", "40"]
    capsys.readouterr()

    # Before: exit 70, "unexpected error", the cause only in a log file.
    assert cli.main(argv) == StorageAccessError.exit_code
    _refusal(capsys.readouterr().err, output, "No space left on device")

    _remount(small_disk, "size=64m")
    assert cli.main(argv) == 0
    assert_exact(archive, output)
    assert_follows_ledger(output)


def test_generate_onto_a_full_disk_names_the_file(
    small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = small_disk / "archive"
    argv = ["generate", "--archive", str(archive), "--sessions", "40", "--updates", "400"]
    assert cli.main(argv) == StorageAccessError.exit_code
    _refusal(capsys.readouterr().err, archive, "No space left on device")


def test_a_read_only_output_stops_replay_and_compact_in_one_line(
    spark: Any, tmp_path: Path, small_disk: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _remount(small_disk, "size=64m")
    archive, output, checkpoint = tmp_path / "archive", small_disk / "out", tmp_path / "ckpt"
    write_capture(archive, SPEC)
    # In a process of its own: this one then holds no file of the output open for writing
    # (the table's SQLite catalog), which the read-only remount would find busy.
    # Several batches: the day has several files for a compaction to merge.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            *run_argv_over(archive, output, checkpoint),
            "--max-offsets-per-trigger",
            "100",
        ],
        check=True,
        capture_output=True,
    )
    capsys.readouterr()

    window = ["--since", "2000-01-01T00:00:00Z", "--until", "2100-01-01T00:00:00Z"]
    replay = ["replay", "--archive", str(archive), "--output", str(output), *window]
    # Only the recompute's staging read-only: the driver takes the rewriter claim, and the
    # refusal comes to a task staging its files, in a Spark worker: it came back as itself.
    staging = output / "_tablecast" / "recompute"
    staging.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(staging)], check=True)
    try:
        assert cli.main(replay) == StorageAccessError.exit_code
    finally:
        subprocess.run(["umount", str(staging)], check=True)
    line = _refusal(capsys.readouterr().err, output, "Read-only file system")
    assert f"cannot write {output}/_tablecast/recompute/" in line, line

    # The whole output read-only: refused on the driver, at the rewriter claim.
    _remount(small_disk, "ro")
    assert cli.main(replay) == StorageAccessError.exit_code
    line = _refusal(capsys.readouterr().err, output, "Read-only file system")
    assert f"cannot write {output}/_tablecast/rewriters/" in line, line
    compact = ["compact", "--output", str(output), "--before", "2100-01-01"]
    assert cli.main(compact) == StorageAccessError.exit_code
    _refusal(capsys.readouterr().err, output, "Read-only file system")

    _remount(small_disk, "rw")
    assert cli.main(replay) == 0
    # Run again as an operator does, in a new process (this one's catalog connection was
    # opened read-only).
    done = subprocess.run(
        [sys.executable, "-m", "app", *compact, "--retire-grace", "0s"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert_exact(archive, output)
    assert_follows_ledger(output)


def test_s3_access_denied_is_named_with_its_key(
    s3: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """moto evaluating IAM: a user whose policy denies PutObject under the prefix."""
    import json

    import boto3
    from moto.core.authorization import enable_iam_authentication

    iam = boto3.client("iam", endpoint_url=s3["TABLECAST_S3_ENDPOINT"], region_name="us-east-1")
    iam.create_user(UserName="writer")
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::lake/denied/*"},
        ],
    }
    iam.put_user_policy(UserName="writer", PolicyName="p", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName="writer")["AccessKey"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
    with enable_iam_authentication():
        assert cli.main(["generate", "--archive", "s3://lake/denied"]) == 74
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("tablecast")]
    assert "cannot write s3://lake/denied/" in line and "access denied" in line, line
