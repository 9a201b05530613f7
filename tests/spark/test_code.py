"""The job's own code as Spark ships it: the zip, its digest, the executors' check."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import app
from app.code_version import CodeMismatchError, check_code, code_digest
from app.spark.code import package_zip, ships_itself

PACKAGE_DIR = Path(app.__file__).parent


def test_the_zip_holds_exactly_the_package_and_is_made_once(tmp_path: Path) -> None:
    path = package_zip(tmp_path)
    assert path.name == f"tablecast-{app.__version__}-{code_digest()[:16]}.zip"
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
    expected = {
        f"app/{p.relative_to(PACKAGE_DIR).as_posix()}"
        for p in PACKAGE_DIR.rglob("*")
        if p.is_file()
        and p.suffix in (".py", ".typed", ".properties")
        and "__pycache__" not in p.parts
    }
    assert names == expected and "app/engine/task.py" in names
    made = path.stat().st_mtime_ns
    assert package_zip(tmp_path) == path and path.stat().st_mtime_ns == made


def test_code_imported_from_the_zip_has_the_drivers_digest(tmp_path: Path) -> None:
    path = package_zip(tmp_path)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import app, app.code_version; "
        "print(app.__file__); print(app.code_version.code_digest())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout.split()
    assert out[0].startswith(str(path)), "the shipped zip must come first"
    assert out[1] == code_digest()


def test_an_executor_with_other_code_refuses_to_run() -> None:
    check_code(code_digest())
    with pytest.raises(
        CodeMismatchError,
        match=r"imported tablecast code \w{12} from .* the "
        r"driver runs 000000000000",
    ):
        check_code("0" * 64)


def test_what_spark_submit_already_ships_is_not_shipped_twice() -> None:
    assert ships_itself(
        {"spark.submit.pyFiles": "/var/lib/tablecast/wheels/tablecast-0.1.0-py3-none-any.whl"}
    )
    assert not ships_itself({"spark.submit.pyFiles": "/tmp/other.zip"})
    assert not ships_itself({})
