"""A pytest plugin: the suite's longest files first, so no worker ends the run alone on one.

pytest-xdist's ``--dist loadfile`` hands a worker a whole file at a time,
by default the files with the most tests first (``--no-loadscope-reorder``
in the Makefile turns that off). The longest files are few tests each (JVM
starts, kills and restarts, Terraform against moto), so they went last:
CI's unit lane ended with tests/local/test_pipeline.py running alone on
one worker for minutes while the other had nothing left. Here they go
first, in order of their measured length; every other file keeps its
collection order after them. Only the order changes, never what runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Longest first (seconds of one run alone on this project's 2-core machine,
# docs/design.md "Where CI's time goes"). A file missing here only runs later.
LONGEST = (
    "tests/infra/test_infra_cdktf_cli.py",
    "tests/infra/test_infra_test_pipeline_terraform.py",
    "tests/local/test_pipeline.py",
    "tests/spark/test_exactly_once.py",
    "tests/spark/test_cli_runs.py",
    "tests/processors/test_user_package.py",
    "tests/spark/test_cluster.py",
    "tests/kafka/test_job.py",
    "tests/sink/test_fold.py",
    "tests/ops/test_deploy.py",
    "tests/spark/test_recompute.py",
    "tests/spark/test_job.py",
    "tests/sink/test_commit_steps.py",
    "tests/spark/test_declared_schema.py",
)
_RANK = {name: rank for rank, name in enumerate(LONGEST)}


def rank(path: Path) -> int:
    """Where a test file goes: its place in :data:`LONGEST`, or after all of them."""
    try:
        name = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:  # a file outside the project (pytester's)
        return len(LONGEST)
    return _RANK.get(name, len(LONGEST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # sort is stable: a file's tests, and the files not listed, keep their order.
    items.sort(key=lambda item: rank(item.path))
