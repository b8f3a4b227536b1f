"""The driver's expected, explainable failure (automation/cli.py reads workloads' TrainConfigError as bad input)."""


class DriverError(Exception):
    """A failure with a one-line message that says what went wrong and what to do; the CLI prints it without a
    traceback and exits with `exit_code` (2 for bad input, 1 for a failed check or operation)."""

    def __init__(self, message: str, *, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code
