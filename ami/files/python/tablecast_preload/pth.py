"""``python -m tablecast_preload.pth [DIR ...]``: the venv's ``tablecast-preload.pth``.

Each ``DIR`` goes on the venv's path (the image's ``/opt/tablecast/python``,
where this package is installed); then every Python process of the venv
runs :func:`tablecast_preload.spark_path.prefer_installed` as it starts.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from tablecast_preload.spark_path import PTH_LINE, PTH_NAME


def write_pth(directories: list[str]) -> Path:
    """This interpreter's venv's ``.pth``: ``directories``, then the import line."""
    path = Path(sysconfig.get_paths()["purelib"], PTH_NAME)
    path.write_text("".join(f"{line}\n" for line in [*directories, PTH_LINE]), encoding="utf-8")
    return path


if __name__ == "__main__":
    print(f"wrote {write_pth(sys.argv[1:])}")
