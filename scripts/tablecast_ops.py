#!/usr/bin/env python3
"""``scripts/tablecast_ops.py <command>``: the operator's tools from a checkout.

Run it with the project's virtual environment (``.venv/bin/python
scripts/tablecast_ops.py ...``, or after ``source .venv/bin/activate``); on a
node with the job's wheel installed, ``python -m app.ops`` is the same but for
``pipelines``, which reads infra's configuration: this script passes it to
``app.ops``, which does not import ``infra``. See docs/operations.md.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.ops.cli import main
from infra.config.pipeline_listing import declarations

sys.exit(main(declarations=declarations()))
