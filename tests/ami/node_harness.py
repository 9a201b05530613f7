"""The node's files as the AMI tests read them: units, templates filled with
node-bootstrap's settings, and a node.env for the scripts."""

from __future__ import annotations

import string
from pathlib import Path

from tests.ami.helpers import FILES, shell_env

UNITS = FILES / "systemd"
TEMPLATES = FILES / "templates"

# What node-bootstrap exports when it fills the templates.
NODE_SETTINGS = {
    "TABLECAST_ENV": "prod",
    "TABLECAST_ROLE": "driver",
    "TABLECAST_DRIVER_HOST": "10.0.1.23",
    "AWS_REGION": "eu-west-1",
    "TABLECAST_ZONE_ID": "euw1-az1",
    "TABLECAST_HDFS_DEVICE": "/dev/sdf",
    "TABLECAST_HDFS_REPLICATION": "2",
}


def unit(name: str) -> dict[str, list[str]]:
    """A unit file's keys and their values (continuation lines joined)."""
    text = (UNITS / f"{name}.service").read_text(encoding="utf-8").replace("\\\n", " ")
    entries: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            entries.setdefault(key.strip(), []).append(" ".join(value.split()))
    return entries


def render(name: str) -> str:
    text = (TEMPLATES / f"{name}.tmpl").read_text(encoding="utf-8")
    return string.Template(text).substitute(NODE_SETTINGS)


def write_node_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    settings = {k: v for k, v in NODE_SETTINGS.items() if k != "TABLECAST_HDFS_REPLICATION"}
    settings.update(overrides)
    node_env = tmp_path / "node.env"
    node_env.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
    image_env = tmp_path / "image.env"
    image_env.write_text("JAVA_HOME=/usr/lib/jvm/java\n", encoding="utf-8")
    env = shell_env(tmp_path)
    for name in NODE_SETTINGS:
        env.pop(name, None)
    env["TABLECAST_NODE_ENV_FILE"] = str(node_env)
    env["TABLECAST_IMAGE_ENV_FILE"] = str(image_env)
    return env
