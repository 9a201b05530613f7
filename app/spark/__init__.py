"""The Spark wiring: the session, the streaming query, and what the cluster needs.

- :mod:`app.spark.job`: the streaming query: a source, the partition engine, the sink.
- :mod:`app.spark.session`: the SparkSession the job and its tools run in.
- :mod:`app.spark.code`: the job's own code as shipped to the executors, and its digest.
- :mod:`app.spark.checkpoint`: Spark's checkpoint read through the JVM's Hadoop FS.
- :mod:`app.spark.worker_errors`: our errors raised in Spark's workers, rebuilt on the driver.

Pure logic stays out of here (:mod:`app.contract`, :mod:`app.engine`), so it runs
and is tested without a JVM.
"""
