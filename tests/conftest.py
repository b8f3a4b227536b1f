"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from workloads.config import RUNS_DIR, RUNS_DIR_ENV

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


def _checkout_runs() -> set[str]:
    root = REPO / RUNS_DIR
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


_RUNS_BEFORE = _checkout_runs()


def pytest_sessionfinish(session, exitstatus):
    """Fail the session if a test left a run in the checkout's runs/ (a user's own runs stay untouched)."""
    new = sorted(_checkout_runs() - _RUNS_BEFORE)
    if new:
        print(f"\ntests left runs in {REPO / RUNS_DIR} (they belong under tmp_path): {', '.join(new)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch):
    """Every run a test starts in this process goes under its tmp_path, never the checkout's runs/ (a test
    that changes into tmp_path finds them at ./runs as a user would). Subprocesses of the driver get
    their own cwd's runs/ instead (tests/integration/_shared_env.py, driver_env)."""
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))


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
