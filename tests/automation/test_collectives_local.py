"""`python -m automation bench --collectives` end to end on this machine: workloads/collectives_bench.py
under torchrun, 2 processes on gloo over loopback, and the file it leaves."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _shared_env import driver_env

from workloads.collectives_bench import OPS


@pytest.mark.slow
def test_local_collectives_sweep_runs_end_to_end_and_keeps_its_file(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "automation", "bench", "--collectives", "--json", "--max-mib", "2", "--iters", "2",
         "--runs-root", str(tmp_path)],
        cwd=tmp_path, env=driver_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"expected exit 0, got {proc.returncode}: {proc.stderr[-2000:]}"
    doc = json.loads(proc.stdout)
    points = sorted({(r["op"], r["bytes"]) for r in doc["rows"]})
    assert points == sorted((op, s) for op in OPS for s in (1 << 20, 2 << 20)), f"got {points}"
    kept = json.loads(open(doc["file"]).read())
    assert kept["backend"] == "gloo", "the file must hold the same sweep"
    assert kept["command"][:3] == ["python", "-m", "torch.distributed.run"], f"got {kept['command'][:3]}"
