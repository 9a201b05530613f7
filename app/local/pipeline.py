"""The whole pipeline on one machine: the production topology on loopback.

``make pipeline-demo`` (``scripts/local_pipeline.py demo``) brings up what
``infra/`` and the AMI build in AWS, with a real component in each role,
produces sessions, waits until the job has caught up, checks the output with
``tablecast verify``, prints a summary and tears everything down.
``make pipeline-up`` / ``make pipeline-down`` leave it running in between.

| role | in AWS | here |
|---|---|---|
| Kafka | MSK | tansu on a loopback port, topics made by ``tablecast-ops topics create`` |
| AWS APIs | S3, SSM, CloudWatch, SNS | moto's server on a loopback port |
| hand-off | infra's hand-off stack | the same values, passed in (``infra/config/stand_in.py``) |
| Spark | the image's master and worker units | the same units, staged as the image installs them |
| job | ``tablecast-job.service`` runs ``run-job`` | the same unit, the same script |
| archiver | ``tablecast-archiver.service`` | the same unit |
| executors' Python | the image's venv: ``requirements.lock`` only | a venv of exactly the lock |
| checkpoint | HDFS on the nodes | a local directory |

What differs, and why, is set in one place below (``_substitutions``): the
brokers' address (tansu's), the checkpoint (a local path in HDFS's place),
the trigger (seconds, not minutes), the replication factor (one broker), and
run-job's paths and service user (overrides of its defaults on a node). The
image's files are staged into ``<root>/image`` by the build's own
file-installing step (:mod:`app.local.image`): the services run the units
and programs found there, so what runs here is what the image holds. The
archiver cuts a file after seconds, not a minute (``--max-wait``, added to
its unit's command in ``_start_unit``).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import venv
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING, cast

import boto3

from app import handoff
from app.errors import ConfigurationError, ExitCode, TablecastError
from app.local.image import StagedImage, stage
from app.local.processes import LOOPBACK, poll_until, start_logged
from app.local.run_command import RunCommandAgent
from app.local.servers import FAKE_CREDENTIALS, Server, start_broker, start_moto
from app.local.spark_cluster import master_ready, spark_home
from app.local.stand_in import StandIn
from app.local.supervisor import Supervisor
from app.local.units import render
from app.ops import test_run
from app.ops.aws import AwsClients
from app.ops.cli import KAFKA_AUTH_VARIABLE, ONE_MESSAGE_PER_BATCH_VARIABLE
from app.ops.deploy import upload_wheel
from app.ops.environment import Handoff, write_handoff, write_job_version
from app.ops.wheel import build_wheel
from app.sources.kafka_client import KafkaEndpoint

if TYPE_CHECKING:
    from mypy_boto3_s3.literals import BucketLocationConstraintType

PROJECT = Path(__file__).resolve().parents[2]
ZONE_ID = "euw1-az1"
TRIGGER = "5 seconds"
ARCHIVE_MAX_WAIT = "5 seconds"  # a node's archiver lets a record wait a minute for its file
SPARK_PORTS = (7077, 8080, 8081)  # the image's units fix them
RESTART_SEC_CAP = 5.0  # the units say 10 to 30 s; the demo has no time to lose
TOPICS = ("sensor-0", "sensor-1", "sensor-2")
PARTITIONS = 2

Progress = Callable[[str], None]


def say(line: str) -> None:
    """Progress on standard output, as it comes."""
    print(line, flush=True)


class PipelineError(TablecastError):
    """The pipeline on this machine could not be brought up, or did not catch up."""

    exit_code = ExitCode.CHECK_FAILED


@dataclass(frozen=True)
class Paths:
    root: Path
    shared_image_venv: Path | None = None  # tests share one across pipelines

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def image_venv(self) -> Path:
        # The executors' Python: exactly requirements.lock.
        return self.shared_image_venv or self.root / "image-venv"

    @property
    def driver_venv(self) -> Path:
        return self.root / "driver-venv"  # run-job installs the job's wheel here

    @property
    def wheels(self) -> Path:
        return self.root / "wheels"

    @property
    def spark(self) -> Path:
        return self.root / "spark"

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def image(self) -> Path:
        return self.root / "image"  # the image's files, as its build installs them

    @property
    def env_file(self) -> Path:
        return self.root / "env.sh"


@dataclass
class LocalPipeline:
    """Everything running: the stand-ins, the services, and how to reach them."""

    paths: Paths
    stand_in: StandIn
    """The environment it stands in for: the sandbox, or a test pipeline of testing.toml."""
    progress: Progress = print
    aws: Server | None = None
    kafka: Server | None = None
    supervisor: Supervisor | None = None
    values: dict[str, str] = field(default_factory=dict)  # the hand-off as written to SSM
    image: StagedImage | None = None
    agent: RunCommandAgent | None = None

    @property
    def environment(self) -> str:
        return self.stand_in.environment

    # -- bring up ---------------------------------------------------------

    def start(self) -> None:
        steps: list[tuple[str, Callable[[], None]]] = [
            ("the image's files (its build's install_node_files)", self._image),
            ("the executors' Python (requirements.lock)", self._interpreters),
            ("AWS on loopback (moto: S3, SSM, CloudWatch, SNS)", self._aws),
            ("Kafka on loopback (tansu) and the hand-off in SSM", self._kafka_and_handoff),
            ("topics (tablecast-ops topics create)", self._topics),
            ("Spark master and worker (the image's units)", self._spark),
            ("the job's wheel to the artifacts, its version to SSM", self._deploy),
            ("the job and the archiver (the image's units)", self._services),
        ]
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        # Kafka, S3 and SSM start empty (in memory) every time: a checkpoint
        # left by an earlier run would name batches that output never held.
        shutil.rmtree(self.paths.checkpoint, ignore_errors=True)
        try:
            for number, (title, step) in enumerate(steps, 1):
                started = time.monotonic()
                self.progress(f"[{number}/{len(steps)}] {title} ...")
                step()
                self.progress(f"      done in {time.monotonic() - started:.0f} s")
        except BaseException:
            self.stop()
            raise
        self._write_state()

    def _image(self) -> None:
        self.image = stage(self.paths.image)

    def staged(self) -> StagedImage:
        if self.image is None:
            raise PipelineError("the image's files are not staged yet")
        return self.image

    def _interpreters(self) -> None:
        # What the image's service-users.sh creates on a node.
        self.paths.wheels.mkdir(parents=True, exist_ok=True)
        ensure_locked_venv(self.paths.image_venv, PROJECT / "requirements.lock", self.progress)
        if not (self.paths.driver_venv / "bin" / "python").exists():
            # The driver node's venv is the image's plus the wheel run-job installs;
            # here it sees the image venv's packages and gets the wheel of its own.
            venv.create(self.paths.driver_venv, with_pip=True)
            _site(self.paths.driver_venv).joinpath("image.pth").write_text(
                str(_site(self.paths.image_venv)) + "\n", encoding="utf-8"
            )

    def _aws(self) -> None:
        self.aws = start_moto(self.paths.logs / "aws.log")

    def _kafka_and_handoff(self) -> None:
        self.kafka = start_broker(self.paths.logs / "kafka.log")
        clients = self.clients()
        values = self.stand_in.handoff_values(
            bootstrap_brokers_iam=self.kafka.address,
            driver_private_ip=LOOPBACK,
            driver_instance_id=self._driver_instance(clients),
        )
        values.update(self._substitutions())
        clients.s3.create_bucket(
            Bucket=self.stand_in.bucket,
            # infra's environments name the region by its code, as S3 takes it.
            CreateBucketConfiguration={
                "LocationConstraint": cast("BucketLocationConstraintType", self.region())
            },
        )
        sns = self._session().client("sns", endpoint_url=self.aws_env()["AWS_ENDPOINT_URL"])
        sns.create_topic(Name=self.stand_in.alarm_topic)
        write_handoff(clients.ssm, self.environment, values)
        self.values = values

    def _driver_instance(self, clients: AwsClients) -> str:
        """The driver node as moto's EC2 knows it, tagged as infra tags it: the tools find
        it by the tag and send it Run Commands, which :class:`RunCommandAgent` runs here."""
        image = clients.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
        name = handoff.driver_name(self.environment)
        (instance,) = clients.ec2.run_instances(
            ImageId=image,
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[
                {"ResourceType": "instance", "Tags": [{"Key": "Name", "Value": name}]}
            ],
        )["Instances"]
        instance_id: str = instance["InstanceId"]
        return instance_id

    def _substitutions(self) -> dict[str, str]:
        """The hand-off values that cannot be AWS's on one machine."""
        return {
            handoff.CHECKPOINT_URI: str(self.paths.checkpoint),  # local disk in HDFS's place
            handoff.TRIGGER: TRIGGER,
            handoff.REPLICATION_FACTOR: "1",  # one broker here
        }

    def _topics(self) -> None:
        self.ops(
            [
                "topics",
                "create",
                "--environment",
                self.environment,
                "--partitions",
                str(PARTITIONS),
                *TOPICS,
            ]
        )

    def _spark(self) -> None:
        for port in SPARK_PORTS:
            _require_free(port)
        conf = self.paths.spark / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        template = (self.staged().templates / "spark-defaults.conf.tmpl").read_text("utf-8")
        rendered = Template(template).substitute(self.node_env())
        for image_path, local_path in self.path_map().items():
            rendered = rendered.replace(image_path, local_path)
        # The executors' Python is the workers' venv; the driver's, the driver node's.
        rendered = rendered.replace(
            f"spark.pyspark.driver.python           {self.paths.image_venv}/bin/python",
            f"spark.pyspark.driver.python           {self.paths.driver_venv}/bin/python",
        )
        (conf / "spark-defaults.conf").write_text(rendered, encoding="utf-8")
        # systemd starts a unit in /: nothing may come from the checkout's directory.
        self.supervisor = Supervisor(self.paths.logs, cwd=Path("/"))
        for unit in ("spark-master", "spark-worker"):
            self._start_unit(unit)
        _wait(
            lambda: master_ready(SPARK_PORTS[1]),
            90,
            "the Spark worker registering",
            self.paths.logs / "spark-worker.log",
        )

    def _deploy(self) -> None:
        wheel = build_wheel(PROJECT, self.paths.root / "dist")
        clients = self.clients()
        upload_wheel(clients.s3, self.values[handoff.ARTIFACTS_URI], wheel, replace=True)
        write_job_version(clients.ssm, self.environment, wheel.version, wheel.sha256)
        self.values[handoff.JOB_VERSION] = wheel.version

    def _services(self) -> None:
        self._start_unit("tablecast-job")
        python = str(self.paths.driver_venv / "bin" / "python")

        def installed() -> bool:
            probe = [python, "-c", "import app"]  # from /, as the services run
            done = subprocess.run(probe, capture_output=True, check=False, cwd="/")
            return done.returncode == 0

        _wait(
            installed,
            120,
            "run-job installing the job's wheel",
            self.paths.logs / "tablecast-job.log",
        )
        self._start_unit("tablecast-archiver")
        assert self.supervisor is not None
        self.agent = RunCommandAgent(
            self.clients().ssm, self.values[handoff.DRIVER_INSTANCE_ID], self.supervisor
        )
        self.agent.start()

    def _start_unit(self, name: str) -> None:
        assert self.supervisor is not None
        node = "worker" if name == "spark-worker" else "driver"
        spec = render(
            name,
            self.node_env(),
            self.path_map(node),
            restart_sec_cap=RESTART_SEC_CAP,
            units=self.staged().units,
        )
        if name == "tablecast-archiver":
            # As the trigger: the archive keeps up within seconds, and "caught up"
            # (the job's output and the archive at Kafka's end) comes that soon.
            spec = replace(spec, argv=(*spec.argv, "--max-wait", ARCHIVE_MAX_WAIT))
        self.supervisor.start(spec, self.service_env())

    def raise_if_failing(self) -> None:
        """Stop waiting on a service that keeps failing (:meth:`Supervisor.raise_if_failing`)."""
        if self.supervisor is not None:
            self.supervisor.raise_if_failing()

    # -- what the services see -------------------------------------------

    def node_env(self) -> dict[str, str]:
        """node.env's and image.env's variables, as node-bootstrap writes them on a node."""
        return {
            "TABLECAST_ENV": self.environment,
            "TABLECAST_DRIVER_HOST": LOOPBACK,
            "SPARK_LOCAL_IP": LOOPBACK,
            "TABLECAST_ZONE_ID": ZONE_ID,
            "AWS_REGION": self.region(),
        }

    def path_map(self, node: str = "worker") -> dict[str, str]:
        """The image's paths and where they are on this machine, for a ``driver`` or ``worker``.

        On the AMI every node has its venv at the same path, and run-job installs
        the job's wheel in the driver node's: here they are two directories.
        """
        venv_dir = self.paths.driver_venv if node == "driver" else self.paths.image_venv
        return {
            "/opt/spark": str(spark_home()),
            "/opt/tablecast/bin": str(self.staged().bin),
            "/opt/tablecast/venv": str(venv_dir),
            "/data/spark": str(self.paths.spark),
        }

    def aws_env(self) -> dict[str, str]:
        assert self.aws is not None
        return {
            **FAKE_CREDENTIALS,
            "AWS_ENDPOINT_URL": f"http://{self.aws.address}",
            "AWS_REGION": self.region(),
            "AWS_DEFAULT_REGION": self.region(),
        }

    def service_env(self) -> dict[str, str]:
        return {
            **os.environ,
            **self.node_env(),
            **self.aws_env(),
            "SPARK_HOME": str(spark_home()),
            "SPARK_CONF_DIR": str(self.paths.spark / "conf"),
            "PYSPARK_PYTHON": str(self.paths.image_venv / "bin" / "python"),
            # run-job's defaults are the image's paths and service user:
            "TABLECAST_VENV": str(self.paths.driver_venv),
            "TABLECAST_WHEEL_DIR": str(self.paths.wheels),
            "TABLECAST_DRIVER_PY": str(self.staged().bin / "tablecast-driver.py"),
            "TABLECAST_RUN_AS_USER": getpass.getuser(),
            KAFKA_AUTH_VARIABLE: "none",  # tansu has no IAM (the archiver reads it too)
        }

    def region(self) -> str:
        return self.stand_in.region

    def target(self) -> test_run.Target:
        """The pipeline as a test run sees it: its hand-off, tansu, moto."""
        assert self.kafka is not None
        found = Handoff(self.environment, self.values)
        return test_run.Target.of(found, KafkaEndpoint(self.kafka.address), self.service_env())

    def clients(self) -> AwsClients:
        """Clients of the stand-in AWS (moto's server)."""
        return AwsClients.of(self._session(), self.aws_env()["AWS_ENDPOINT_URL"])

    def _session(self) -> boto3.session.Session:
        return boto3.session.Session(
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=self.region(),
        )

    def ops(self, argv: list[str], check: bool = True) -> str:
        """``tablecast-ops ARGV`` as an operator on the driver node runs it."""
        done = subprocess.run(
            [sys.executable, "-m", "app.ops", *argv],
            env=self.service_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        with (self.paths.logs / "ops.log").open("a") as log:
            log.write(f"$ tablecast-ops {' '.join(argv)}\n{done.stdout}{done.stderr}")
        if check and done.returncode != 0:
            raise PipelineError(f"tablecast-ops {argv[0]} failed: {done.stderr.strip()}")
        return done.stdout

    # -- tear down --------------------------------------------------------

    def stop(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        if self.supervisor is not None:
            self.supervisor.stop_all()
            self.supervisor = None
        for server in (self.kafka, self.aws):
            if server is not None:
                server.stop()
        self.kafka = self.aws = None
        self.paths.state.unlink(missing_ok=True)

    def _write_state(self) -> None:
        assert self.aws is not None and self.kafka is not None
        env = {**self.aws_env(), KAFKA_AUTH_VARIABLE: "none", ONE_MESSAGE_PER_BATCH_VARIABLE: "1"}
        self.paths.state.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "environment": self.environment,
                    "aws": env["AWS_ENDPOINT_URL"],
                    "kafka": self.kafka.address,
                    "spark": f"spark://{LOOPBACK}:{SPARK_PORTS[0]}",
                    "output": self.values[handoff.OUTPUT_URI],
                    "archive": self.values[handoff.ARCHIVE_URI],
                    "logs": str(self.paths.logs),
                },
                indent=2,
            ),
            encoding="utf-8",
        )
        self.paths.env_file.write_text(
            "# source this file to point tablecast-ops, tablecast and pyarrow at the pipeline\n"
            + "".join(f"export {k}={v}\n" for k, v in env.items()),
            encoding="utf-8",
        )


def ensure_locked_venv(path: Path, lock: Path, progress: Progress) -> None:
    """A venv holding exactly ``lock`` (with hashes); rebuilt only when the lock changes."""
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    stamp = path / ".lock-sha256"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        return
    progress(f"      installing {lock.name} into {path} (once per lock)")
    shutil.rmtree(path, ignore_errors=True)
    venv.create(path, with_pip=True)
    done = subprocess.run(
        [
            str(path / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--require-hashes",
            "-r",
            str(lock),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise PipelineError(f"pip install -r {lock} failed: {done.stderr.strip()[-500:]}")
    stamp.write_text(digest, encoding="utf-8")


def _site(venv_dir: Path) -> Path:
    return Path(
        sysconfig.get_paths(vars={"base": str(venv_dir), "platbase": str(venv_dir)})["purelib"]
    )


def _require_free(port: int) -> None:
    with socket.socket() as probe:
        # As a server binds: a connection of an earlier run in TIME_WAIT is no obstacle.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            raise PipelineError(
                f"port {port} on {LOOPBACK} is taken (the image's Spark units use 7077, 8080 "
                "and 8081): is another pipeline or Spark running? `make pipeline-down` stops ours"
            ) from None


def _wait(condition: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    if not poll_until(condition, timeout_s=timeout_s):
        raise PipelineError(f"timed out after {timeout_s:.0f} s waiting for {what}; see {log}")


# -- the commands ------------------------------------------------------------


def up(root: Path, serve_command: Sequence[str]) -> int:
    """Start the pipeline in the background (``serve_command``, which runs :func:`serve`)
    and wait until it is up."""
    paths = Paths(root.resolve())
    if paths.state.exists():
        raise ConfigurationError(f"{paths.state} exists: the pipeline is up (make pipeline-down)")
    log = paths.logs / "pipeline.log"
    server = start_logged(serve_command, log, cwd=PROJECT)
    shown = 0
    while not paths.state.exists():
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        for line in lines[shown:]:
            print(line, flush=True)
        shown = len(lines)
        if server.poll() is not None:
            raise PipelineError(f"the pipeline did not come up; see {log}")
        time.sleep(0.5)
    state = json.loads(paths.state.read_text())
    print(
        f"up: Kafka {state['kafka']}, AWS {state['aws']}, Spark {state['spark']} "
        f"(master's UI on http://{LOOPBACK}:{SPARK_PORTS[1]})"
    )
    print(
        f"logs in {state['logs']}; `source {paths.env_file}` to use the tools; "
        "`make pipeline-down` stops it all"
    )
    return 0


def serve(root: Path, stand_in: StandIn) -> int:
    """Run the pipeline until SIGTERM (what ``up`` starts in the background)."""
    stopping = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    pipeline = LocalPipeline(Paths(root.resolve()), stand_in, progress=say)
    pipeline.start()
    try:
        while not stopping:
            time.sleep(0.5)
    finally:
        pipeline.stop()
    return 0


def down(root: Path) -> int:
    paths = Paths(root.resolve())
    if not paths.state.exists():
        print("the pipeline is not up")
        return 0
    pid = int(json.loads(paths.state.read_text())["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        paths.state.unlink(missing_ok=True)
        return 0
    poll_until(lambda: not paths.state.exists(), timeout_s=180)
    print(
        "down: every service stopped"
        if not paths.state.exists()
        else f"the pipeline (pid {pid}) did not stop in time; see {paths.logs}"
    )
    return 0 if not paths.state.exists() else 1
