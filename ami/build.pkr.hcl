# The build, step by step:
#   1. require IMDSv2 on the build instance (from the build host, AWS CLI),
#      then check it from inside;
#   2. upload what the scripts need: versions.toml, requirements.lock, the
#      node files, the shared shell library and the publishers' keys committed
#      here (ami/keys: the SSM Agent's);
#   3. provision, one concern per script (each checks its inputs first and
#      verifies every download against the publisher's checksum);
#   4. clean up, then validate the result (the last step on the instance);
#   5. record a manifest, then register the image as IMDSv2-only.

build {
  sources = ["source.amazon-ebs.spark_node"]

  # Step 1.
  provisioner "shell-local" {
    environment_vars = [
      "AWS_REGION=${var.region}",
      "INSTANCE_ID=${build.ID}",
    ]
    script = "${path.root}/scripts/local/require-imdsv2-instance.sh"
  }

  provisioner "shell" {
    execute_command = "chmod +x {{ .Path }}; sudo -E env {{ .Vars }} bash {{ .Path }}"
    script          = "${path.root}/scripts/imdsv2-check.sh"
  }

  # Step 2.
  provisioner "shell" {
    inline = ["mkdir -p ${local.build_dir}/files ${local.build_dir}/lib ${local.build_dir}/keys"]
  }

  provisioner "file" {
    source      = "${path.root}/../versions.toml"
    destination = "${local.build_dir}/versions.toml"
  }

  provisioner "file" {
    source      = "${path.root}/../requirements.lock"
    destination = "${local.build_dir}/requirements.lock"
  }

  provisioner "file" {
    source      = "${path.root}/files/"
    destination = "${local.build_dir}/files"
  }

  provisioner "file" {
    source      = "${path.root}/scripts/lib/"
    destination = "${local.build_dir}/lib"
  }

  provisioner "file" {
    source      = "${path.root}/keys/"
    destination = "${local.build_dir}/keys"
  }

  # Step 3 and 4: scripts run in this order, as root, with these inputs.
  provisioner "shell" {
    execute_command = "chmod +x {{ .Path }}; sudo -E env {{ .Vars }} bash {{ .Path }}"
    environment_vars = [
      "TABLECAST_BUILD_DIR=${local.build_dir}",
      "VERSIONS_FILE=${local.build_dir}/versions.toml",
      "DEBIAN_FRONTEND=noninteractive",
      "AWS_REGION=${var.region}",
    ]
    scripts = [
      "${path.root}/scripts/base-packages.sh",
      "${path.root}/scripts/service-users.sh",
      "${path.root}/scripts/python-env.sh",
      "${path.root}/scripts/hadoop.sh",
      "${path.root}/scripts/spark-jars.sh",
      "${path.root}/scripts/cloudwatch-agent.sh",
      "${path.root}/scripts/ssm-agent.sh",
      "${path.root}/scripts/node-files.sh",
      "${path.root}/scripts/cleanup.sh",
      "${path.root}/scripts/validate.sh",
    ]
  }

  # Step 5: the manifest first (the next step reads the image id from it).
  post-processors {
    post-processor "manifest" {
      output     = "${path.root}/manifest.json"
      strip_path = true
      custom_data = {
        spark_version = local.spark_version
        git_sha       = var.git_sha
        ami_name      = local.ami_name
      }
    }

    post-processor "shell-local" {
      environment_vars = [
        "AWS_REGION=${var.region}",
        "MANIFEST_FILE=${path.root}/manifest.json",
      ]
      script = "${path.root}/scripts/local/require-imdsv2-image.sh"
    }
  }
}
