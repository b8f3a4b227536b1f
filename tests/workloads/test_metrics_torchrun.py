"""The torchrun launcher writes the same per-step metrics as Ray Train: rank 0 alone, one line a step."""

from __future__ import annotations

import os
import subprocess

import pytest

from workloads.metrics import FIELDS, METRICS_FILE, read_metrics

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def torchrun_records(venv_bin, repo_root, tmp_path_factory) -> list[dict]:
    run_dir = tmp_path_factory.mktemp("torchrun") / "run"
    args = ["--launcher", "torchrun", "--preset", "tiny", "--steps", "3", "--global-batch-size", "4", "--seq-len", "32"]
    cmd = [str(venv_bin / "torchrun"), "--nproc-per-node", "2", "-m", "workloads.train", *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "NCCL_", "TORCHELASTIC_"))}
    env["PYTHONPATH"] = str(repo_root)
    r = subprocess.run(
        [*cmd, "--run-dir", str(run_dir)], cwd=repo_root, env=env, capture_output=True, text=True, timeout=240
    )
    assert r.returncode == 0, f"expected torchrun to exit 0, got {r.returncode}: {r.stderr[-2000:]}"
    return read_metrics(run_dir / METRICS_FILE)


def test_torchrun_run_writes_one_line_per_step_from_rank_0_only(torchrun_records):
    steps = [r["step"] for r in torchrun_records]
    assert steps == [1, 2, 3], f"expected steps [1, 2, 3] once each, got {steps}"


def test_torchrun_lines_follow_the_schema(torchrun_records):
    bad = [r["step"] for r in torchrun_records if sorted(r) != sorted(FIELDS)]
    assert not bad, f"expected every line to hold exactly the schema's fields; steps {bad} differ"
