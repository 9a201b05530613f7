"""Every place that carries a version agrees with ``versions.toml``.

``versions.toml`` is the single source of truth for the versions that must
agree across ``pyproject.toml``, ``requirements.lock``, the AMI (``ami/``) and
``infra/`` (which reads the file itself). A disagreement is the dependency hell
the image exists to prevent: Spark, Hadoop, Scala and connector versions that
do not match fail at run time with ``ClassNotFoundException``. These tests
fail instead.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pyspark
import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.pins import (
    PYPROJECT,
    REQUIREMENTS_LOCK,
    ROOT,
    VERSIONS_FILE,
    pin,
    pyproject_dependencies,
)

AMI = ROOT / "ami"

# Pins other code reads by these exact names (infra/, the AMI scripts).
REQUIRED_PINS = (
    ("python", "version"),
    ("java", "version"),
    ("spark", "version"),
    ("spark", "scala_binary"),
    ("hadoop", "version"),
    ("jars", "hadoop_aws"),
    ("jars", "aws_sdk_bundle"),
    ("jars", "analytics_accelerator_s3"),
    ("cloudwatch_agent", "version"),
    ("kafka", "msk_version"),
    ("cdktf", "version"),
)


def pyspark_jars_dir() -> Path:
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "pyspark is not installed"
    return Path(spec.origin).parent / "jars"


@pytest.mark.parametrize(("table", "key"), REQUIRED_PINS)
def test_pin_exists_and_is_a_plain_version(table: str, key: str) -> None:
    value = pin(table, key)
    assert re.fullmatch(r"[0-9][0-9A-Za-z.+-]*", value), f"[{table}] {key} = {value!r}"


def test_every_pin_carries_a_reason() -> None:
    """Each key sits in a block of lines that starts with a comment."""
    block_has_comment = False
    unexplained = []
    for line in VERSIONS_FILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("["):
            block_has_comment = False
        elif stripped.startswith("#"):
            block_has_comment = True
        elif "=" in stripped and not block_has_comment:
            unexplained.append(stripped)
    assert not unexplained, f"pins without a reason comment: {unexplained}"


def test_pyproject_pins_pyspark_at_the_spark_version() -> None:
    pins = [r for r in pyproject_dependencies() if r.name == "pyspark"]
    assert len(pins) == 1, "pyproject.toml must depend on pyspark exactly once"
    assert str(pins[0].specifier) == f"=={pin('spark', 'version')}"


def test_pyproject_requires_the_pinned_python() -> None:
    with PYPROJECT.open("rb") as handle:
        requires = SpecifierSet(tomllib.load(handle)["project"]["requires-python"])
    python = Version(pin("python", "version"))
    major, minor = python.major, python.minor
    assert f"{major}.{minor}.0" in requires
    assert f"{major}.{minor + 1}.0" not in requires, "requires-python allows a newer Python"
    assert f"{major}.{minor - 1}.0" not in requires, "requires-python allows an older Python"


def test_requirements_lock_pins_pyspark_at_the_spark_version() -> None:
    if not REQUIREMENTS_LOCK.exists():
        # The lock is optional for this check; the AMI build requires it.
        return
    text = REQUIREMENTS_LOCK.read_text(encoding="utf-8")
    found = re.findall(r"^pyspark==([^\s;\\]+)", text, flags=re.MULTILINE)
    assert found == [pin("spark", "version")], f"requirements.lock pins pyspark {found}"


def test_installed_pyspark_is_the_spark_version() -> None:
    assert pyspark.__version__ == pin("spark", "version")


def test_hadoop_is_the_hadoop_inside_pyspark() -> None:
    """HDFS, hadoop-aws and PySpark's bundled Hadoop client are one version."""
    hadoop = pin("hadoop", "version")
    assert (pyspark_jars_dir() / f"hadoop-client-api-{hadoop}.jar").is_file(), (
        f"PySpark bundles {sorted(p.name for p in pyspark_jars_dir().glob('hadoop-client-api-*'))}"
    )


def test_scala_binary_is_the_scala_inside_pyspark() -> None:
    scala = pin("spark", "scala_binary")
    assert scala == "2.13", "Spark 4 is built for Scala 2.13 only"
    libraries = sorted(p.name for p in pyspark_jars_dir().glob("scala-library-*.jar"))
    assert len(libraries) == 1 and libraries[0].startswith(f"scala-library-{scala}."), libraries


def test_hadoop_aws_is_the_hadoop_version() -> None:
    assert pin("jars", "hadoop_aws") == pin("hadoop", "version")


def test_ami_checks_spark_for_the_pinned_scala_only() -> None:
    """Scala artifact names take the suffix from versions.toml, never a literal."""
    script = (AMI / "scripts" / "spark-jars.sh").read_text(encoding="utf-8")
    assert "spark-parent_${scala}" in script, "spark-parent must use _${scala}"
    assert 'scala="$(version_of spark scala_binary)"' in script
    literal_suffixes = re.findall(r"_2\.1[0-9]\b", script)
    assert not literal_suffixes, f"spark-jars.sh hard-codes a Scala suffix: {literal_suffixes}"


def ami_text_files() -> list[Path]:
    return sorted(
        path
        for path in AMI.rglob("*")
        if path.is_file() and path.name not in {"README.md", "manifest.json"}
    )


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("spark", "version"),
        ("hadoop", "version"),
        ("jars", "aws_sdk_bundle"),
        ("jars", "analytics_accelerator_s3"),
        ("cloudwatch_agent", "version"),
    ],
)
def test_ami_takes_versions_only_from_versions_toml(table: str, key: str) -> None:
    """No template or script of the AMI repeats a pin: they all read versions.toml."""
    value = pin(table, key)
    pattern = re.compile(rf"(?<![0-9.]){re.escape(value)}(?![0-9])")
    repeats = [
        str(path.relative_to(ROOT))
        for path in ami_text_files()
        if pattern.search(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not repeats, f"[{table}] {key} = {value} is repeated in {repeats}"


def test_packer_reads_the_spark_version_from_versions_toml() -> None:
    """Packer itself evaluates the template's locals: the tag must equal the pin."""
    packer = shutil.which("packer")
    assert packer is not None, (
        "the packer binary is needed (CI: `apt-get install -y packer`, Debian's Packer 1.6.6)"
    )
    inspected = subprocess.run(
        [packer, "inspect", "ami"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r'^local\.spark_version: "([^"]*)"$', inspected, flags=re.MULTILINE)
    assert match is not None, f"packer inspect shows no local.spark_version:\n{inspected}"
    assert match.group(1) == pin("spark", "version")
    assert f'\\"SparkVersion\\" = \\"{pin("spark", "version")}\\"' in inspected
