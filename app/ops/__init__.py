"""The operator's tools: deploy and watch the job, manage topics, load and archive Kafka.

Each module is one tool over ``app`` code and the environment's hand-off in
SSM Parameter Store (:mod:`app.handoff`); :mod:`app.ops.cli` is the command
line (``scripts/tablecast_ops.py``, ``python -m app.ops``). The Kafka tools need
``confluent-kafka`` (and, for MSK with IAM, ``aws-msk-iam-sasl-signer-python``);
they import it only when they run, so deploy and status work without it.
"""

__all__: list[str] = []
