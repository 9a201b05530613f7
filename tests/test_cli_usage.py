"""Both tools as a newcomer meets them, run as processes: wrong options on purpose, --help,
--version, paths that are not there or not of a scheme the option takes, a closed pipe,
missing AWS settings. Each is one line with its documented exit code, and nothing is
written where it should not be."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
from pathlib import Path

import pytest

from app import cli
from app.cli.capture import capture_spec
from app.cli.parsing import CommandParser
from app.contract.offsets import TopicPartition
from app.errors import ExitCode, exit_code_table
from app.ops import cli as ops_cli
from app.ops import test_run
from app.sink import ledger as ledger_mod
from app.sink.ledger import Ledger, LedgerEntry
from app.sources import archive
from app.storage import resolve
from app.tools.generate import CaptureSpec
from tests.command_lines import TABLECAST, TABLECAST_OPS, run, without_aws


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    """The one line of standard error of a command that exited ``code``, having printed
    nothing else."""
    assert (result.returncode, result.stdout) == (code, ""), result.stderr
    [line] = result.stderr.splitlines()
    return line


@pytest.mark.parametrize(
    ("tool", "argv", "said"),
    [
        (
            TABLECAST,
            [
                "run",
                "--archive",
                "a",
                "--output",
                "o",
                "--checkpoint",
                "c",
                "--integrity",
                "relaxed",
            ],
            "tablecast run: argument --integrity: invalid choice: 'relaxed' (choose from "
            "'strict', 'resync', 'ordered', 'once', 'none') (see `tablecast run --help`)",
        ),
        (
            TABLECAST,
            ["run", "--output", "o", "--checkpoint", "c", "--max-offsets-per-trigger", "-5"],
            "tablecast run: argument --max-offsets-per-trigger: -5 is below zero "
            "(see `tablecast run --help`)",
        ),
        (
            TABLECAST,
            ["verify", "--archive", "a", "--outptu", "o"],
            "tablecast verify: the following arguments are required: --output "
            "(see `tablecast verify --help`)",
        ),
        (
            TABLECAST,
            [],
            "tablecast: the following arguments are required: COMMAND (see `tablecast --help`)",
        ),
        (
            TABLECAST_OPS,
            ["status"],
            "tablecast-ops status: the following arguments are required: --environment/-e "
            "(see `tablecast-ops status --help`)",
        ),
        (
            TABLECAST_OPS,
            ["produce", "--topic-count", "0"],
            "tablecast-ops produce: argument --topic-count: 0 is not a positive number "
            "(see `tablecast-ops produce --help`)",
        ),
        (  # a topic names an archive's folder: this one wrote a/../x0, beside the archive
            TABLECAST,
            ["generate", "--archive", "a", "--prefix", "../x"],
            "tablecast generate: --prefix '../x': topic '../x1' is not a Kafka topic name "
            "(ASCII letters, digits, '.', '_' and '-', at most 249)",
        ),
        (  # a typo's count of topics: it made a folder each, for hours
            TABLECAST,
            ["generate", "--archive", "a", "--topic-count", "99999999999"],
            "tablecast generate: --topic-count 99999999999: at most 10,000",
        ),
        (  # a float's spelling that is no rate: it was taken as "no limit"
            TABLECAST_OPS,
            ["produce", "--rate", "nan"],
            "tablecast-ops produce: argument --rate: nan is not a rate (a number, zero or more) "
            "(see `tablecast-ops produce --help`)",
        ),
        (
            TABLECAST_OPS,
            ["test-run", "--rate", "-5"],
            "tablecast-ops test-run: argument --rate: -5 is not a rate (a number, zero "
            "or more) (see `tablecast-ops test-run --help`)",
        ),
    ],
)
def test_a_mistyped_option_is_one_line_exit_64_and_a_pointer_to_help(
    tool: tuple[str, ...], argv: list[str], said: str, tmp_path: Path
) -> None:
    assert _one_line(run(tool, *argv, cwd=tmp_path), 64) == said
    assert list(tmp_path.iterdir()) == []


def test_both_tools_say_their_version() -> None:
    from app.code_version import job_version

    for tool in (TABLECAST, TABLECAST_OPS):
        result = run(tool, "--version", cwd=Path.cwd())
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout == f"{job_version().describe()}\n"
        assert result.stdout.startswith("tablecast ")


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every command of a tool, by its prog (``tablecast run``, ``tablecast-ops topics
    create``), the tool itself included."""
    found = {parser.prog: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found.update(_commands(sub))
    return found


def test_every_help_says_what_the_command_does_with_examples_every_default_and_the_exit_codes(
    tmp_path: Path,
) -> None:
    table = exit_code_table()
    commands = {**_commands(cli.build_parser()), **_commands(ops_cli.build_parser())}
    assert len(commands) == 10 + 13
    for prog, parser in commands.items():
        assert isinstance(parser, CommandParser), prog
        assert parser.description, prog
        help_text = parser.format_help()
        assert "examples:\n  " in help_text and help_text.rstrip().endswith(table.rstrip()), prog
        # One of a required group (repair's --archive or --bootstrap-servers) has no default.
        chosen = {
            a for g in parser._mutually_exclusive_groups if g.required for a in g._group_actions
        }
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(
                action, argparse._HelpAction | argparse._SubParsersAction
            ):
                continue
            shown = "/".join(action.option_strings) or action.dest
            assert action.help, f"{prog} {shown} has no help"
            flag = action.nargs == 0  # --dry-run, --version: nothing to default
            if not (action.required or flag or not action.option_strings or action in chosen):
                assert "[" in action.help, f"{prog} {shown} does not name its default"
    # As the user sees it: the table ends `tablecast run --help`.
    result = run(TABLECAST, "run", "--help", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.rstrip().endswith(table.rstrip())
    assert "--max-offsets-per-trigger N" in result.stdout and "[500000]" in result.stdout


SHAPING = (
    "--topic-count",
    "--partitions",
    "--prefix",
    "--sessions",
    "--rows-min",
    "--rows-max",
    "--updates",
    "--resync-every",
    "--seed",
)
MAKERS = ("tablecast generate", "tablecast-ops produce", "tablecast-ops test-run")


def test_the_options_that_shape_a_capture_read_alike_in_every_command_that_makes_one() -> None:
    commands = {**_commands(cli.build_parser()), **_commands(ops_cli.build_parser())}
    found = {
        prog: {a.option_strings[0]: a for a in commands[prog]._actions if a.option_strings}
        for prog in MAKERS
    }
    for option in SHAPING:
        actions = [found[prog][option] for prog in MAKERS]
        # One name, one type, one help but for the default each command shows.
        assert len({(a.dest, a.type, a.metavar) for a in actions}) == 1, option
        assert len({(a.help or "").partition(" [")[0] for a in actions}) == 1, option
        for prog, action in zip(MAKERS, actions, strict=True):
            if action.default is not None:
                shown = (action.help or "").rpartition("[")[2]
                assert shown.startswith(str(action.default)), (prog, option, action.help)
    # The defaults read back are the spec's each command declares.
    generate = cli.build_parser().parse_args(["generate", "--archive", "a"])
    assert capture_spec(generate, CaptureSpec()) == CaptureSpec()
    test_run_args = ops_cli.build_parser().parse_args(["test-run", "-e", "x"])
    assert capture_spec(test_run_args, test_run.LOAD, prefix="p-") == dataclasses.replace(
        test_run.LOAD, prefix="p-"
    )
    # What a command found nothing for (None) keeps the default, as an option not given does.
    assert capture_spec(test_run_args, test_run.LOAD, prefix=None) == test_run.LOAD
    # Options a command takes alone stay its own.
    assert "--concurrent-sessions" in found["tablecast generate"]
    assert "--fault" not in found["tablecast-ops test-run"]
    faults = {
        a.option_strings[0]: a
        for a in commands["tablecast-ops produce"]._actions
        if a.option_strings
    }["--fault"].choices
    assert faults is not None and "archive-hole" not in faults


def test_the_exit_code_table_holds_every_code_an_error_can_exit_with() -> None:
    import importlib
    import pkgutil

    import app
    from app.errors import TablecastError

    for module in pkgutil.walk_packages(app.__path__, "app."):
        if not module.name.endswith("__main__"):  # those run their tool
            importlib.import_module(module.name)

    def subclasses(cls: type[TablecastError]) -> list[type[TablecastError]]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    errors = subclasses(TablecastError)
    assert len(errors) > 20
    for error in errors:
        assert error.exit_code in set(ExitCode), error
    assert len({int(code) for code in ExitCode}) == len(ExitCode)
    assert "  64   bad usage" in exit_code_table()


def test_old_spellings_are_still_read_but_no_longer_shown(tmp_path: Path) -> None:
    tablecast, ops = cli.build_parser(), ops_cli.build_parser()
    pairs = [
        (tablecast, ["generate", "--archive", "a", "--topics", "3"], "topic_count", 3),
        (ops, ["produce", "--sources", "3"], "topic_count", 3),
        (ops, ["test-run", "-e", "x", "--topics", "3"], "topic_count", 3),
        (ops, ["archive", "--group-id", "g"], "consumer_group", "g"),
        (ops, ["archive", "--timeout", "90s"], "catch_up_timeout", 90.0),
        (ops, ["test-run", "-e", "x", "--timeout", "2 minutes"], "catch_up_timeout", 120.0),
    ]
    for parser, argv, dest, value in pairs:
        old = vars(parser.parse_args(argv))
        assert old[dest] == value, argv
        renamed = {
            "--topics": "--topic-count",
            "--sources": "--topic-count",
            "--group-id": "--consumer-group",
            "--timeout": "--catch-up-timeout",
        }
        assert vars(parser.parse_args([renamed.get(a, a) for a in argv])) == old
        help_text = run(
            TABLECAST if parser is tablecast else TABLECAST_OPS, argv[0], "--help", cwd=tmp_path
        ).stdout
        old_name = next(a for a in argv if a in renamed)
        assert old_name not in help_text.replace("--topics A,B", "") and renamed[old_name] in (
            help_text
        )
    # --region before the subcommand, as tablecast-ops took it, or after, as tablecast does.
    for argv in (
        ["--region", "eu-west-1", "status", "-e", "dev"],
        ["status", "-e", "dev", "--region", "eu-west-1"],
    ):
        assert ops.parse_args(argv).region == "eu-west-1"


def test_one_duration_syntax_everywhere() -> None:
    from app.spark.job import Trigger, TriggerKind

    for spelled in ("processing-time=30s", "processing-time=30 seconds", "30 sec"):
        assert Trigger.parse(spelled) == Trigger(TriggerKind.PROCESSING_TIME, "30 seconds")
    assert Trigger.parse("processing-time=1h").interval == "1 hour"
    assert Trigger.parse("processing-time=90 minutes").interval == "90 minutes"
    for text in ("1h", "60 minutes", "3600s", "3600000ms"):
        assert cli.parse_duration_ms(text) == 3_600_000
    args = ops_cli.build_parser().parse_args(["archive", "--max-wait", "1h"])
    assert args.max_wait == 3600.0


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["run", "--archive", "a", "--output", "s4://bucket/x", "--checkpoint", "c"],
            "tablecast run: --output 's4://bucket/x': give a local path or s3://bucket/prefix; "
            "s4:// is not supported there",
        ),
        (
            ["run", "--archive", "a", "--output", "o", "--checkpoint", "s3://bucket/c"],
            "tablecast run: --checkpoint 's3://bucket/c': give a local path or "
            "hdfs://namenode/path; s3:// is not supported there",
        ),
        (
            ["verify", "--archive", "gs://bucket/a", "--output", "o"],
            "tablecast verify: --archive 'gs://bucket/a': give a local path or "
            "s3://bucket/prefix; gs:// is not supported there",
        ),
        (
            ["run", "--archive", "a", "--output", "o", "--checkpoint", "c-pkg:Class"],
            "tablecast run: --checkpoint 'c-pkg:Class': Spark reads the part before ':' as a "
            "URI scheme; give it as ./c-pkg:Class",
        ),
        (
            ["generate", "--archive", "gs://bucket/a"],
            "tablecast generate: --archive 'gs://bucket/a': give a local path or "
            "s3://bucket/prefix; gs:// is not supported there",
        ),
    ],
)
def test_a_path_of_a_scheme_the_option_does_not_take_is_refused_creating_nothing(
    argv: list[str], said: str, tmp_path: Path
) -> None:
    assert _one_line(run(TABLECAST, *argv, cwd=tmp_path), 64) == said
    assert list(tmp_path.iterdir()) == []


def test_the_operator_tools_check_paths_too(tmp_path: Path) -> None:
    argv = ["archive", "--bootstrap-servers", "127.0.0.1:9", "--archive", "s4://b/a"]
    assert _one_line(run(TABLECAST_OPS, *argv, cwd=tmp_path), 64) == (
        "tablecast-ops archive: --archive 's4://b/a': give a local path or s3://bucket/prefix; "
        "s4:// is not supported there"
    )
    assert list(tmp_path.iterdir()) == []


def test_an_output_in_the_archive_is_refused_before_anything_runs(tmp_path: Path) -> None:
    # The run's start-up check would see the archive's files as strays to delete.
    (tmp_path / "archive" / "sensor-0").mkdir(parents=True)
    for argv in (
        ["run", "--archive", "archive", "--output", "archive/", "--checkpoint", "ckpt"],
        ["run", "--archive", "./archive", "--output", "archive/out", "--checkpoint", "ckpt"],
        ["verify", "--archive", "archive/", "--output", "archive"],
    ):
        line = _one_line(run(TABLECAST, *argv, cwd=tmp_path), 64)
        assert line == (
            f"tablecast {argv[0]}: --output {argv[argv.index('--output') + 1]} and --archive "
            f"{argv[argv.index('--archive') + 1]} overlap: the output is a folder of its own, "
            "never inside the archive"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive"]
    assert [p.name for p in (tmp_path / "archive").iterdir()] == ["sensor-0"]
    # A sibling whose name starts with the archive's is its own folder.
    beside = run(
        TABLECAST, "verify", "--archive", "archive", "--output", "archive-out", cwd=tmp_path
    )
    assert _one_line(beside, 64) == "tablecast verify: output archive-out does not exist"


def test_an_output_and_a_checkpoint_one_inside_the_other_are_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    """A run with the checkpoint in the output's folder (or the other way round) wrote both
    there: readers of the dataset met Spark's offsets and state files, and the checkpoint
    moved aside, as a refused start advises, took the output along."""
    (tmp_path / "archive" / "sensor-0").mkdir(parents=True)
    both = "the output and the checkpoint are folders of their own, never one inside the other"
    for output, checkpoint in (("out", "out/"), ("out/rows", "out"), ("out", "./out/ckpt")):
        argv = ["run", "--archive", "archive", "--output", output, "--checkpoint", checkpoint]
        assert _one_line(run(TABLECAST, *argv, cwd=tmp_path), 64) == (
            f"tablecast run: --output {output} and --checkpoint {checkpoint} overlap: {both}"
        )
    argv = ["run", "--archive", "archive", "--output", "out", "--checkpoint", "archive/ckpt"]
    assert _one_line(run(TABLECAST, *argv, cwd=tmp_path), 64) == (
        "tablecast run: --archive archive and --checkpoint archive/ckpt overlap: the archive "
        "and the checkpoint are folders of their own, never one inside the other"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive"]
    assert [p.name for p in (tmp_path / "archive").iterdir()] == ["sensor-0"]


def test_commands_that_read_an_output_refuse_a_missing_one_and_create_nothing(
    tmp_path: Path,
) -> None:
    (tmp_path / "archive").mkdir()
    paths = ["--archive", "archive", "--output", "nosuch"]
    window = ["--since", "2026-01-01T00:00:00Z", "--until", "2026-01-02T00:00:00Z"]
    for argv in (
        ["table", "--output", "nosuch"],
        ["compact", "--output", "nosuch"],
        ["verify", *paths],
        ["replay", *paths, *window],
        ["repair", *paths, "--checkpoint", "ckpt", "--dry-run"],
        ["inspect", "--output", "nosuch", "--checkpoint", "ckpt"],
        ["correct", *paths, "--version", "1.0", "--dry-run"],
    ):
        line = _one_line(run(TABLECAST, *argv, cwd=tmp_path), 64)
        assert line == f"tablecast {argv[0]}: output nosuch does not exist"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["archive"]
    assert list((tmp_path / "archive").iterdir()) == []


def test_table_refuses_a_folder_that_is_not_an_output(tmp_path: Path) -> None:
    generated = run(TABLECAST, "generate", "--archive", "archive", "--sessions", "2", cwd=tmp_path)
    assert generated.returncode == 0, generated.stderr
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    for command in ("table", "compact"):
        assert _one_line(run(TABLECAST, command, "--output", "archive", cwd=tmp_path), 64) == (
            f"tablecast {command}: archive is not a tablecast output (it has no "
            "_tablecast/ledger/): give the --output that `tablecast run` writes"
        )
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_generate_refuses_an_archive_that_holds_topics_unless_it_adds_new_ones(
    tmp_path: Path,
) -> None:
    small = ["--sessions", "2", "--updates", "3"]
    assert run(TABLECAST, "generate", "--archive", "archive", *small, cwd=tmp_path).returncode == 0
    files = {p: p.read_bytes() for p in (tmp_path / "archive").rglob("*") if p.is_file()}
    again = run(TABLECAST, "generate", "--archive", "archive", *small, "--seed", "8", cwd=tmp_path)
    assert _one_line(again, 64) == (
        "tablecast generate: archive archive is not empty (it holds sensor-0, sensor-1): give a "
        "new --archive, or --add-topics with a --prefix whose topics it does not hold"
    )
    same_topics = run(
        TABLECAST, "generate", "--archive", "archive", *small, "--add-topics", cwd=tmp_path
    )
    assert _one_line(same_topics, 64) == (
        "tablecast generate: archive archive already holds topic sensor-0: --add-topics writes "
        "new topics only; give a --prefix other than 'sensor-'"
    )
    assert {p: p.read_bytes() for p in files} == files  # nothing written over
    added = run(
        TABLECAST,
        *("generate", "--archive", "archive", *small, "--add-topics", "--prefix", "sensor-b"),
        cwd=tmp_path,
    )
    assert added.returncode == 0, added.stderr
    index = archive.scan(resolve(str(tmp_path / "archive")), "^sensor-.+")
    assert sorted({tp.topic for tp in index.files}) == [
        "sensor-0",
        "sensor-1",
        "sensor-b0",
        "sensor-b1",
    ]
    # Every topic has an identity of its own, as a topic created in Kafka has an ID.
    assert len(set(index.identities.values())) == 4


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    faults = [a for f in ("seq-gap", "bad-json", "after-end") for a in ("--fault", f)]
    command = subprocess.Popen(
        [*TABLECAST, "generate", "--archive", "archive", "--sessions", "3", *faults],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert command.stdout is not None and command.stderr is not None
    command.stdout.close()  # `| head -0`: the reader is gone before the first line
    error = command.stderr.read()
    command.stderr.close()
    assert command.wait(timeout=120) == int(ExitCode.CLOSED_PIPE) == 141
    assert [line for line in error.splitlines() if not line.startswith("writing archive")] == []


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            without_aws(),
            "AWS has no region: give --region, or set AWS_REGION (or a region in the profile "
            "of AWS_PROFILE)",
        ),
        (
            without_aws(AWS_REGION="eu-west-1"),
            "AWS has no credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY), or run where an instance role provides them",
        ),
        (
            without_aws(AWS_PROFILE="nosuch"),
            "AWS profile 'nosuch' is not in the AWS configuration (~/.aws/config): name another "
            "with AWS_PROFILE, or create it",
        ),
    ],
)
def test_missing_aws_settings_are_one_line_naming_what_is_missing(
    env: dict[str, str], said: str, tmp_path: Path
) -> None:
    result = run(TABLECAST_OPS, "status", "-e", "dev", cwd=tmp_path, env=env)
    assert _one_line(result, 64) == f"tablecast-ops status: {said}"


def test_repair_reads_kafka_within_its_kafka_timeout(tmp_path: Path) -> None:
    """repair takes the job's Kafka options: a broker that never answers is exit 5 after
    --kafka-timeout, the output untouched."""
    output = tmp_path / "out"
    tp = TopicPartition("sensor-0", 0)
    Ledger(resolve(str(output))).append(
        LedgerEntry(0, ledger_mod.BATCH, {tp: 10}, checkpoint="ckpt", checkpoint_id="q", batch_id=0)
    )
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    argv = ["repair", "--bootstrap-servers", "127.0.0.1:9", "--output", "out"]
    argv += ["--checkpoint", "ckpt", "--topics", "sensor-0", "--kafka-timeout", "2s", "--dry-run"]
    line = _one_line(run(TABLECAST, *argv, cwd=tmp_path, timeout=120), 5)
    assert line.startswith("tablecast repair: Kafka at 127.0.0.1:9") and "2 s" in line
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
