"""The exactly-once Parquet sink: what readers of the output can trust.

- :mod:`app.sink.commit`: the commit protocol, step by step (``foreachBatch``).
- :mod:`app.sink.ledger`: the output's own record of the offsets it holds.
- :mod:`app.sink.visible`: the data files a reader of the output sees.
- :mod:`app.sink.guard`: the start-up check that output and checkpoint agree.
- :mod:`app.sink.checkpoint`: Spark's checkpoint, read through the JVM's Hadoop FS.
- :mod:`app.sink.rewrite`: published files rewritten under new names, the old retired.
- :mod:`app.sink.crash_points`: where tests make the commit die on purpose (a test seam).

Replay and corrections publish with their own steps (:mod:`app.recompute.run`).
"""
