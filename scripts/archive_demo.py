#!/usr/bin/env python3
"""``make demo``: the main job on its embedded default, start to finish.

Generates a sample capture (the raw archive stands in for Kafka), runs the
job on local Spark until it has caught up, verifies the output against the
plain processor's expectation and prints a short summary: three
``tablecast`` commands (:mod:`app.cli`) in a row. (``make pipeline-demo`` is
``scripts/local_pipeline.py``.)
"""

import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app import cli

DEMO_DIR = Path(".demo")


def main() -> int:
    archive, output, checkpoint = (DEMO_DIR / n for n in ("archive", "output", "checkpoint"))
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    steps: list[tuple[str, list[str]]] = [
        (
            "1/3 generate a sample capture",
            [
                "generate",
                "--archive",
                str(archive),
                "--topic-count",
                "3",
                "--partitions",
                "2",
                "--sessions",
                "24",
                "--updates",
                "150",
                "--resync-every",
                "50",
                "--records-per-file",
                "400",
            ],
        ),
        (
            "2/3 run the job on local Spark (available-now)",
            [
                "run",
                "--archive",
                str(archive),
                "--output",
                str(output),
                "--checkpoint",
                str(checkpoint),
                "--trigger",
                "available-now",
                "--max-offsets-per-trigger",
                "1500",
            ],
        ),
        ("3/3 verify the output", ["verify", "--archive", str(archive), "--output", str(output)]),
    ]
    for title, argv in steps:
        print(f"\n== {title}: tablecast {' '.join(argv)}", flush=True)
        code = cli.main(argv)
        if code != 0:
            print(f"demo failed at step '{title}' (exit {code})", file=sys.stderr)
            return code
    print(
        f"\nThe output is a Parquet dataset at {output}/ (a folder per UTC day, each file with "
        "its date column); read it with\n"
        f"  pyarrow.dataset.dataset('{output}', format='parquet', partitioning='hive')\n"
        f"The checkpoint is at {checkpoint}/; run `make demo` again to start over."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
