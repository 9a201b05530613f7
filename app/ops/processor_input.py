"""The input schema a processor in a user's wheel declares, read in a process of its own.

A declared job whose settings name no ``schema`` reads its messages with its processor's
own ``input`` (infra/config/jobs.py), so synth asks the wheel before it writes anything,
and ``tablecast-ops test-run`` generates a load with it. The class is imported as the job
imports it (the wheel on ``sys.path``, as ``--py-files`` puts it on the executors'), and
in a child process: the user's package never lands in the caller's modules, where two
jobs may name two versions of one package.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import msgspec

from app.contract.schema import TableSchema
from app.errors import ConfigurationError, ExitCode

# The child has its interpreter start, pyarrow and the user's import to do.
TIMEOUT_S = 120.0


class _Declared(msgspec.Struct, frozen=True):
    """What the child reports: the canonical document of the processor's input, if any."""

    input: str | None


def declared_input(wheel: Path, processor: str) -> TableSchema | None:
    """The input schema ``processor`` (``module:Class`` in ``wheel``) declares; None where it
    reads the job's. :class:`ConfigurationError` with the line the job would refuse it with
    (a class that does not import, is not a processor, has no output schema, ...)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, str(wheel), processor],
            capture_output=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ConfigurationError(
            f"processor {processor} from {wheel.name}: importing it took over {TIMEOUT_S:.0f} s"
        ) from None
    if done.returncode != 0:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise ConfigurationError(
            f"processor {processor} from {wheel.name}: "
            + (lines[-1] if lines else f"its import exited {done.returncode}")
        )
    found = msgspec.json.decode(done.stdout, type=_Declared)
    if found.input is None:
        return None
    return TableSchema.from_json(found.input.encode(), f"{processor}.input")


def _report(wheel: str, name: str) -> int:
    """In the child: import the class from the wheel, check it as the job does, print what
    it declares; a refusal is one line on stderr."""
    from app.contract import loader
    from app.errors import TablecastError

    sys.path.insert(0, wheel)
    try:
        cls = loader.find(name)
        try:
            processor = cls()
        except Exception as exc:
            print(f"{cls.__qualname__}() failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return int(ExitCode.PROCESSOR)
        loader.check(name, processor)
    except TablecastError as exc:
        print(str(exc), file=sys.stderr)
        return int(exc.exit_code)
    declared = processor.input
    document = None if declared is None else declared.to_json().decode()
    sys.stdout.write(msgspec.json.encode(_Declared(document)).decode())
    return 0


if __name__ == "__main__":
    sys.exit(_report(sys.argv[1], sys.argv[2]))
