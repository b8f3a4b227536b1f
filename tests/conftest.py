"""Fixtures shared by every test folder."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from workloads.config import RUNS_DIR, RUNS_DIR_ENV

# moto's EC2 backend loads about 1,300 default AMIs each time it starts for a region (moto/ec2/models/amis.py,
# `_load_amis`): a third of a moto world's cost, and no test here reads an AMI. moto's own setting turns it off
# (moto/settings.py, `ec2_load_default_amis`); subprocesses the tests start inherit it.
os.environ.setdefault("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


def _share_botocore_loader() -> None:
    """One botocore data loader for every session of this process. moto puts a fresh default boto3 session in
    place for each mock (moto/core/models.py patches ``boto3.DEFAULT_SESSION`` to None), and each session
    builds its own loader (botocore/session.py, ``create_loader`` for the ``data_loader`` component), so every
    test read and decoded each service's JSON model again: about a tenth of a second per client. The loader
    caches what it read per instance (botocore/loaders.py, ``instance_cache``) and the models are read-only
    data, so sessions that share one loader get the same answers, read once."""
    try:
        import botocore.loaders
        import botocore.session
    except ImportError:  # the GPU tier runs where only the training dependencies are (tests/test_gpu_tier.py)
        return

    loaders: dict[str | None, botocore.loaders.Loader] = {}
    create = botocore.loaders.create_loader

    def shared(search_path_string: str | None = None) -> botocore.loaders.Loader:
        if search_path_string not in loaders:
            loaders[search_path_string] = create(search_path_string)
        return loaders[search_path_string]

    botocore.session.create_loader = shared


_share_botocore_loader()

# The session's shared set-ups (the local run, the S3 server, the Ray cluster) serve files in several folders.
pytest_plugins = ["shared_setups"]

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


# Under pytest-xdist (README's test command runs `-n 2`), work goes to the workers a test file at a time, so a
# module's fixtures start once. The session-scoped set-ups of tests/support/shared_setups.py start once per
# worker, so the files that use them are one unit of work, sent first: one worker starts the local run, the
# S3 server and the Ray cluster once while the other works through the rest. The scheduler sees test ids
# only, so the files are named here, and collection fails a test that uses a set-up from another file.
SHARED_SETUPS = frozenset({"local_run", "local_run_doc", "s3_env", "ray_cluster"})
SHARED_SETUP_FILES = frozenset(
    {
        "tests/automation/targets/test_local_run.py",
        "tests/automation/commands/test_report_local_run.py",
        "tests/workloads/test_train_s3.py",
        "tests/workloads/test_train_ray.py",
    }
)
# The longest other files of the default tier (--durations on the 2-core machine, 2026-12-06), sent next,
# longest first; a file the run does not hold is passed over. (The slow tier runs in one process: TESTING.md.)
HEAVY_FILES = ("tests/workloads/test_train_fsdp.py", "tests/automation/commands/test_bench.py")


def pytest_itemcollected(item):
    used = SHARED_SETUPS & set(getattr(item, "fixturenames", ()))
    file = item.nodeid.split("::", 1)[0]
    if used and file not in SHARED_SETUP_FILES:
        raise pytest.UsageError(
            f"{item.nodeid} uses {', '.join(sorted(used))}: add {file} to SHARED_SETUP_FILES in tests/conftest.py"
        )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return "shared-setups" if file in SHARED_SETUP_FILES else file

        def _assign_work_unit(self, node) -> None:
            for scope in reversed(("shared-setups", *HEAVY_FILES)):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return ByFile(config, log)


@pytest.fixture(autouse=True)
def runs_in_tmp(tmp_path, monkeypatch):
    """Every run a test starts in this process goes under its tmp_path, never the checkout's runs/ (a test
    that changes into tmp_path finds them at ./runs as a user would). Subprocesses of the driver get
    their own cwd's runs/ instead (tests/support/_shared_env.py, driver_env)."""
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
