"""The options that shape a generated capture, one definition for every command that makes
one: ``tablecast generate`` (into an archive), ``tablecast-ops produce`` and ``test-run``
(to Kafka).

Each command gives its defaults as a :class:`~app.tools.generate.CaptureSpec` (generate's
and produce's are the spec's own, a test run's are larger) and the options it takes;
:func:`add_capture_options` declares them with one name and one help each, the default
shown from that spec, and :func:`capture_spec` reads them back into a spec.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Collection
from enum import Enum
from typing import Any

from app.cli.parsing import hidden_alias, natural, positive
from app.tools.generate import CaptureSpec, Fault


class Shape(Enum):
    """The options beyond the ones every command takes (topics, partitions, prefix,
    sessions, rows, updates, resync, seed)."""

    FAULTS = "fault"
    """``--fault KIND``, repeatable: a violation of that kind."""
    LAYOUT = "layout"
    """``--concurrent-sessions`` and ``--records-per-file``: how an archive is laid out."""


def add_capture_options(
    parser: argparse.ArgumentParser,
    defaults: CaptureSpec,
    *,
    shapes: Collection[Shape] = (),
    faults: Collection[Fault] = tuple(Fault),
    topics_alias: str = "--topics",
    partitions_default: str | None = None,
    prefix_default: str | None = None,
) -> None:
    """Declare the capture's options on ``parser``, their defaults ``defaults``'.

    :param shapes: the options beyond the common ones this command takes.
    :param faults: the kinds ``--fault`` takes (with :attr:`Shape.FAULTS`).
    :param topics_alias: the hidden older name of ``--topic-count``.
    :param partitions_default: where ``--partitions`` has no fixed default, what it takes
        instead (said in its help) [``defaults.partitions``].
    :param prefix_default: likewise for ``--prefix`` [``defaults.prefix``].
    """
    count = parser.add_mutually_exclusive_group()
    count.add_argument(
        "--topic-count",
        type=positive,
        default=defaults.topics,
        metavar="N",
        help=f"topics <prefix>0 to <prefix>N-1 [{defaults.topics}]",
    )
    hidden_alias(count, topics_alias, "topic_count", type=positive)
    partitions = partitions_default or defaults.partitions
    parser.add_argument(
        "--partitions",
        type=positive,
        default=None if partitions_default else defaults.partitions,
        help=f"per topic, the sessions spread over them [{partitions}]",
    )
    parser.add_argument(
        "--prefix",
        default=None if prefix_default else defaults.prefix,
        help=f"the topics' names' start [{prefix_default or defaults.prefix}]",
    )

    def number(flag: str, kind: Callable[[str], int], default: int, text: str) -> None:
        parser.add_argument(flag, type=kind, default=default, metavar="N", help=text)

    number("--sessions", positive, defaults.sessions, f"in all [{defaults.sessions}]")
    if Shape.LAYOUT in shapes:
        number(
            "--concurrent-sessions",
            positive,
            defaults.concurrent,
            f"sessions active at once in a partition [{defaults.concurrent}]",
        )
    number(
        "--rows-min",
        positive,
        defaults.rows_min,
        f"fewest rows in a session's table [{defaults.rows_min}]",
    )
    number(
        "--rows-max",
        positive,
        defaults.rows_max,
        f"most rows in a session's table [{defaults.rows_max}]",
    )
    number(
        "--updates",
        natural,
        defaults.updates,
        f"update messages per session, before its end [{defaults.updates}]",
    )
    number(
        "--resync-every",
        natural,
        defaults.resync_every,
        f"a resync snapshot every N messages of a session [{defaults.resync_every or '0: none'}]",
    )
    if Shape.LAYOUT in shapes:
        number(
            "--records-per-file",
            positive,
            defaults.records_per_file,
            f"records per archive file [{defaults.records_per_file}]",
        )
    parser.add_argument(
        "--seed",
        type=int,
        default=defaults.seed,
        help=f"the same seed, the same sessions [{defaults.seed}]",
    )
    if Shape.FAULTS in shapes:
        kinds = [fault.value for fault in faults]
        parser.add_argument(
            "--fault",
            action="append",
            default=[],
            choices=kinds,
            metavar="KIND",
            help=f"inject one violation of this kind ({', '.join(kinds)}); repeatable [none]",
        )


def capture_spec(args: argparse.Namespace, defaults: CaptureSpec, **given: Any) -> CaptureSpec:
    """The spec the options in ``args`` give over ``defaults`` (an option a command does not
    take keeps the default), then ``given`` (what the command decides: the schema, a start
    time, partitions or a prefix it found). ``None``, given or parsed, keeps the default: no
    field of a spec is optional."""
    found: dict[str, Any] = {
        "topics": args.topic_count,
        "partitions": args.partitions,
        "prefix": args.prefix,
        "sessions": args.sessions,
        "rows_min": args.rows_min,
        "rows_max": max(args.rows_min, args.rows_max),
        "updates": args.updates,
        "resync_every": args.resync_every,
        "seed": args.seed,
        "concurrent": getattr(args, "concurrent_sessions", defaults.concurrent),
        "records_per_file": getattr(args, "records_per_file", defaults.records_per_file),
        "faults": tuple(Fault(kind) for kind in getattr(args, "fault", ())),
    }
    chosen = {name: value for name, value in (found | given).items() if value is not None}
    return dataclasses.replace(defaults, **chosen)
