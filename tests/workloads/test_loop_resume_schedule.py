"""A run resumed from a checkpoint in the middle of learning-rate warm-up continues with the learning
rate an uninterrupted run has at that step: its later losses match the uninterrupted run's.

The warm-up (4 steps) spans the resume point (step 2), so a scheduler stepped once too few or once
too many on resume trains step 3 with another rate and changes the loss of step 4."""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = pytest.mark.slow

COMMON = ["--preset", "tiny", "--seq-len", "32", "--param-dtype", "float32"]
COMMON += ["--lr", "0.01", "--warmup-steps", "4", "--task", "learnable", "--run-id", "resume-schedule"]


def _train(venv_bin, repo_root, run_dir, steps: int, summary) -> dict:
    cmd = [str(venv_bin / "torchrun"), "--nproc-per-node", "1", "-m", "workloads.train", "--launcher", "torchrun"]
    cmd += [*COMMON, "--steps", str(steps), "--checkpoint-every", "2", "--run-dir", str(run_dir)]
    cmd += ["--summary-json", str(summary)]
    r = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, f"training {steps} steps failed:\n{r.stderr[-3000:]}"
    return json.loads(summary.read_text())


def test_resume_during_warmup_continues_with_the_uninterrupted_learning_rate(venv_bin, repo_root, tmp_path, clean_env):
    straight = _train(venv_bin, repo_root, tmp_path / "straight", 4, tmp_path / "straight.json")
    _train(venv_bin, repo_root, tmp_path / "resumed", 2, tmp_path / "first.json")
    resumed = _train(venv_bin, repo_root, tmp_path / "resumed", 4, tmp_path / "resumed.json")
    assert resumed["resumed_from_step"] == 2, f"expected the second launch to resume at step 2, got {resumed}"
    got, expected = resumed["losses"][2:], straight["losses"][2:]
    gaps = [abs(a - b) for a, b in zip(got, expected, strict=True)]
    assert max(gaps) < 1e-5, f"expected losses of steps 3-4 {expected} as without the interruption, got {got}"
