"""The configuration's one exception."""


class ConfigError(ValueError):
    """An environment's configuration is invalid.

    Carries its facts as attributes; ``str()`` is one line that names the
    environment, the field and what is wrong, so ``make synth`` can print it
    as it is.
    """

    def __init__(self, *, environment: str, field: str, problem: str) -> None:
        self.environment = environment
        self.field = field
        self.problem = problem
        super().__init__(f"environment {environment!r}: {field}: {problem}")
