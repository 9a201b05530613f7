"""The Spark wiring: the session, the streaming query, and what the cluster needs.

- :mod:`app.spark.job`: the streaming query: a source, the partition engine, the sink.
- :mod:`app.spark.planning`: the source, fenced as Spark plans each batch.
- :mod:`app.spark.session`: the SparkSession the job and its tools run in.
- :mod:`app.spark.code`: the job's own code as shipped to the executors.

Pure logic stays out of here (:mod:`app.contract`, :mod:`app.engine`), so it runs
and is tested without a JVM.
"""
