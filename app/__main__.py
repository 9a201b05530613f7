"""``python -m app``: the ``tablecast`` command line."""

from app.cli import command_line

command_line()
