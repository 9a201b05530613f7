# The compiled converter's interface (app/engine/_columns.c), for the type checker.
from typing import Any

INTERFACE: int

def columns(
    rows: list[tuple[Any, ...]], types: tuple[tuple[int, int, int], ...], decimal: type, /
) -> list[tuple[int, bytes | None, bytes, bytes | None]] | None: ...
