"""``python -m app.ops`` runs the operator's command line."""

import sys

from app.ops.cli import main

sys.exit(main())
