"""The error of bad input, shared by the modules that check it before anything starts."""

from __future__ import annotations


class TrainConfigError(ValueError):
    """Bad input, with a message that names the flag, the value and the fix."""
