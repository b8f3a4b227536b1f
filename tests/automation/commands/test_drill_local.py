"""`python -m automation drill --target local --json` end to end: a real Ray head, a real SIGKILL of a
Ray Train worker process, Ray Train's restart from the checkpoint, and the uninterrupted reference run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from automation.targets.local import LOCAL_CHECKPOINT_EVERY

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def drill(tmp_path_factory) -> dict:
    cwd = tmp_path_factory.mktemp("drill")
    env = dict(os.environ, COLUMNS="400", PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run(
        [sys.executable, "-m", "automation", "drill", "--target", "local", "--json"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    doc = json.loads(proc.stdout)
    doc["_rc"], doc["_stderr"] = proc.returncode, proc.stderr[-2000:]
    return doc


def test_drill_passes_and_exits_0(drill):
    assert (drill["_rc"], drill.get("ok")) == (0, True), (
        f"expected exit 0 and ok, got {drill['_rc']}: {drill.get('failures') or drill.get('error')} {drill['_stderr']}"
    )


def test_drill_killed_a_real_worker_process(drill):
    pid = drill["killed"]["pid"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, (
        f"expected killed worker pid {pid} gone, it still runs"
    )


def test_drill_resumed_from_the_checkpoint_ray_train_had_registered(drill):
    assert drill["resumed_from_step"] >= drill["registered_checkpoint_at_kill"] > 0, (
        f"expected a resume from {drill['registered_checkpoint_at_kill']} or later, got {drill['resumed_from_step']}"
    )


def test_drill_lost_no_more_steps_than_the_checkpoint_interval(drill):
    assert 0 <= drill["steps_lost"] <= LOCAL_CHECKPOINT_EVERY, (
        f"expected 0 to {LOCAL_CHECKPOINT_EVERY} steps lost, got {drill['steps_lost']}"
    )


def test_drill_run_finished_all_its_steps(drill):
    assert drill["final_step"] == drill["total_steps"], (
        f"expected step {drill['total_steps']}, got {drill['final_step']}"
    )


def test_drill_ends_at_the_uninterrupted_runs_loss(drill):
    assert drill["final_loss_matches"], (
        f"expected final loss {drill['reference_final_loss']}, got {drill['final_loss']}"
    )


def test_drill_recovery_time_is_measured_after_the_kill(drill):
    assert drill["recovery_seconds"] > 0, f"expected a positive recovery time, got {drill['recovery_seconds']}"
