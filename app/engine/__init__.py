"""The partition engine: Kafka Streams' model of one ordered task per topic-partition.

- :mod:`app.engine.machine`: the integrity rules over one partition's records (pure).
- :mod:`app.engine.ownership`: rule 6 across partitions, on the driver (pure).
- :mod:`app.engine.state`, :mod:`app.engine.store`: the per-partition state, versioned by offset.
- :mod:`app.engine.output`: the output and quarantine schemas, and rows built as columns.
- :mod:`app.engine.segments`: where output files begin and end (named by offsets).
- :mod:`app.engine.writer`: the output's files, written whole in one physical schema;
  a task's rows staged as hidden files.
- :mod:`app.engine.task`: the executor half, run by ``mapInArrow``.
- :mod:`app.engine.driver`: the driver half: plans each micro-batch's tasks, settles rule 6.
- :mod:`app.engine.in_process`: the engine in one process, over whole partitions (``verify``).
- :mod:`app.engine.reports`: what tasks tell the driver.
- :mod:`app.engine.gc_pause`: Python's cyclic garbage collector paused while the engine works.
"""
