"""Services kept running as systemd keeps the image's units running.

Each service runs in its own process group with its output in one log file
under the pipeline's log folder. A service that exits with a failure (a
non-zero code or a signal) is started again after its ``RestartSec``, as
``Restart=on-failure`` does, unless its code is one of the unit's
``RestartPreventExitStatus`` or its starts would pass the unit's start limit
(then it stays failed, as systemd leaves it); stopping sends SIGTERM to the
whole group and, after the unit's ``TimeoutStopSec``, SIGKILL. One thread
watches them all.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.errors import ExitCode, TablecastError
from app.local.processes import start_logged, stop_group
from app.local.units import ServiceSpec

log = logging.getLogger(__name__)


class SupervisedServiceError(TablecastError):
    """A service keeps failing, however often it is started again."""

    exit_code = ExitCode.CHECK_FAILED


@dataclass
class Service:
    spec: ServiceSpec
    env: Mapping[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    failures: list[int] = field(default_factory=list)  # exit codes of failed runs
    restart_at: float | None = None
    started_at: list[float] = field(default_factory=list)  # monotonic, for the start limit
    gave_up: bool = False
    """Failed and not restarted: a code that prevents it, or the start limit reached."""


class Supervisor:
    """Starts services, restarts the ones that fail, stops them all."""

    def __init__(self, log_dir: Path, poll_s: float = 0.5, cwd: Path | None = None) -> None:
        self.log_dir = log_dir
        self.poll_s = poll_s
        self.cwd = cwd
        self.services: dict[str, Service] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._watcher.start()

    def start(self, spec: ServiceSpec, env: Mapping[str, str]) -> Service:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        service = Service(spec, dict(env), self.log_dir / f"{spec.name}.log")
        with self._lock:
            self.services[spec.name] = service
            self._launch(service)
        return service

    def _launch(self, service: Service) -> None:
        with service.log_path.open("ab") as out:
            out.write(
                f"=== {time.strftime('%H:%M:%S')} start {' '.join(service.spec.argv)}\n".encode()
            )
        service.process = start_logged(
            service.spec.argv, service.log_path, env=service.env, cwd=self.cwd
        )
        service.starts += 1
        service.started_at.append(time.monotonic())
        service.restart_at = None

    def _watch(self) -> None:
        while not self._stopping.wait(self.poll_s):
            with self._lock:
                for service in self.services.values():
                    self._check(service)

    def _check(self, service: Service) -> None:
        now = time.monotonic()
        process = service.process
        if process is not None and process.poll() is not None:
            code = process.returncode
            service.process = None
            if code != 0:
                service.failures.append(code)
            if code != 0 and service.spec.restart_on_failure:
                if code in service.spec.restart_prevent_codes or self._start_limited(service, now):
                    service.gave_up = True
                    log.info("%s failed (%s); not restarted", service.spec.name, code)
                    return
                service.restart_at = now + service.spec.restart_sec
                log.info(
                    "%s failed (%s); restarting in %.0f s",
                    service.spec.name,
                    code,
                    service.spec.restart_sec,
                )
        if service.process is None and service.restart_at is not None and now >= service.restart_at:
            self._launch(service)

    @staticmethod
    def _start_limited(service: Service, now: float) -> bool:
        """Whether one more start would pass the unit's ``StartLimitBurst`` in its interval."""
        spec = service.spec
        if not spec.start_limit_burst or not spec.start_limit_interval_s:
            return False
        recent = [t for t in service.started_at if now - t <= spec.start_limit_interval_s]
        return len(recent) >= spec.start_limit_burst

    def raise_if_failing(self, failures: int = 3) -> None:
        """Stop waiting on a service that keeps failing: name it and its log's last line."""
        for service in list(self.services.values()):
            if len(service.failures) >= failures or service.gave_up:
                lines = service.log_path.read_text(errors="replace").strip().splitlines()
                raise SupervisedServiceError(
                    f"{service.spec.name} failed {len(service.failures)} times (last: "
                    f"{lines[-1] if lines else 'no output'}); see {service.log_path}"
                )

    def running(self, name: str) -> bool:
        service = self.services.get(name)
        return bool(service and service.process and service.process.poll() is None)

    def pid(self, name: str) -> int | None:
        service = self.services.get(name)
        return service.process.pid if service and service.process else None

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        """Kill a service's whole process group, as a crash would (it is then restarted)."""
        pid = self.pid(name)
        if pid is not None:
            os.killpg(pid, sig)

    def stop(self, name: str) -> None:
        with self._lock:
            service = self.services.pop(name, None)
        if service is None or service.process is None:
            return
        stop_group(service.process, service.spec.stop_timeout_s)

    def restart(self, name: str) -> None:
        """Stop a service and start it again, as ``systemctl restart`` does."""
        service = self.services[name]
        self.stop(name)
        self.start(service.spec, service.env)

    def stop_all(self) -> None:
        self._stopping.set()
        self._watcher.join()
        for name in reversed(list(self.services)):
            self.stop(name)
