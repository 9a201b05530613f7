"""node-bootstrap on a driver whose deployment settings declare jobs: it reads them from
SSM (moto's, over loopback), enables one ``tablecast-job@<name>`` per job in place of the
one job's service, and its CloudWatch agent ships each job's log file to the job's own
log group; the rsyslog rule writes a job's service's lines to that file."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import boto3

from app import handoff
from tests.ami.helpers import FILES, NODE_BOOTSTRAP, bash
from tests.ami.node_harness import render, unit, write_node_env
from tests.ami.run_job_harness import REGION

RSYSLOG = FILES / "rsyslog" / "30-tablecast.conf"


def declare(aws: dict[str, str], environment: str, jobs: str) -> None:
    ssm = boto3.client(
        "ssm",
        region_name=REGION,
        endpoint_url=aws["AWS_ENDPOINT_URL"],
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    ssm.put_parameter(
        Name=handoff.parameter_name(environment, handoff.JOBS), Value=jobs, Type="String"
    )


def driver(tmp_path: Path, aws: dict[str, str]) -> dict[str, str]:
    """node-bootstrap's environment on a driver: moto's SSM, the venv's python this one
    (it has boto3), a systemctl that records its calls, units written under tmp_path."""
    env = write_node_env(tmp_path, AWS_REGION=REGION) | aws
    stubs = Path(env["PATH"].split(":", 1)[0])
    systemctl = stubs / "systemctl"
    systemctl.write_text(f'#!/bin/sh\necho "$@" >>"{tmp_path}/systemctl.log"\n')
    systemctl.chmod(0o755)
    (tmp_path / "units").mkdir()
    return env | {
        "TABLECAST_VENV_PYTHON": sys.executable,
        "TABLECAST_UNIT_DIR": str(tmp_path / "units"),
        "AWS_MAX_ATTEMPTS": "1",
    }


def systemctl_calls(tmp_path: Path) -> dict[str, list[str]]:
    """Each systemctl verb (``disable --now`` as one) and the units it was given."""
    calls: dict[str, list[str]] = {}
    for line in (tmp_path / "systemctl.log").read_text().splitlines():
        words = line.split()
        verb = " ".join(w for w in words if not w.endswith((".service", ".timer")))
        calls[verb] = [w for w in words if w.endswith((".service", ".timer"))]
    return calls


BOOT = f'source "{NODE_BOOTSTRAP}"\nload_settings\ndeclared_jobs\nstart_services\n'


def test_a_driver_enables_each_declared_jobs_service_and_not_the_one_jobs(
    aws: dict[str, str], tmp_path: Path
) -> None:
    declare(aws, "prod", "plant,lab")
    env = driver(tmp_path, aws)
    # An instance a former boot (or a deploy) enabled for a job no longer declared.
    wants = tmp_path / "units" / "multi-user.target.wants"
    wants.mkdir()
    (wants / "tablecast-job@retired.service").symlink_to("/lib/systemd/tablecast-job@.service")
    (wants / "tablecast-job@lab.service").symlink_to("/lib/systemd/tablecast-job@.service")
    result = bash(BOOT, env)
    assert result.returncode == 0, result.stderr
    assert "declared jobs: plant lab" in result.stderr
    calls = systemctl_calls(tmp_path)
    started = ["tablecast-job@plant.service", "tablecast-job@lab.service"]
    assert calls["enable"] == calls["restart"]
    assert [u for u in calls["enable"] if u.startswith("tablecast-job")] == started
    assert "tablecast-archiver.service" in calls["enable"]
    stale = calls["disable --now"]
    assert "tablecast-job.service" in stale and "tablecast-job@retired.service" in stale
    assert "tablecast-job@lab.service" not in stale


def test_a_driver_of_an_environment_without_jobs_starts_its_one_job_as_before(
    aws: dict[str, str], tmp_path: Path
) -> None:
    env = driver(tmp_path, aws)  # no SSM jobs: the settings declare none
    result = bash(BOOT, env)
    assert result.returncode == 0, result.stderr
    calls = systemctl_calls(tmp_path)
    assert calls["enable"] == [
        "hdfs-namenode.service",
        "hdfs-secondarynamenode.service",
        "spark-master.service",
        "tablecast-job.service",
        "tablecast-archiver.service",
        "tablecast-hdfs-health.timer",
        "tablecast-hdfs-backup.timer",
    ]
    assert calls["disable --now"] == ["hdfs-datanode.service", "spark-worker.service"]


def test_a_worker_reads_no_jobs(aws: dict[str, str], tmp_path: Path) -> None:
    declare(aws, "prod", "plant")
    env = driver(tmp_path, aws)
    env["TABLECAST_NODE_ENV_FILE"] = str(tmp_path / "node.env")
    node_env = Path(env["TABLECAST_NODE_ENV_FILE"])
    node_env.write_text(node_env.read_text().replace("ROLE=driver", "ROLE=worker"))
    result = bash(BOOT, env)
    assert result.returncode == 0, result.stderr
    assert systemctl_calls(tmp_path)["enable"] == ["hdfs-datanode.service", "spark-worker.service"]
    assert "tablecast-job.service" in systemctl_calls(tmp_path)["disable --now"]


def test_jobs_ssm_does_not_answer_for_start_as_the_one_job_and_fail_the_bootstrap(
    aws: dict[str, str], tmp_path: Path
) -> None:
    env = driver(tmp_path, aws) | {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
    result = bash(BOOT + 'echo "unread: ${JOBS_UNREAD}"', env)
    assert result.returncode == 0, result.stderr
    assert "tablecast-job.service" in systemctl_calls(tmp_path)["enable"]
    (unread,) = [line for line in result.stdout.splitlines() if line.startswith("unread: ")]
    assert unread.startswith("unread: could not read /tablecast/prod/jobs from SSM (")
    assert "no declared job's service is enabled" in unread
    # main ends in that line, exit 1, once the rest has started.
    text = NODE_BOOTSTRAP.read_text()
    assert re.search(r'start_services\n\s+\[\[ -z "\$\{JOBS_UNREAD\}" \]\] \|\| die', text)


def test_a_job_name_ssm_holds_that_is_no_job_name_stops_the_bootstrap(
    aws: dict[str, str], tmp_path: Path
) -> None:
    declare(aws, "prod", "plant,../etc")
    result = bash(BOOT, driver(tmp_path, aws))
    assert result.returncode == 1
    assert "SSM /tablecast/prod/jobs names '../etc', which is not a job's name" in result.stderr
    assert not (tmp_path / "systemctl.log").exists(), "nothing enabled"


def test_each_jobs_service_log_reaches_its_own_log_group(tmp_path: Path) -> None:
    config = tmp_path / "tablecast.json"
    config.write_text(render("cloudwatch-agent.json"))
    env = write_node_env(tmp_path)
    result = bash(
        f'source "{NODE_BOOTSTRAP}"\nload_settings\nDECLARED_JOBS=(plant lab)\n'
        f'add_job_logs "{config}"',
        env,
    )
    assert result.returncode == 0, result.stderr
    collected = json.loads(config.read_text())["logs"]["logs_collected"]["files"]["collect_list"]
    shipped = {entry["file_path"]: entry["log_group_name"] for entry in collected}
    assert shipped["/var/log/tablecast/job.log"] == "/tablecast/prod/job"  # the archiver's
    for job in ("plant", "lab"):
        assert shipped[f"/var/log/tablecast/job-{job}.log"] == handoff.job_log_group("prod", job)
    assert not list(tmp_path.glob("tablecast.json.*")), "no temporary file is left behind"
    # The service's identifier names the file rsyslog writes: the rule matches it (and
    # neither the one job's nor the archiver's), its file template is the one shipped.
    rules = RSYSLOG.read_text()
    (pattern,) = re.findall(r"re_match\(\$programname, '([^']+)'\)", rules)
    (file_template,) = re.findall(r'string="(/var/log/tablecast/job-[^"]+)"', rules)
    start, end = re.findall(r"%programname:(\d+):(\$)%", file_template)[0]
    assert end == "$"
    for job in ("plant", "lab", "a", "lab-2"):
        identifier = unit("tablecast-job@")["SyslogIdentifier"][0].replace("%i", job)
        assert re.fullmatch(pattern, identifier)
        # rsyslog's property replacer counts from 1; "$" is the end.
        written = re.sub(r"%programname:\d+:\$%", identifier[int(start) - 1 :], file_template)
        assert written == f"/var/log/tablecast/job-{job}.log"
    assert rules.index("re_match($programname") < rules.index("startswith 'tablecast-'")
    for other in ("tablecast-job", "tablecast-archiver", "tablecast-job-"):
        assert not re.fullmatch(pattern, other)


def test_node_bootstrap_jobs_takes_a_job_declared_while_the_driver_runs(
    aws: dict[str, str], tmp_path: Path
) -> None:
    """`node-bootstrap jobs`: the agent ships the new job's log, its service is enabled and
    started, the one job's stopped; nothing else is restarted."""
    declare(aws, "prod", "plant,lab")
    env = driver(tmp_path, aws)
    stubs = Path(env["PATH"].split(":", 1)[0])
    ctl = stubs / "amazon-cloudwatch-agent-ctl"
    ctl.write_text(f'#!/bin/sh\necho "$@" >>"{tmp_path}/agent.log"\n')
    ctl.chmod(0o755)
    agent = tmp_path / "agent"
    agent.mkdir()
    env |= {
        "TABLECAST_AGENT_ETC": str(agent),
        "TABLECAST_AGENT_CTL": str(ctl),
        "TABLECAST_TEMPLATES_DIR": str(FILES / "templates"),
    }
    result = bash(f'source "{NODE_BOOTSTRAP}"\njobs_again', env)
    assert result.returncode == 0, result.stderr
    config = json.loads((agent / "tablecast.json").read_text())
    groups = {
        e["log_group_name"] for e in config["logs"]["logs_collected"]["files"]["collect_list"]
    }
    assert {"/tablecast/prod/jobs/plant", "/tablecast/prod/jobs/lab"} <= groups
    assert (tmp_path / "agent.log").read_text().splitlines() == [
        f"-a fetch-config -m ec2 -c file:{agent}/tablecast.json",
        f"-a append-config -m ec2 -s -c file:{agent}/tablecast-metrics.json",
    ]
    calls = systemctl_calls(tmp_path)
    assert calls == {
        "disable --now": ["tablecast-job.service"],
        "enable --now": ["tablecast-job@plant.service", "tablecast-job@lab.service"],
    }
    # A worker has no jobs to take.
    node_env = Path(env["TABLECAST_NODE_ENV_FILE"])
    node_env.write_text(node_env.read_text().replace("ROLE=driver", "ROLE=worker"))
    result = bash(f'source "{NODE_BOOTSTRAP}"\njobs_again', env)
    assert result.returncode == 1
    assert "node-bootstrap jobs runs on the driver (this node is a worker)" in result.stderr
