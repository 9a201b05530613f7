"""The Spark cluster's cores, and whether the declared jobs' shares fit in them.

Each worker node runs one Spark standalone worker (ami/files/systemd/spark-worker.service)
without ``--cores``, so it offers the master every processor the node has: the vCPUs
of ``spark_worker_instance_type``. The driver node runs no worker; its cores are not the
jobs'. EC2 names a type's size by its vCPUs (``medium`` 1, ``large`` 2, ``xlarge`` 4,
``<n>xlarge`` 4 x n) in every family the Spark nodes may take (EBS-only, not burstable:
infra/config/model.py); ``metal`` sizes and the HPC families, which turn simultaneous
multithreading off, are not named so and have no figure here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from infra.config.jobs import JobSettings

_SIZES = {"medium": 1, "large": 2, "xlarge": 4}
_MULTIPLE = re.compile(r"^(\d+)xlarge$")
# Families whose vCPUs are not their size's (one thread per core).
_OWN_COUNT_FAMILIES = ("hpc",)


def vcpus(instance_type: str) -> int | None:
    """The vCPUs of an EC2 type, from its size's name; None where the name does not say."""
    family, _, size = instance_type.partition(".")
    if not size or family.startswith(_OWN_COUNT_FAMILIES):
        return None
    if size in _SIZES:
        return _SIZES[size]
    multiple = _MULTIPLE.match(size)
    return 4 * int(multiple.group(1)) if multiple else None


def cores_problem(
    jobs: Sequence[JobSettings], *, worker_count: int, worker_instance_type: str
) -> tuple[str, str] | None:
    """The jobs' cores (``spark.cores.max``) that the workers cannot give at once, as
    ``(field, problem)``, or None: a job whose cores are not free waits for them."""
    asking = [job for job in jobs if job.cores is not None]
    if not asking:
        return None
    wanted = sum(job.cores or 0 for job in asking)
    shares = ", ".join(f"{job.name} {job.cores}" for job in asking)
    each = vcpus(worker_instance_type)
    if each is None:
        return "spark_worker_instance_type", (
            f"jobs {shares} ask for {wanted} cores, and how many {worker_instance_type!r} "
            "has is not known from its name: take a type sized medium, large or <n>xlarge"
        )
    workers = worker_count * each
    if wanted <= workers:
        return None
    return f"jobs.{asking[-1].name}.cores", (
        f"jobs {shares} ask for {wanted} cores together; the {worker_count} Spark workers "
        f"({worker_instance_type}, {each} cores each) have {workers}: a job whose cores are "
        "not free waits for them, so lower the jobs' cores or add workers"
    )
