#!/usr/bin/env python3
"""``scripts/local_pipeline.py up|down|serve|demo``: the pipeline on one machine.

The entry point of ``make pipeline-demo``, ``make pipeline-up`` and ``make
pipeline-down`` (see :mod:`app.local.pipeline`). It reads infra's
configuration of the environment the pipeline stands in for and passes it
to ``app.local``, which does not import ``infra``.
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.errors import TablecastError
from app.local import pipeline
from app.local.exercise import demo
from app.local.stand_in import SANDBOX
from infra.config.stand_in import stand_in


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "serve", "demo"])
    parser.add_argument("--root", type=Path, default=Path(".pipeline"))
    parser.add_argument(
        "--environment",
        default=SANDBOX,
        help=f"what it stands in for: {SANDBOX} or a test pipeline of testing.toml",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            serve = [sys.executable, str(Path(__file__).resolve()), "serve"]
            return pipeline.up(
                args.root, [*serve, "--root", str(args.root), "--environment", args.environment]
            )
        if args.command == "down":
            return pipeline.down(args.root)
        if args.command == "serve":
            return pipeline.serve(args.root, stand_in(args.environment))
        return demo(args.root, stand_in(args.environment))
    except TablecastError as exc:
        print(f"pipeline {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
