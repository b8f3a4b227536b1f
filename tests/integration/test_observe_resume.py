"""The metrics file of a real Ray Train run whose last worker is killed once: the lines written before
the kill stay valid, and the resumed run appends its own after them rather than starting the file over."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from workloads.metrics import METRICS_FILE, latest_per_step, read_metrics

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("resumed") / "run"
    argv = ["--preset", "tiny", "--num-workers", "2", "--steps", "5", "--global-batch-size", "4", "--seq-len", "32"]
    argv += ["--checkpoint-every", "2", "--fail-at-step", "3", "--max-failures", "1", "--run-dir", str(run_dir)]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.run(
        [sys.executable, "-m", "workloads.train", *argv], env=env, capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, f"expected the run to recover and exit 0, got {proc.returncode}: {proc.stderr[-2000:]}"
    assert (run_dir / ".failed-at-3").exists(), "the fault was not injected"
    return run_dir


def test_resumed_run_appends_after_the_lines_written_before_the_kill(resumed_run):
    steps = [r["step"] for r in read_metrics(resumed_run / METRICS_FILE)]
    # Steps 1-3 ran before the last worker died at the start of step 4; the step-2 checkpoint resumes at 3.
    assert steps == [1, 2, 3, 3, 4, 5], f"expected [1, 2, 3, 3, 4, 5] in file order, got {steps}"


def test_resumed_run_keeps_one_record_per_step_for_the_report(resumed_run):
    steps = [r["step"] for r in latest_per_step(read_metrics(resumed_run / METRICS_FILE))]
    assert steps == [1, 2, 3, 4, 5], f"expected one record per step, got {steps}"
