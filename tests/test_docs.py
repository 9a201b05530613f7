"""The docs as reference: the exit codes the README lists are the tools' own, and every
command line the README and the how-to guides show is one the tools take as written."""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import cli
from app.errors import exit_code_table
from app.ops import cli as ops_cli

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ("README.md", "docs/operations.md", "docs/observability.md")
# How the guides spell each tool at the start of a command line.
TOOLS = {
    "tablecast": "tablecast",
    ".venv/bin/tablecast": "tablecast",
    "/opt/tablecast/venv/bin/tablecast": "tablecast",
    "tablecast-ops": "tablecast-ops",
    ".venv/bin/tablecast-ops": "tablecast-ops",
    "scripts/tablecast_ops.py": "tablecast-ops",
    "ops": "tablecast-ops",
    "$ops": "tablecast-ops",
}


def shell_lines(text: str) -> Iterator[str]:
    """The lines of every ```sh block, continuations joined."""
    for block in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M):
        yield from block.replace("\\\n", " ").splitlines()


def command_lines(name: str) -> Iterator[tuple[str, list[str]]]:
    """(tool, arguments) of every command line of a tool in the guide ``name``."""
    for line in shell_lines((ROOT / name).read_text(encoding="utf-8")):
        words = shlex.split(line, comments=True)
        if words[:2] == [".venv/bin/python", "scripts/tablecast_ops.py"]:
            words = words[1:]
        if len(words) > 1 and words[0] in TOOLS and not words[1].endswith(":"):
            yield TOOLS[words[0]], words[1:]


def test_the_readme_lists_the_exit_codes_the_tools_exit_with() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert exit_code_table(markdown=True) in readme


def test_every_command_the_guides_show_is_taken_as_written() -> None:
    parsers = {"tablecast": cli.build_parser(), "tablecast-ops": ops_cli.build_parser()}
    shown = [(name, tool, argv) for name in GUIDES for tool, argv in command_lines(name)]
    # The how-to guides show every command of tablecast.
    commands = {argv[0] for _, tool, argv in shown if tool == "tablecast"}
    assert commands == {a.dest for a in _subcommands(parsers["tablecast"])}
    for name, tool, argv in shown:
        try:
            parsers[tool].parse_args(argv)
        except SystemExit:
            pytest.fail(f"{name}: `{tool} {shlex.join(argv)}` is not a command {tool} takes")


def _subcommands(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The subcommands of a tool, as argparse keeps them (each one's dest is its name)."""
    [found] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(found._choices_actions)
