#!/usr/bin/env python3
"""``scripts/tablecast_ops.py <command>``: the operator's tools from a checkout.

Run it with the project's virtual environment (``.venv/bin/python
scripts/tablecast_ops.py ...``, or after ``source .venv/bin/activate``); on a
node with the job's wheel installed, ``python -m app.ops`` is the same.
See docs/operations.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.ops.cli import main

sys.exit(main())
