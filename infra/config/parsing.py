"""Parsers for the configuration's text fields; each raises ``ValueError`` with the reason."""

import re

from app.defaults import MAX_RETIRE_GRACE_S

_TRIGGER = re.compile(r"^(\d+)\s+(second|seconds|minute|minutes|hour|hours)$")
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600}
# Characters of a topic name that are literal in a regular expression; an
# unescaped '.' (any character) or any other syntax ends the literal prefix.
_TOPIC_CHAR = re.compile(r"[A-Za-z0-9_-]")
_QUANTIFIERS = frozenset("?*{")


def trigger_seconds(text: str) -> int:
    """Seconds of a Spark processing-time trigger written as ``"<n> <unit>"``.

    Only the forms Spark's ``Trigger.ProcessingTime`` and our alarms agree on:
    ``"30 seconds"``, ``"1 minute"``, ``"2 hours"``.
    """
    match = _TRIGGER.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not '<n> seconds|minutes|hours'")
    count, unit = int(match.group(1)), match.group(2).removesuffix("s")
    return count * _UNIT_SECONDS[unit]


def retire_grace_seconds(text: str) -> int:
    """Seconds of the job's ``--retire-grace``, 0 to 1 hour, written as the trigger is
    (``"10 minutes"``): a form the job's own parser takes as it is."""
    seconds = trigger_seconds(text)
    if seconds > MAX_RETIRE_GRACE_S:
        raise ValueError(
            f"{text!r} is over {MAX_RETIRE_GRACE_S:g} seconds: plain-listing readers see the "
            "rewritten blocks twice until it ends"
        )
    return seconds


_HISTORY = re.compile(r"^(\d+)\s+(second|seconds|minute|minutes|hour|hours|day|days)$")


def table_history_seconds(text: str) -> int:
    """Seconds of the job's ``--table-history`` written as ``"<n> <unit>"`` up to days
    (``"5 days"``): a form the job's own parser takes as it is."""
    match = _HISTORY.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not '<n> seconds|minutes|hours|days'")
    count, unit = int(match.group(1)), match.group(2).removesuffix("s")
    return count * {**_UNIT_SECONDS, "day": 86400}[unit]


def topic_prefix(pattern: str) -> str:
    """The literal prefix every topic that ``pattern`` matches starts with.

    IAM scopes the job's Kafka permissions to ``topic/<cluster>/<uuid>/<prefix>*``,
    so the pattern must be anchored and start with a literal; ``"^sensor-.+"``
    gives ``"sensor-"``.
    """
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
    if not pattern.startswith("^"):
        raise ValueError(f"{pattern!r} must be anchored with '^'")
    if _has_top_level_alternation(pattern):
        raise ValueError(f"{pattern!r} has a top-level '|': one literal prefix must cover it")
    prefix: list[str] = []
    position = 1
    while position < len(pattern):
        char = pattern[position]
        if char == "\\" and position + 1 < len(pattern) and pattern[position + 1] in ".-_":
            prefix.append(pattern[position + 1])
            position += 2
        elif _TOPIC_CHAR.match(char):
            prefix.append(char)
            position += 1
        else:
            break
    # A quantifier right after the prefix makes its last character optional.
    if prefix and position < len(pattern) and pattern[position] in _QUANTIFIERS:
        prefix.pop()
    if not prefix:
        raise ValueError(f"{pattern!r} must start with a literal topic prefix after '^'")
    return "".join(prefix)


def _has_top_level_alternation(pattern: str) -> bool:
    depth = 0
    escaped = False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            return True
    return False
