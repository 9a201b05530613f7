"""A stand-in for the driver node, which moto does not run.

moto records SSM Run Commands but executes nothing. The stand-in watches the
commands sent to the driver and, once the job's service was (re)started,
publishes the job's ``Heartbeat`` metric as the running job would; with declared
``jobs``, once their services were, each job's (its ``Job`` dimension).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING

import boto3

from app import metric_names

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef


class DriverStandIn:
    def __init__(
        self,
        region: str,
        environment: str,
        instance_id: str,
        beat_s: float = 0.05,
        jobs: tuple[str, ...] = (),
    ):
        self._jobs = jobs
        self._ssm = boto3.client("ssm", region_name=region)
        self._cloudwatch = boto3.client("cloudwatch", region_name=region)
        self._environment = environment
        self._instance_id = instance_id
        self._beat_s = beat_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.beats = 0

    def __enter__(self) -> DriverStandIn:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _started(self) -> bool:
        for command in self._ssm.list_commands(InstanceId=self._instance_id)["Commands"]:
            script = "\n".join(command["Parameters"].get("commands", []))
            if (
                "systemctl restart tablecast-job" in script
                or "systemctl start tablecast-job" in script
            ):
                return True
        return False

    def _run(self) -> None:
        while not self._stop.wait(self._beat_s):
            if not self.beats and not self._started():
                continue
            self._cloudwatch.put_metric_data(
                Namespace=metric_names.NAMESPACE,
                MetricData=[
                    {
                        "MetricName": metric_names.HEARTBEAT,
                        "Dimensions": self._dimensions(job),
                        "Value": 1.0,
                        "Timestamp": datetime.now(UTC),
                    }
                    for job in self._jobs or (None,)
                ],
            )
            self.beats += 1

    def _dimensions(self, job: str | None) -> list[DimensionTypeDef]:
        found: list[DimensionTypeDef] = [
            {"Name": metric_names.ENVIRONMENT_DIMENSION, "Value": self._environment}
        ]
        if job is not None:
            found.append({"Name": metric_names.JOB_DIMENSION, "Value": job})
        return found
