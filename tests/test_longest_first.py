"""The suite's order (tests/longest_first.py): the longest files first, every file still run."""

import subprocess
import sys
from pathlib import Path

from tests.longest_first import LONGEST, ROOT, rank


def test_every_file_named_longest_exists() -> None:
    # A file renamed or removed would silently lose its place at the front.
    missing = [name for name in LONGEST if not (ROOT / name).is_file()]
    assert missing == []


def test_a_collection_runs_the_longest_files_first_and_drops_none(tmp_path: Path) -> None:
    named = [ROOT / "tests/local/test_pipeline.py", ROOT / "tests/spark/test_declared_schema.py"]
    others = [ROOT / "tests/test_versions.py", ROOT / "tests/test_errors.py"]
    # Given in the reverse of the wanted order, the listed files after the others.
    given = [*others, *reversed(named)]
    plain = _collected(given, "-p", "no:tests.longest_first")
    ordered = _collected(given)
    assert sorted(plain) == sorted(ordered)  # the same tests, only in another order
    assert _files(plain) == [str(p.relative_to(ROOT)) for p in given]
    assert _files(ordered) == [str(p.relative_to(ROOT)) for p in [*named, *others]]
    assert rank(named[0]) < rank(named[1]) < rank(others[0]) == len(LONGEST)


def _files(tests: list[str]) -> list[str]:
    return list(dict.fromkeys(test.split("::")[0] for test in tests))


def _collected(files: list[Path], *options: str) -> list[str]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *options,
            *map(str, files),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return [line for line in result.stdout.splitlines() if "::" in line]
