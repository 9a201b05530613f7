"""Shared helpers for the AMI tests: paths, the shell scripts, running bash."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AMI = ROOT / "ami"
SCRIPTS = AMI / "scripts"
FILES = AMI / "files"
LIB = SCRIPTS / "lib" / "common.sh"
NODE_BOOTSTRAP = FILES / "bin" / "node-bootstrap"
STRICT_HEADER = "#!/usr/bin/env bash\nset -euo pipefail\n"


def is_shell_script(path: Path) -> bool:
    """A .sh file, or any file whose first line is a sh/bash shebang."""
    if path.suffix == ".sh":
        return True
    with path.open("rb") as handle:
        first = handle.readline()
    return first.startswith(b"#!") and (b"bash" in first or first.rstrip().endswith(b"/sh"))


def ami_shell_scripts() -> list[Path]:
    return sorted(p for p in AMI.rglob("*") if p.is_file() and is_shell_script(p))


def shell_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose python3 is this interpreter (3.11, with tomllib)
    and whose `logger` is a no-op, so sourced scripts never touch the host."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    logger = stubs / "logger"
    logger.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    logger.chmod(0o755)
    python3 = stubs / "python3"
    python3.symlink_to(sys.executable)
    env = dict(os.environ)
    env["PATH"] = f"{stubs}{os.pathsep}{env.get('PATH', '')}"
    return env


def bash(
    script: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a bash snippet (strict mode on), capturing its output."""
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
