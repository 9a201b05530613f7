"""One Spark node: an EC2 instance and the encrypted EBS volume that holds its HDFS data."""

from cdktf_cdktf_provider_aws.ebs_volume import EbsVolume
from cdktf_cdktf_provider_aws.instance import (
    Instance,
    InstanceMetadataOptions,
    InstanceRootBlockDevice,
)
from cdktf_cdktf_provider_aws.volume_attachment import VolumeAttachment
from constructs import Construct

from infra.cdk import TerraformResourceLifecycle
from infra.config import layout
from infra.config.sizing import ROOT_VOLUME_GIB


class SparkNode(Construct):
    """A driver or worker instance in the cluster's subnet and placement group.

    The data volume is a resource of its own, not part of the instance, so that
    HDFS data (the checkpoint, the NameNode's metadata) outlives an instance
    replaced for a new image. Terraform ignores later changes to the image and
    the user data of a running instance: a new pinned image would otherwise
    replace every node in one apply. Nodes are rolled one at a time with
    ``terraform apply -replace`` (docs/infra.md, "Rolling the nodes").
    """

    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        name: str,
        ami_id: str,
        instance_type: str,
        subnet_id: str,
        availability_zone: str,
        placement_group: str | None,
        security_group_ids: list[str],
        instance_profile: str,
        kms_key_arn: str,
        data_volume_gib: int,
        user_data: str,
        private_ip: str | None = None,
        keep_final_snapshot: bool = False,
        guard_data: bool = True,
        snapshot_tag: tuple[str, str] | None = None,
    ) -> None:
        """Create the node.

        :param name: ``Name`` tag, e.g. ``tablecast-dev-worker-1``.
        :param ami_id: the Spark node image.
        :param instance_type: EC2 type; EBS-only, so the recover action works.
        :param subnet_id: the cluster's one subnet.
        :param availability_zone: that subnet's zone, for the data volume.
        :param placement_group: the spread placement group's name, or ``None``.
        :param security_group_ids: the Spark nodes' security group.
        :param instance_profile: name of the nodes' instance profile.
        :param kms_key_arn: key that encrypts the root and data volumes.
        :param data_volume_gib: size of the HDFS data volume.
        :param user_data: the node's boot script (see ``infra.constructs.user_data``).
        :param private_ip: fixed address (the driver's), or ``None`` for any.
        :param keep_final_snapshot: snapshot the data volume when it is destroyed.
        :param guard_data: refuse any plan that destroys the data volume.
        :param snapshot_tag: ``(key, value)`` tag by which DLM snapshots the data volume.
        """
        super().__init__(scope, id_)
        self.instance = Instance(
            self,
            "instance",
            ami=ami_id,
            instance_type=instance_type,
            subnet_id=subnet_id,
            private_ip=private_ip,
            associate_public_ip_address=False,
            vpc_security_group_ids=security_group_ids,
            iam_instance_profile=instance_profile,
            placement_group=placement_group,
            ebs_optimized=True,
            # One-minute metrics: the status-check alarms react sooner.
            monitoring=True,
            metadata_options=InstanceMetadataOptions(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=1,
            ),
            root_block_device=InstanceRootBlockDevice(
                encrypted=True,
                kms_key_id=kms_key_arn,
                volume_type="gp3",
                volume_size=ROOT_VOLUME_GIB,
                delete_on_termination=True,
            ),
            user_data=user_data,
            tags={"Name": name},
            lifecycle=TerraformResourceLifecycle(ignore_changes=["ami", "user_data"]),
        )
        self.data_volume = EbsVolume(
            self,
            "data",
            availability_zone=availability_zone,
            size=data_volume_gib,
            type="gp3",
            encrypted=True,
            kms_key_id=kms_key_arn,
            final_snapshot=keep_final_snapshot,
            tags={"Name": f"{name}-hdfs", **dict([snapshot_tag] if snapshot_tag else [])},
            lifecycle=TerraformResourceLifecycle(prevent_destroy=guard_data),
        )
        VolumeAttachment(
            self,
            "data-attachment",
            device_name=layout.HDFS_DEVICE,
            instance_id=self.instance.id,
            volume_id=self.data_volume.id,
            # HDFS must flush and unmount before the volume goes.
            stop_instance_before_detaching=True,
        )

    @property
    def instance_id(self) -> str:
        """The instance's id."""
        return str(self.instance.id)

    @property
    def private_ip(self) -> str:
        """The instance's private address."""
        return str(self.instance.private_ip)
