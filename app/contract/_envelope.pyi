# The compiled decoder's interface (app/contract/_envelope.c), for the type checker.
from collections.abc import Sequence
from typing import Any

INTERFACE: int

class Decoder:
    def __init__(
        self,
        columns: tuple[tuple[str, int, bool, int, int], ...],
        keys: tuple[int, ...],
        decimal: type,
    ) -> None: ...
    def decode(
        self, value: bytes, /
    ) -> tuple[str, int, int, int, Sequence[tuple[Any, ...]], Sequence[Any]] | None: ...
