"""A stand-in for the SSM agent on the driver node: the Run Commands the tools send, run here.

moto records Run Commands (``tablecast-ops deploy`` restarts the job's
service with one) and runs none. This agent polls the commands sent to the
driver's instance and does what their scripts ask of the services: a
``systemctl restart`` of the job's unit restarts the supervised service (run-job
then installs the version SSM names, as on a node), a ``restart`` of the
archiver's restarts it. Other commands are only logged.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from app.local.supervisor import Supervisor

if TYPE_CHECKING:
    from mypy_boto3_ssm import SSMClient

log = logging.getLogger(__name__)
RESTARTS = {
    "systemctl restart tablecast-job.service": "tablecast-job",
    "systemctl restart tablecast-archiver.service": "tablecast-archiver",
}


class RunCommandAgent:
    """Polls the driver's Run Commands and restarts the services they name."""

    def __init__(
        self, ssm: SSMClient, instance_id: str, supervisor: Supervisor, poll_s: float = 0.5
    ) -> None:
        self._ssm = ssm
        self._instance_id = instance_id
        self._supervisor = supervisor
        self._poll_s = poll_s
        self._stop = threading.Event()
        self._seen: set[str] = set()
        self._thread = threading.Thread(target=self._run, name="run-command-agent", daemon=True)
        self.restarted: list[str] = []
        """The services restarted, in order."""

    def start(self) -> None:
        self._seen = {str(c["CommandId"]) for c in self._commands()}
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _commands(self) -> list[dict[str, object]]:
        found = self._ssm.list_commands(InstanceId=self._instance_id)["Commands"]
        return [dict(command) for command in found]

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            for command in self._commands():
                command_id = str(command["CommandId"])
                if command_id in self._seen:
                    continue
                self._seen.add(command_id)
                parameters = command.get("Parameters")
                lines = parameters.get("commands", []) if isinstance(parameters, dict) else []
                self._apply(command_id, "\n".join(str(line) for line in lines))

    def _apply(self, command_id: str, script: str) -> None:
        names = [name for line, name in RESTARTS.items() if line in script]
        if not names:
            log.info("run command %s: nothing this stand-in does", command_id)
        for name in names:
            if name in self._supervisor.services:
                log.info("run command %s: restarting %s", command_id, name)
                self._supervisor.restart(name)
                self.restarted.append(name)
