"""The AWS services the Spark nodes call, read from the code that runs on them.

The VPC has no route to the internet, so every service the nodes call needs
an endpoint; this module derives the services from the code instead of a list
someone keeps, so that a service added to the code is a service the test
checks (tests/infra/test_infra_node_routes.py). It reads:

- **boto3's clients and resources** (``boto3.client("glue")``,
  ``session.client("ssm", ...)``) in every Python module of ``app/`` (the
  job's wheel, which the driver's tools run too) and of ``ami/files``, and in
  the Python the image's shell programs run (``<<'PY'`` heredocs of
  ``ami/files/bin``);
- **libraries that call AWS themselves**: a pyiceberg catalog's ``"type"``
  (its Glue catalog is a boto3 Glue client), pyarrow's ``S3FileSystem``;
- **the agents the image runs**: a CloudWatch agent configuration with
  ``logs_collected`` ships logs, one with ``metrics_collected`` publishes
  metrics; the tools' ``send_command`` runs on the nodes' SSM agent, which
  talks to SSM and its message services.

A call made only for one Kafka sign-in sits in a function named for it
(``scram_credentials``): its service is needed only where the environment's
job signs in so.
"""

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import botocore.session

from app.sources.kafka_client import KafkaAuth

ROOT = Path(__file__).resolve().parents[2]
NODE_CODE = (ROOT / "app", ROOT / "ami" / "files")
NOT_ON_NODES = {
    ROOT / "app" / "local": "the pipeline on one machine: an operator's machine and moto",
    ROOT / "app" / "ops" / "pipelines.py": "tablecast-ops pipelines runs from a checkout only "
    "(it reads infra/'s settings; the wheel's refuses it)",
}
"""Code the wheel carries that never runs on a node, and why."""
CATALOG_SERVICES = {"glue": "glue", "dynamodb": "dynamodb"}
"""pyiceberg's catalog types that are AWS services (``"sql"``, ``"rest"`` are not)."""
SSM_AGENT = ("ssm", "ssmmessages", "ec2messages")
"""What the SSM agent calls to take Run Commands and sessions (not boto3's: its own Go SDK)."""
_HEREDOC = re.compile(r"<<-?'?(?P<word>[A-Z]+)'?\n(?P<body>.*?)\n(?P=word)$", re.DOTALL | re.M)


@dataclass(frozen=True)
class Call:
    """One AWS service the nodes' code calls."""

    service: str
    """boto3's name for it (``cloudwatch``), or an agent's endpoint name (``ssmmessages``)."""
    where: str
    """``path:line`` of the call."""
    only_with: KafkaAuth | None = None
    """The Kafka sign-in it is made for, or None: always."""

    @property
    def endpoint(self) -> str:
        """The service's endpoint name, as ``com.amazonaws.<region>.<name>`` takes it."""
        if self.service in SSM_AGENT:
            return self.service
        model = botocore.session.get_session().get_service_model(self.service)
        return str(model.metadata["endpointPrefix"])


def node_calls() -> list[Call]:
    """Every AWS call the code that runs on the nodes makes."""
    return [call for where, source in python_sources() for call in calls_in(source, where)] + list(
        agent_calls()
    )


def python_sources() -> Iterator[tuple[str, str]]:
    """``(where, Python source)`` of every module and heredoc that runs on a node."""
    for root in NODE_CODE:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or any(path.is_relative_to(p) for p in NOT_ON_NODES):
                continue
            where = str(path.relative_to(ROOT))
            if path.suffix == ".py":
                yield where, path.read_text(encoding="utf-8")
            elif path.parent.name == "bin":
                text = path.read_text(encoding="utf-8")
                if text.startswith("#!") and "python" in text.splitlines()[0]:
                    yield where, text
                    continue
                for match in _HEREDOC.finditer(text):
                    line = text[: match.start("body")].count("\n") + 1
                    yield f"{where}:{line}", match["body"]


def calls_in(source: str, where: str) -> Iterator[Call]:
    """The calls in one Python source (one that does not parse is some other language)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for function, node in _nodes(tree, None):
        only_with = _sign_in(function)
        at = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("client", "resource") and _first_string(node) is not None:
                yield Call(str(_first_string(node)), at, only_with)
            elif node.func.attr == "send_command":
                yield from (Call(service, at) for service in SSM_AGENT)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if _string(key) == "type" and _string(value) in CATALOG_SERVICES:
                    yield Call(CATALOG_SERVICES[str(_string(value))], at, only_with)
        elif isinstance(node, ast.Attribute | ast.Name) and _name(node) == "S3FileSystem":
            yield Call("s3", at, only_with)


def agent_calls() -> Iterator[Call]:
    """The CloudWatch agent's, from every configuration of it the image carries."""
    for path in sorted((ROOT / "ami" / "files").rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        bodies = [text] + [match["body"] for match in _HEREDOC.finditer(text)]
        for body in bodies:
            try:
                config = json.loads(body)
            except ValueError:
                continue
            where = str(path.relative_to(ROOT))
            if isinstance(config, dict) and "logs_collected" in config.get("logs", {}):
                yield Call("logs", where)
            if isinstance(config, dict) and "metrics_collected" in config.get("metrics", {}):
                yield Call("cloudwatch", where)


def _nodes(node: ast.AST, function: str | None) -> Iterator[tuple[str | None, ast.AST]]:
    """Every node with the name of the function it is in."""
    for child in ast.iter_child_nodes(node):
        inner = (
            child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
        )
        yield inner, child
        yield from _nodes(child, inner)


def _sign_in(function: str | None) -> KafkaAuth | None:
    words = set((function or "").split("_"))
    found = [auth for auth in KafkaAuth if auth.value in words and auth is not KafkaAuth.NONE]
    return found[0] if len(found) == 1 else None


def _first_string(call: ast.Call) -> str | None:
    return _string(call.args[0]) if call.args else None


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _name(node: ast.Attribute | ast.Name) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id
