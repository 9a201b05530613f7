"""``python -m app`` (and ``spark-submit .../app/__main__.py``) runs the CLI."""

import sys

from app.cli import main

sys.exit(main())
