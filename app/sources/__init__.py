"""Sources: one streaming source over the raw archive (CONTRACT.md section 4), Kafka, or both.

- :mod:`app.sources.stream`: Kafka's streaming semantics, once, as Spark's data source.
- :mod:`app.sources.backend`: what a backend is to the streaming reader (no Spark).
- :mod:`app.sources.archive`, :mod:`app.sources.kafka`, :mod:`app.sources.tiered`: the
  backends: the raw archive, Kafka itself, or both (Kafka, and the archive for the
  offsets Kafka no longer holds).
- :mod:`app.sources.backend_options`: the data source's options, which name the backend.
- :mod:`app.sources.kafka_client`: the one Kafka client configuration.
- :mod:`app.sources.starting`: where a fresh checkpoint starts.
- :mod:`app.sources.records`: the records' one schema.
- :mod:`app.sources.broker_quirks`: a test broker's longer fetch wait (a test seam).

Every backend gives the columns of Spark's Kafka source (``records.py``),
plus the tier that served each record, so everything downstream of the
source is one code path.
"""
