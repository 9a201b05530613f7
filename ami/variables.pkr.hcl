# Inputs of the Spark node image build, and the values derived from the
# repository's single versions file.
#
# Versions are NOT variables here: every version the image installs is read
# from ../versions.toml (by the locals below for the tags, and by the
# provisioning scripts for the downloads), so there is nothing to keep in step.
# tests/test_versions.py evaluates these locals with `packer inspect` and
# compares them with versions.toml.

variable "region" {
  description = "AWS region the image is built in (and registered to)."
  type        = string
  default     = "eu-west-1"
}

variable "instance_type" {
  description = "Instance type of the temporary build instance."
  type        = string
  default     = "m6i.large"
}

variable "subnet_id" {
  description = "Subnet of the build instance; empty uses the default VPC. It needs outbound HTTPS to Debian, PyPI, Apache, Maven Central and S3."
  type        = string
  default     = ""
}

variable "root_volume_size_gb" {
  description = "Size of the image's root volume in GiB (Spark, Hadoop and the Python environment take about 6 GiB)."
  type        = number
  default     = 20
}

variable "git_sha" {
  description = "Git commit the image is built from; names the image. Empty names it by build timestamp instead."
  type        = string
  default     = ""
}

variable "base_ami_owner" {
  description = "Owner account of the base image: 136693071363 is the Debian project's official AWS account."
  type        = string
  default     = "136693071363"
}

variable "base_ami_name" {
  description = "The base image's exact name: one dated Debian 12 (bookworm) amd64 point build of Debian's account, the same in every region. Never a pattern: a new Debian build changes the image only when this changes."
  type        = string
  default     = "debian-12-amd64-20250316-2053"
  validation {
    condition     = regex_replace(var.base_ami_name, "^debian-12-amd64-[0-9]{8}-[0-9]+$", "") == ""
    error_message = "The base_ami_name must name one dated Debian 12 amd64 build (debian-12-amd64-YYYYMMDD-NNNN), never a pattern."
  }
}

variable "ssh_source_cidrs" {
  description = "Who may reach the build instance's SSH while it builds (Packer's temporary security group): the build host's address, e.g. [\"203.0.113.7/32\"] (curl -s https://checkip.amazonaws.com). The default admits nobody: set it for a build."
  type        = list(string)
  default     = ["127.0.0.1/32"]
  validation {
    condition     = length(var.ssh_source_cidrs) > 0 && length([for cidr in var.ssh_source_cidrs : cidr if ! can(cidrhost(cidr, 0)) || ! contains([for n in range(16, 33) : format("%d", n)], element(split("/", cidr), 1))]) == 0
    error_message = "The ssh_source_cidrs must be IPv4 networks of /16 or narrower: never the internet (0.0.0.0/0)."
  }
}

variable "ssh_username" {
  description = "Login user of the base image (Debian's cloud images use admin)."
  type        = string
  default     = "admin"
}

locals {
  # The repository's versions file, read once; see the header comment.
  versions_toml = file("${abspath(path.root)}/../versions.toml")

  # `version = "..."` inside the [spark] table of versions.toml. Packer 1.6.6
  # has no TOML decoder and no regex(), so regex_replace keeps the capture:
  # the table header, then lines not starting a new table, then the key.
  spark_version = regex_replace(
    local.versions_toml,
    "(?s)^(?:.*\\n)?\\[spark\\]\\n(?:[^\\[\\n][^\\n]*\\n|\\n)*?version\\s*=\\s*\"([^\"]+)\".*$",
    "$1"
  )

  build_timestamp = formatdate("YYYYMMDDhhmmss", timestamp())
  build_id        = var.git_sha != "" ? var.git_sha : local.build_timestamp
  ami_name        = "tablecast-spark-node-${local.build_id}"

  # infra/ finds the image by these tags (Project, Component, SparkVersion).
  image_tags = {
    Project      = "tablecast"
    Component    = "spark-node"
    SparkVersion = local.spark_version
    GitSha       = var.git_sha
    BuiltAt      = local.build_timestamp
    BaseImage    = "{{ .SourceAMIName }}"
  }

  # Where the build uploads the repository files it needs on the instance.
  build_dir = "/tmp/tablecast-build"
}
