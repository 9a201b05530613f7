"""The production topology on one machine: what ``infra/`` and the AMI run, on loopback.

- :mod:`app.local.pipeline`: the pipeline brought up, run and torn down
  (``make pipeline-demo``, ``make pipeline-up``, ``make pipeline-down`` through
  ``scripts/local_pipeline.py``).
- :mod:`app.local.exercise`: the demo, the test-run loop of :mod:`app.ops.test_run`
  (a load published, caught up and verified) on the pipeline's ``target()``.
- :mod:`app.local.stand_in`: what it takes from infra's configuration of the
  environment it stands in for, passed in (``app`` does not import ``infra``).
- :mod:`app.local.image`: the image's files staged as its build installs them.
- :mod:`app.local.units`: the image's systemd units read for one machine.
- :mod:`app.local.supervisor`: the units' services kept running as systemd does.
- :mod:`app.local.run_command`: a stand-in for the SSM agent on the driver.
- :mod:`app.local.servers`: tansu and moto in Kafka's and AWS's places.
- :mod:`app.local.tansu`: tansu's command line, for the pipeline and the tests.
- :mod:`app.local.spark_cluster`: a Spark standalone master and worker.
- :mod:`app.local.processes`: processes on loopback: started with a log,
  polled, stopped with their group.
"""
