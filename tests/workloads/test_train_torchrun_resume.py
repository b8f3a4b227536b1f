"""torchrun resume is safe: every rank resumes from the checkpoint rank 0 chose, whatever its own
view of the storage holds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parents[1] / "support"  # the probes

pytestmark = pytest.mark.slow


def test_ranks_resume_from_the_same_step_when_one_sees_a_newer_incomplete_checkpoint(
    venv_bin, repo_root, tmp_path, clean_env
):
    cmd = [str(venv_bin / "torchrun"), "--nproc-per-node", "2", str(HERE / "_resume_probe.py"), str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=repo_root)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    got = [(row["rank"], row["step"], row["weights_restored"]) for row in rows]
    assert got == [(0, 4, True), (1, 4, True)], f"expected both ranks at step 4 with the saved weights, got {got}"
