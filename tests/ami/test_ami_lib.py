"""ami/scripts/lib/common.sh, offline: the functions every provisioning
script trusts to read pins, check publishers' checksums and read POMs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.ami.helpers import LIB, ROOT, bash, shell_env

CONTENT = b"tablecast\n"
SHA512 = hashlib.sha512(CONTENT).hexdigest()
# Maven Central still publishes .sha1 files for many artifacts.
SHA1 = hashlib.sha1(CONTENT).hexdigest()


def source(snippet: str) -> str:
    return f'source "{LIB}"\n{snippet}'


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "artifact.jar"
    path.write_bytes(CONTENT)
    return path


def gnupg_layout(digest: str) -> str:
    upper = digest.upper()
    groups = " ".join(upper[i : i + 8] for i in range(0, len(upper), 8))
    return f"artifact.jar: {groups[:72]}\n              {groups[72:]}\n"


@pytest.mark.parametrize(
    "layout",
    [
        f"{SHA512}\n",
        f"{SHA512}  artifact.jar\n",
        f"SHA512 (artifact.jar) = {SHA512}\n",
        gnupg_layout(SHA512),
    ],
    ids=["bare", "coreutils", "bsd", "gnupg"],
)
def test_verify_digest_accepts_the_publishers_layouts(
    layout: str, artifact: Path, tmp_path: Path
) -> None:
    checksum = tmp_path / "artifact.jar.sha512"
    checksum.write_text(layout, encoding="utf-8")
    result = bash(source(f'verify_digest "{artifact}" "{checksum}" sha512'), shell_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "sha512 verified: artifact.jar" in result.stderr


def test_verify_digest_accepts_maven_sha1(artifact: Path, tmp_path: Path) -> None:
    checksum = tmp_path / "artifact.jar.sha1"
    checksum.write_text(SHA1, encoding="utf-8")
    result = bash(source(f'verify_digest "{artifact}" "{checksum}" sha1'), shell_env(tmp_path))
    assert result.returncode == 0, result.stderr


def test_verify_digest_stops_on_a_mismatch(artifact: Path, tmp_path: Path) -> None:
    checksum = tmp_path / "artifact.jar.sha512"
    checksum.write_text("0" * 128, encoding="utf-8")
    result = bash(
        source(f'verify_digest "{artifact}" "{checksum}" sha512; echo after'), shell_env(tmp_path)
    )
    assert result.returncode == 1
    assert "sha512 mismatch" in result.stderr and SHA512 in result.stderr
    assert "after" not in result.stdout


@pytest.mark.parametrize("layout", ["", "not found\n", "abc123  artifact.jar\n"])
def test_verify_digest_stops_on_a_checksum_file_without_a_digest(
    layout: str, artifact: Path, tmp_path: Path
) -> None:
    checksum = tmp_path / "artifact.jar.sha512"
    checksum.write_text(layout, encoding="utf-8")
    result = bash(source(f'verify_digest "{artifact}" "{checksum}" sha512'), shell_env(tmp_path))
    assert result.returncode != 0
    assert "no sha512 digest found" in result.stderr


def test_version_of_reads_versions_toml(tmp_path: Path) -> None:
    env = shell_env(tmp_path) | {"VERSIONS_FILE": str(ROOT / "versions.toml")}
    result = bash(source("version_of spark version; version_of jars hadoop_aws"), env)
    assert result.returncode == 0, result.stderr
    spark, hadoop_aws = result.stdout.split()
    assert spark.count(".") == 2 and hadoop_aws.count(".") == 2


def test_version_of_fails_on_an_unknown_pin(tmp_path: Path) -> None:
    env = shell_env(tmp_path) | {"VERSIONS_FILE": str(ROOT / "versions.toml")}
    result = bash(source("version_of jars no_such_jar"), env)
    assert result.returncode != 0
    assert "[jars] no_such_jar" in result.stderr


def test_require_env_names_every_missing_variable(tmp_path: Path) -> None:
    env = shell_env(tmp_path) | {"PRESENT": "yes"}
    env.pop("ABSENT_ONE", None)
    env.pop("ABSENT_TWO", None)
    result = bash(source("require_env PRESENT ABSENT_ONE ABSENT_TWO"), env)
    assert result.returncode == 1
    assert "ABSENT_ONE ABSENT_TWO" in result.stderr


def test_maven_url_follows_the_repository_layout(tmp_path: Path) -> None:
    result = bash(
        source(
            "maven_url org.example.group some-lib 1.0.0 jar all\n"
            "maven_url org.apache.spark spark-parent_2.13 9.9.9 pom"
        ),
        shell_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "https://repo1.maven.org/maven2/org/example/group/some-lib/1.0.0/some-lib-1.0.0-all.jar",
        "https://repo1.maven.org/maven2/org/apache/spark/spark-parent_2.13/9.9.9/"
        "spark-parent_2.13-9.9.9.pom",
    ]


PARENT_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <groupId>org.example</groupId>
  <artifactId>example-parent</artifactId>
  <version>7.0.0</version>
  <properties>
    <client.version>3.1.4</client.version>
    <pool.version>${pool.major}.5</pool.version>
    <pool.major>2</pool.major>
    <hadoop.version>9.8.7</hadoop.version>
  </properties>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>org.example</groupId>
        <artifactId>pool</artifactId>
        <version>${pool.version}</version>
      </dependency>
    </dependencies>
  </dependencyManagement>
</project>
"""

CHILD_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <parent>
    <groupId>org.example</groupId>
    <artifactId>example-parent</artifactId>
    <version>7.0.0</version>
  </parent>
  <artifactId>connector</artifactId>
  <dependencies>
    <dependency>
      <groupId>org.example</groupId>
      <artifactId>client</artifactId>
      <version>${client.version}</version>
    </dependency>
    <dependency>
      <groupId>org.example</groupId>
      <artifactId>pool</artifactId>
    </dependency>
    <dependency>
      <groupId>org.example</groupId>
      <artifactId>sibling</artifactId>
      <version>${project.version}</version>
    </dependency>
  </dependencies>
</project>
"""


@pytest.mark.parametrize(
    ("artifact_id", "expected"),
    [("client", "3.1.4"), ("pool", "2.5"), ("sibling", "7.0.0"), ("absent", "")],
)
def test_pom_dependency_version_resolves_properties_and_managed_versions(
    artifact_id: str, expected: str, tmp_path: Path
) -> None:
    (tmp_path / "parent.pom").write_text(PARENT_POM, encoding="utf-8")
    (tmp_path / "child.pom").write_text(CHILD_POM, encoding="utf-8")
    result = bash(
        source(f"pom_dependency_version child.pom parent.pom org.example {artifact_id}"),
        shell_env(tmp_path),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_pom_property(tmp_path: Path) -> None:
    (tmp_path / "parent.pom").write_text(PARENT_POM, encoding="utf-8")
    result = bash(source("pom_property parent.pom hadoop.version"), shell_env(tmp_path), tmp_path)
    assert result.stdout.strip() == "9.8.7"


def test_expect_equal_stops_on_a_disagreement(tmp_path: Path) -> None:
    result = bash(source('expect_equal "kafka-clients" 1.0.0 1.0.1'), shell_env(tmp_path))
    assert result.returncode == 1
    assert "versions.toml pins '1.0.0' but found '1.0.1'" in result.stderr
