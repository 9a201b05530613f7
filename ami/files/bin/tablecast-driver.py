"""spark-submit's primary resource on the driver node: the tablecast command line.

run-job submits this file, not ``app/__main__.py``: Python puts a script's
own directory first on ``sys.path``, and from inside the package that would
let a module of ``app`` shadow the standard library's module of the same
name. The job's code comes from the installed wheel, which run-job also
passes with ``--py-files`` so that every executor imports the same code.
"""

import sys

from app.cli import main

sys.exit(main())
