"""Recovery: what an operator runs when a checkpoint or its output is in doubt.

- :mod:`app.recovery.restart`: where a partition can be re-read from so that every
  session rebuilds (pure).
- :mod:`app.recovery.repair`: ``tablecast repair``, the seeds' six-step runbook.
- :mod:`app.recovery.inspect`: ``tablecast inspect``, the state a checkpoint holds.

Recomputing published ranges from the archive (``replay``, ``correct``) is
:mod:`app.recompute`.
"""
