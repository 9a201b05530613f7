"""The image's own files, staged into a directory as its build installs them.

The AMI's ``node-files.sh`` installs ``ami/files`` into ``/`` with
``install_node_files`` (``ami/scripts/lib/node-files.sh``); :func:`stage`
runs that same function into a directory. The local pipeline runs its
services from such a staged root, and ``tests/ami`` checks it, so both see
what the image holds, not the repository's ``ami/files``.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from app.errors import ConfigurationError

AMI = Path(__file__).resolve().parents[2] / "ami"


@dataclass(frozen=True)
class StagedImage:
    """An image root holding what the build's file-installing steps install."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "opt" / "tablecast" / "bin"

    @property
    def templates(self) -> Path:
        return self.root / "opt" / "tablecast" / "templates"

    @property
    def units(self) -> Path:
        return self.root / "etc" / "systemd" / "system"

    def path(self, image_path: str) -> Path:
        """Where an absolute path of the image is in this staged root."""
        return self.root / image_path.lstrip("/")


def stage(root: Path, ami: Path = AMI) -> StagedImage:
    """Install the image's files into ``root`` (emptied first), as the build does."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    lib = ami / "scripts" / "lib"
    script = (
        "set -euo pipefail\n"
        'SCRIPT_NAME=stage-image\nsource "$1/common.sh"\nsource "$1/node-files.sh"\n'
        'install_node_files "$2" "$3"\n'
    )
    done = subprocess.run(
        ["bash", "-c", script, "stage-image", str(lib), str(ami / "files"), str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ConfigurationError(
            f"staging the image's files into {root} failed: {done.stderr.strip()[-300:]}"
        )
    return StagedImage(root=root)
