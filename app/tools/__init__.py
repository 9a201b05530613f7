"""Tools around the job: sample data, the oracle, the demo.

- :mod:`app.tools.generate`: sample captures in the contract's envelope, with faults.
- :mod:`app.tools.verify`: the expected output recomputed from the archive, compared
  with a dataset (``tablecast verify``).
- :mod:`app.tools.archive_demo`: ``make demo``, the job on its embedded default, over the
  raw archive (``make pipeline-demo`` is :mod:`app.local.exercise`).
"""
