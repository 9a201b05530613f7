"""Recompute published offset ranges from the raw archive, on Spark.

``tablecast replay`` and ``tablecast correct`` both come down to the same
work: choose offset ranges of the output (:mod:`app.recompute.plan`), run
each topic-partition's records through the same
:class:`~app.engine.machine.PartitionMachine` as the live job, one Spark task
per partition (:mod:`app.recompute.task`), and replace the ranges' files in
place, recording what was done beside the ledger (:mod:`app.recompute.run`).

- :mod:`app.recompute.replay`: ``tablecast replay``, a window of time.
- :mod:`app.recompute.correct`: ``tablecast correct``, what one job version published.
- :mod:`app.recompute.plan`: which offset ranges to recompute, and where to read from.
- :mod:`app.recompute.task`: the executor half, one task per partition.
- :mod:`app.recompute.run`: the driver half: run the tasks, publish, record.
"""
