# The one source: an EBS-backed Spark node image (driver and workers share it;
# the role comes from the user data that infra/ writes).
#
# IMDSv2: Packer 1.6.6 (what CI validates with) knows neither
# `metadata_options` nor `imds_support`, so the build enforces IMDSv2 with the
# AWS CLI instead, in both places: scripts/local/require-imdsv2-instance.sh
# sets HttpTokens=required on the build instance before anything runs on it
# (and scripts/imdsv2-check.sh fails the build if IMDSv1 still answers), and
# scripts/local/require-imdsv2-image.sh registers the finished image as
# ImdsSupport=v2.0. README.md shows the equivalent native settings.

source "amazon-ebs" "spark_node" {
  region        = var.region
  instance_type = var.instance_type
  subnet_id     = var.subnet_id
  ssh_username  = var.ssh_username
  ssh_timeout   = "10m"
  # SSH to the build instance from the build host only, never from the internet
  # (Packer's default for its temporary security group is 0.0.0.0/0).
  temporary_security_group_source_cidrs = var.ssh_source_cidrs

  # One dated Debian 12 amd64 HVM EBS build from Debian's own account, by its
  # exact name: building again gives the same base, whatever Debian published
  # since. A name matches one image per account and region.
  source_ami_filter {
    filters = {
      name                = var.base_ami_name
      architecture        = "x86_64"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
      state               = "available"
    }
    owners = [var.base_ami_owner]
  }

  ami_name        = local.ami_name
  ami_description = "tablecast Spark node: Spark ${local.spark_version} (PySpark), HDFS, connector jars, CloudWatch agent, SSM Agent"
  ena_support     = true
  encrypt_boot    = true

  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = var.root_volume_size_gb
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 125
    delete_on_termination = true
    encrypted             = true
  }

  tags          = local.image_tags
  snapshot_tags = local.image_tags
  run_tags = {
    Project   = "tablecast"
    Component = "spark-node-build"
    Name      = "packer ${local.ami_name}"
  }
  run_volume_tags = {
    Project   = "tablecast"
    Component = "spark-node-build"
  }
}
