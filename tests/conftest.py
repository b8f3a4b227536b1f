"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"


def quiet_stack(stack: str, project_dir: Path = REPO):
    """The validated config of stack ``stack`` (Pulumi.<stack>.yaml in ``project_dir``), without the
    ConfigWarnings a real stack may carry (an extended-support note, ...)."""
    import warnings

    from infra.config import ConfigWarning, load_stack

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return load_stack(stack, project_dir)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def venv_bin() -> Path:
    """The bin directory of the interpreter running the tests (python, torchrun, ray)."""
    return Path(sys.executable).parent


@pytest.fixture
def clean_env(monkeypatch):
    """An environment without variables that would steer Ray or NCCL from outside the test."""
    for k in list(os.environ):
        if k.startswith(("RAY_ADDRESS", "NCCL_", "TORCHELASTIC_")):
            monkeypatch.delenv(k, raising=False)
    return os.environ
