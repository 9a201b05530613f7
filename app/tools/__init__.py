"""Tools around the job: sample data and the oracle.

- :mod:`app.tools.generate`: sample captures in the contract's envelope, with faults.
- :mod:`app.tools.verify`: the expected output recomputed from the archive, compared
  with a dataset (``tablecast verify``).
"""
