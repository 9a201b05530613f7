"""The two tools run as a user runs them: a process, its exit code, its two streams."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

TABLECAST = (sys.executable, "-m", "app")
TABLECAST_OPS = (sys.executable, "-m", "app.ops")


def run(
    tool: Sequence[str],
    *argv: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """``tool argv...`` in ``cwd``, to its end."""
    return subprocess.run(
        [*tool, *argv],
        cwd=cwd,
        env=dict(env if env is not None else os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def started(tool: Sequence[str], *argv: str, cwd: Path) -> subprocess.Popen[str]:
    """``tool argv...`` started, its standard output and error piped, line by line."""
    return subprocess.Popen(
        [*tool, *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
    )


def without_aws(**extra: str) -> dict[str, str]:
    """This process's environment without any AWS setting, plus ``extra``; the AWS SDK
    finds no configuration file and asks no instance metadata service."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
        **extra,
    )
    return env
