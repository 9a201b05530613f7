"""Recompute published offset ranges from the raw archive, on Spark.

``tablecast replay`` and ``tablecast correct`` both come down to the same
work: choose offset ranges of the output (:mod:`app.recompute.plan`), run
each topic-partition's records through the same
:class:`~app.engine.machine.PartitionMachine` as the live job, one Spark task
per partition (:mod:`app.recompute.task`), and replace the ranges' files in
place, recording what was done beside the ledger (:mod:`app.recompute.run`).

- :mod:`app.recompute.replay`: ``tablecast replay``, a window of time.
- :mod:`app.recompute.correct`: ``tablecast correct``, what one job version published.
"""
