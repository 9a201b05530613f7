"""One module per stack; ``build_environment`` wires an environment's stacks together."""

from infra.stacks.base import EnvironmentStack
from infra.stacks.environment import EnvironmentStacks, build_environment

__all__ = ["EnvironmentStack", "EnvironmentStacks", "build_environment"]
