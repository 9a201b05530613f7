"""Helpers for tests of synthesized stacks: one synth per stack, resources by type, policies.

Tests assert properties that matter on the JSON cdktf writes (what Terraform
gets), not snapshots of whole documents.
"""

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.cdk import App, Testing
from infra.config import EnvironmentConfig
from infra.stacks import EnvironmentStacks, build_environment

Document = dict[str, Any]
_CROSS_STACK_REFERENCE = re.compile(
    r"\$\{data\.terraform_remote_state\.cross-stack-reference-input-(?P<stack>[^.]+)"
    r"\.outputs\.(?P<output>[^}]+)\}"
)


@dataclass(frozen=True)
class SynthesizedStack:
    """One stack's synthesized Terraform JSON."""

    name: str
    text: str
    """As cdktf wrote it, for ``cdktf.Testing`` matchers."""
    document: Document
    """Parsed."""

    def resources(self, resource_type: str) -> dict[str, Document]:
        """This stack's resources of ``resource_type``, by logical id."""
        return _entries(self.document.get("resource", {}).get(resource_type, {}))

    def data_sources(self, data_type: str) -> dict[str, Document]:
        """This stack's data sources of ``data_type``, by logical id."""
        return _entries(self.document.get("data", {}).get(data_type, {}))

    def outputs(self) -> dict[str, Document]:
        """This stack's outputs, by name."""
        return dict(self.document.get("output", {}))

    def has_resource(self, resource_type: str, properties: Mapping[str, Any]) -> bool:
        """cdktf's matcher: some resource of the type has these properties."""
        return Testing.to_have_resource_with_properties(self.text, resource_type, dict(properties))


@dataclass(frozen=True)
class SynthesizedEnvironment:
    """Every stack of one environment, synthesized once."""

    config: EnvironmentConfig
    stacks: EnvironmentStacks
    synthesized: dict[str, SynthesizedStack]
    """By component: ``network``, ``storage``, ``kafka``, ``spark``, ``monitoring``, ``handoff``."""

    def __getitem__(self, component: str) -> SynthesizedStack:
        return self.synthesized[component]

    def follow(self, value: str) -> str:
        """``value`` with each cross-stack reference replaced by what the other stack exports.

        ``${data.terraform_remote_state.<input>.outputs.<output>}`` becomes, e.g.,
        ``${aws_security_group.brokers-security-group.id}``.
        """
        stacks = {stack.name: stack for stack in self.synthesized.values()}

        def exported(match: re.Match[str]) -> str:
            output = stacks[match["stack"]].outputs()[match["output"]]
            return str(output["value"])

        return _CROSS_STACK_REFERENCE.sub(exported, value)

    def all_resources(self, resource_type: str) -> Iterator[tuple[str, Document]]:
        """``(stack name, resource)`` for every resource of the type in any stack."""
        for stack in self.synthesized.values():
            for resource in stack.resources(resource_type).values():
                yield stack.name, resource


def synthesize(
    configs: Sequence[EnvironmentConfig], outdir: Path
) -> dict[str, SynthesizedEnvironment]:
    """Synthesize the environments as ``make synth`` does, into ``outdir``, and read them back.

    The stacks are read from the files ``app.synth()`` writes, cross-stack
    references included, so tests see exactly what Terraform and checkov get.
    """
    app = App(outdir=str(outdir), stack_traces=False)
    built = {config.name: build_environment(app, config) for config in configs}
    app.synth()
    return {
        config.name: SynthesizedEnvironment(
            config=config,
            stacks=built[config.name],
            synthesized={
                stack.stack_name.removeprefix(f"{config.resource_prefix}-"): _read(
                    outdir, stack.stack_name
                )
                for stack in built[config.name].all()
            },
        )
        for config in configs
    }


def _read(outdir: Path, stack_name: str) -> SynthesizedStack:
    text = (outdir / "stacks" / stack_name / "cdk.tf.json").read_text()
    return SynthesizedStack(name=stack_name, text=text, document=json.loads(text))


def policy_statements(policy: str) -> list[Document]:
    """The statements of a policy document given as JSON text."""
    statements = json.loads(policy)["Statement"]
    return [statements] if isinstance(statements, dict) else list(statements)


def as_list(value: Any) -> list[Any]:
    """A policy field that may be one value or a list, as a list."""
    return list(value) if isinstance(value, list) else [value]


def _entries(block: Mapping[str, Any]) -> dict[str, Document]:
    return {name: body for name, body in block.items() if name != "//"}
