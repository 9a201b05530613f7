"""docs/infra.md: its commands work as written."""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "infra.md"


def test_cdktf_diff_is_given_one_stack() -> None:
    # `cdktf diff` takes exactly one stack; a pattern fails.
    diffs = re.findall(r"cdktf-cli@[\d.]+ diff (\S+)", DOCS.read_text(encoding="utf-8"))
    assert diffs
    assert all("*" not in stack for stack in diffs), diffs
