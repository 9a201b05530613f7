"""One environment's stacks applied to a moto server with real Terraform, and destroyed.

What moto cannot do, and so what is not applied (docs/infra.md, "Real
Terraform in CI"): moto 5.2 has no MSK configurations and no bootstrap
brokers, so of the kafka stack only its KMS key, alias and log group are
applied; the stacks that read its outputs read a stand-in state holding an
MSK cluster created in moto with boto3 (its bootstrap string is a stand-in
too). moto has no DLM lifecycle policies and no placement groups: the spark
stack is applied without them, its instances without a placement group (an
override sets it null) and without detailed monitoring (moto has no
``MonitorInstances``), and the policy's id, which the monitoring stack's
failed-snapshots alarm reads, is a stand-in output. Everything else is
applied.
"""

import base64
import dataclasses
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from infra.config import EnvironmentConfig, layout, versions
from infra.testing import SynthesizedEnvironment, synthesize
from tests.infra.terraform import (
    OVERRIDE_FILE,
    Mirror,
    S3State,
    State,
    Terraform,
    cluster_outputs,
    moto_override,
    remote_state_names,
    resource_names,
    stand_in_state,
    targets_except,
    write_override,
)

MOTO_ACCOUNT = "123456789012"
AGAIN = "-refresh=false"
"""For an apply over applied stacks: moto reads an all-ports security group rule back with
ports that the provider then tries to remove, and moto refuses that update. Without a
refresh the plan compares the configuration with the state, as AWS's read-back matches."""
REGION = "eu-west-1"
COMPONENTS = ("network", "storage", "kafka", "spark", "monitoring", "handoff")
# Stacks that read none of each other's outputs are applied together.
WAVES: tuple[tuple[str, ...], ...] = (
    ("network", "storage", "kafka"),
    ("spark",),
    ("monitoring", "handoff"),
)
NOT_IN_MOTO: Mapping[str, tuple[str, ...]] = {
    "kafka": (
        "aws_msk_configuration",
        "aws_msk_cluster",
        # These name the cluster's ARN, which only the stand-in has.
        "aws_iam_policy",
        "aws_iam_role",
        "aws_iam_role_policy",
        "aws_appautoscaling_target",
        "aws_appautoscaling_policy",
    ),
    "spark": ("aws_dlm_lifecycle_policy", "aws_placement_group"),
}
"""Resource types moto does not implement (or that name what it cannot create), left out."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """A moto server of its own, in its own process, on loopback; yields its endpoint."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    server_bin = Path(sys.executable).with_name("moto_server")
    with log.open("w") as output:
        server = subprocess.Popen(
            [str(server_bin), "-H", "127.0.0.1", "-p", str(port)], stdout=output, stderr=output
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise AssertionError(f"moto_server did not start on {endpoint}") from None
                time.sleep(0.2)
        yield endpoint
    finally:
        server.terminate()
        server.wait(timeout=30)


def client(endpoint: str, service: Any) -> Any:
    return boto3.client(
        service,
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="moto",
        aws_secret_access_key="moto",
    )


def node_image(endpoint: str, name: str = "tablecast-spark-node-test") -> str:
    """An image like ami/'s, owned by the account: name pattern and tags."""
    ec2 = client(endpoint, "ec2")
    base = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=base, MinCount=1, MaxCount=1)["Instances"][0]
    image = ec2.create_image(InstanceId=instance["InstanceId"], Name=name)
    ec2.terminate_instances(InstanceIds=[instance["InstanceId"]])
    tags = {**layout.AMI_TAGS, layout.AMI_SPARK_VERSION_TAG: versions().spark}
    ec2.create_tags(
        Resources=[image["ImageId"]], Tags=[{"Key": k, "Value": v} for k, v in tags.items()]
    )
    image_id: str = image["ImageId"]
    return image_id


def guarded(stack: Path) -> dict[str, list[str]]:
    """``prevent_destroy`` resources of a synthesized stack, by type."""
    document = json.loads((stack / "cdk.tf.json").read_text(encoding="utf-8"))
    found: dict[str, list[str]] = {}
    for resource_type, resources in document.get("resource", {}).items():
        for name, body in resources.items():
            if body.get("lifecycle", {}).get("prevent_destroy"):
                found.setdefault(resource_type, []).append(name)
    return found


@dataclass(frozen=True)
class MotoDeployment:
    """One environment's stacks, each with its override, state and targets for moto."""

    env: SynthesizedEnvironment
    outdir: Path
    states: Path
    stand_in: Path
    endpoint: str
    mirror: Mirror
    terraform: Terraform
    fixed_addresses: bool = True
    """False: the instances are applied without their fixed private addresses, for a test
    that replaces the driver: moto never frees a terminated instance's address, and its
    replacement at the same address fails ("IP already in use")."""
    state_bucket: str | None = None
    """A bucket in moto: the stacks keep their state there, at the keys their S3 backend
    names, as a team's shared state; None: local files under ``states``."""

    def stack(self, component: str) -> Path:
        return self.outdir / "stacks" / self.env[component].name

    def state(self, stack_name: str) -> State:
        """Where the stack named so keeps its state here."""
        if self.state_bucket is None:
            return self.states / f"{stack_name}.tfstate"
        component = stack_name.removeprefix(f"{self.env.config.resource_prefix}-")
        document = json.loads((self.stack(component) / "cdk.tf.json").read_text("utf-8"))
        key = document["terraform"]["backend"]["s3"]["key"]
        return S3State(self.state_bucket, key, self.endpoint)

    def override(self, component: str, *, lift_guards: bool = False) -> None:
        """Write the component's moto override; ``lift_guards`` turns ``prevent_destroy`` off
        (for the test's own destroy only: the applies and the roll run guarded)."""
        stack = self.stack(component)

        def state_of(reference: str) -> State:
            name = reference.removeprefix("cross-stack-reference-input-")
            return self.stand_in if name.endswith("-kafka") else self.state(name)

        document = moto_override(
            version=self.mirror.version,
            endpoint=self.endpoint,
            state=self.state(self.env[component].name),
            remote_states={r: state_of(r) for r in remote_state_names(stack)},
            instances=resource_names(stack, "aws_instance"),
        )
        synthesized = json.loads((stack / "cdk.tf.json").read_text(encoding="utf-8"))
        for name, body in document.get("resource", {}).get("aws_instance", {}).items():
            # moto reads every instance back with a public address, which would force a
            # replacement at the next plan (on AWS a private subnet gives none).
            ignored = synthesized["resource"]["aws_instance"][name]["lifecycle"]["ignore_changes"]
            body["lifecycle"] = {"ignore_changes": [*ignored, "associate_public_ip_address"]}
            if "aws_placement_group" in NOT_IN_MOTO.get(component, ()):
                body["placement_group"] = None
            if not self.fixed_addresses:
                body["private_ip"] = None
        # An output that names a resource moto lacks (the DLM policy's id, which the
        # monitoring stack's alarm reads) holds a stand-in instead.
        for name, value in self.stand_in_outputs(component).items():
            document.setdefault("output", {})[name] = {"value": value}
        for resource_type, names in guarded(stack).items() if lift_guards else ():
            for name in names:
                body = document.setdefault("resource", {}).setdefault(resource_type, {})
                body.setdefault(name, {})["lifecycle"] = {"prevent_destroy": False}
        write_override(stack, document)

    def stand_in_outputs(self, component: str) -> dict[str, str]:
        """The component's outputs that name a resource moto lacks, each with a stand-in:
        ``stand-in-<type>``, as an expression on a resource that is applied, since a
        targeted apply writes only outputs that depend on what it targets (and a constant
        depends on nothing)."""
        left_out = NOT_IN_MOTO.get(component, ())
        stack = self.env[component]
        applied = [
            f"{kind}.{name}"
            for kind, resources in stack.document.get("resource", {}).items()
            if kind not in left_out
            for name in resources
        ]
        return {
            name: f"stand-in-{kind}${{substr({applied[0]}.id, 0, 0)}}"
            for name, output in stack.outputs().items()
            for kind in left_out
            if f"${{{kind}." in str(output["value"])
        }

    def init(self, component: str) -> None:
        self.override(component)
        self.terraform(self.stack(component), "init", "-lockfile=readonly")

    def apply(self, component: str, *extra: str) -> str:
        """``terraform apply`` of what moto implements; ``extra`` arguments go before the
        targets."""
        stack = self.stack(component)
        left_out = NOT_IN_MOTO.get(component, ())
        return self.terraform(
            stack, "apply", "-auto-approve", *extra, *targets_except(stack, left_out)
        )

    def destroy(self, component: str) -> None:
        self.override(component, lift_guards=True)
        stack = self.stack(component)
        left_out = NOT_IN_MOTO.get(component, ())
        # moto drops a deleted transit gateway attachment at once, and the provider waits
        # minutes for it to show "deleted": it is deleted here and left out of the state.
        ec2 = client(self.endpoint, "ec2")
        for name in resource_names(stack, "aws_ec2_transit_gateway_vpc_attachment"):
            address = f"aws_ec2_transit_gateway_vpc_attachment.{name}"
            if address in self.terraform(stack, "state", "list").split():
                attachment = json.loads(self.terraform(stack, "show", "-json"))
                (found,) = (
                    r["values"]["id"]
                    for r in attachment["values"]["root_module"]["resources"]
                    if r["address"] == address
                )
                ec2.delete_transit_gateway_vpc_attachment(TransitGatewayAttachmentId=found)
                self.terraform(stack, "state", "rm", address)
        self.terraform(
            stack, "destroy", "-auto-approve", "-refresh=false", *targets_except(stack, left_out)
        )


def stand_in_cluster(
    config: EnvironmentConfig, endpoint: str, kafka_stack: Path, path: Path
) -> None:
    """An MSK cluster in moto, and a state file holding the kafka stack's outputs for it."""
    arn = client(endpoint, "kafka").create_cluster_v2(
        ClusterName=config.resource_prefix,
        Provisioned={
            "BrokerNodeGroupInfo": {
                "InstanceType": "kafka.m7g.large",
                "ClientSubnets": ["s-1", "s-2"],
            },
            "KafkaVersion": config.msk_cluster_version,
            "NumberOfBrokerNodes": config.broker_count,
        },
    )["ClusterArn"]
    stand_in_state(
        path,
        cluster_outputs(
            kafka_stack,
            {
                "arn": arn,
                "cluster_name": config.resource_prefix,
                "cluster_uuid": arn.rsplit("/", 1)[1],
                "bootstrap_brokers_sasl_iam": "b-1.stand-in.kafka.invalid:9098",
            },
        ),
    )


def prepared(
    config: EnvironmentConfig,
    *,
    endpoint: str,
    mirror: Mirror,
    terraform: Terraform,
    outdir: Path,
    states: Path,
    fixed_addresses: bool = True,
    state_bucket: str | None = None,
) -> MotoDeployment:
    """``config`` synthesized into ``outdir``, its Kafka cluster stood in for in moto, its
    states to be kept in ``states`` (made here) or ``state_bucket``: ready for overrides
    and applies."""
    (env,) = synthesize([config], outdir).values()
    states.mkdir()
    deployment = MotoDeployment(
        env=env,
        outdir=outdir,
        states=states,
        stand_in=states / "kafka-stand-in.tfstate",
        endpoint=endpoint,
        mirror=mirror,
        terraform=terraform,
        fixed_addresses=fixed_addresses,
        state_bucket=state_bucket,
    )
    stand_in_cluster(config, endpoint, deployment.stack("kafka"), deployment.stand_in)
    return deployment


@contextmanager
def applied(
    config: EnvironmentConfig,
    *,
    endpoint: str,
    mirror: Mirror,
    terraform: Terraform,
    workdir: Path,
    fixed_addresses: bool = True,
    state_bucket: str | None = None,
) -> Iterator[MotoDeployment]:
    """Synthesize ``config``, apply its stacks to moto wave by wave, yield, destroy them all."""
    deployment = prepared(
        config,
        endpoint=endpoint,
        mirror=mirror,
        terraform=terraform,
        outdir=workdir / "cdktf.out",
        states=workdir / "states",
        fixed_addresses=fixed_addresses,
        state_bucket=state_bucket,
    )
    with ThreadPoolExecutor(max_workers=3) as pool:

        def each(action: Callable[[str], object], components: Sequence[str]) -> None:
            # Every stack's command ends before a failure is raised: a destroy must not
            # meet an apply still holding a stack's state lock.
            futures = [pool.submit(action, component) for component in components]
            for future in futures:
                future.exception()
            for future in futures:
                future.result()

        each(deployment.init, COMPONENTS)
        done: list[tuple[str, ...]] = []
        try:
            for wave in WAVES:
                done.append(wave)
                each(deployment.apply, wave)
            yield deployment
        finally:
            for wave in reversed(done):
                each(deployment.destroy, wave)
    assert (deployment.stack("network") / OVERRIDE_FILE).is_file()


def resynthesize(deployment: MotoDeployment, config: EnvironmentConfig) -> MotoDeployment:
    """``config`` synthesized over the deployment's stacks (as a changed settings file and
    ``make synth`` do); the moto overrides are written again."""
    (env,) = synthesize([config], deployment.outdir).values()
    changed = dataclasses.replace(deployment, env=env)
    for component in COMPONENTS:
        changed.override(component)
    return changed


def user_data(endpoint: str, instance_id: str) -> str:
    data = client(endpoint, "ec2").describe_instance_attribute(
        InstanceId=instance_id, Attribute="userData"
    )
    return base64.b64decode(data["UserData"]["Value"]).decode()
