"""CONTRACT.md in code, pure Python (no Spark): what every other package builds on.

- :mod:`app.contract.envelope`: the Kafka envelope (section 1), parsed into typed values.
- :mod:`app.contract.processor`: the per-session processor interface and its reference
  implementation (the table a session's messages rebuild).
- :mod:`app.contract.offsets`: per topic-partition offsets, the one key that outlives a
  checkpoint.

The integrity rules (section 2) are :mod:`app.engine.machine`; the output dataset
(section 3) is :mod:`app.engine.output` and :mod:`app.sink`; the raw archive
(section 4) is :mod:`app.sources.archive`.
"""
