"""FSDP2 really shards, and the torchrun launcher runs every optimisation flag on CPU.

`--compile` is not among them: it applies on GPU only (inductor's CPU path takes minutes to build
here), and tests/gpu runs the compiled default. Default tier: four torchrun launches, one of 2 ranks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parents[1] / "support"  # the probes


def _torchrun(venv_bin, nproc, args, cwd, timeout=240):
    cmd = [str(venv_bin / "torchrun"), "--nproc-per-node", str(nproc), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_each_of_two_ranks_holds_about_half_of_the_parameters(venv_bin, repo_root, tmp_path, clean_env):
    r = _torchrun(venv_bin, 2, [str(HERE / "_fsdp_probe.py"), str(tmp_path)], cwd=repo_root)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))]
    assert len(rows) == 2, f"expected a report from each of 2 ranks, got {rows}"
    full = rows[0]["full"]
    for row in rows:
        share = row["local"] / full
        assert 0.45 <= share <= 0.55, f"rank {row['rank']} holds {share:.1%} of {full} parameters, expected about 50%"
        assert row["dtypes"] == ["torch.float32"], f"sharded master weights must stay fp32, got {row['dtypes']}"
    assert sum(r["local"] for r in rows) >= full


# Every optimisation flag in three launches (a torchrun launch costs about 5 s here): the flags that can
# share a run share one; `--loss full` and `--loss chunked` cannot.
@pytest.mark.parametrize(
    "flags",
    [
        ["--activation-checkpointing", "--loss", "chunked", "--loss-chunk-size", "7", "--reshard-after-forward"],
        ["--loss", "full", "--param-dtype", "float32"],
        ["--micro-batch-size", "1", "--mesh", "hsdp", "--reduce-dtype", "bfloat16"],
    ],
    ids=lambda f: " ".join(f),
)
def test_optimisation_flag_trains_a_step_on_cpu(venv_bin, repo_root, tmp_path, clean_env, flags):
    out = tmp_path / "summary.json"
    r = _torchrun(
        venv_bin,
        1,
        [
            "-m",
            "workloads.train",
            "--launcher",
            "torchrun",
            "--preset",
            "tiny",
            "--steps",
            "2",
            "--global-batch-size",
            "2",
            "--seq-len",
            "32",
            "--run-dir",
            str(tmp_path / "run"),
            "--summary-json",
            str(out),
            *flags,
        ],
        cwd=repo_root,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    s = json.loads(out.read_text())
    assert s["steps"] == 2 and len(s["losses"]) == 2 and all(loss == loss and loss > 0 for loss in s["losses"]), s[
        "losses"
    ]
