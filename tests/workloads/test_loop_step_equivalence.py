"""A step gives the same loss and the same update however the batch is split into accumulated
micro-batches (with FSDP2's no-sync on all but the last), and HSDP (2 x 2) trains like FSDP over 4.

Each case runs tests/support/_step_probe.py under torchrun on gloo, fp32 parameters, fixed data."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).parents[1] / "support"  # the probes

pytestmark = pytest.mark.slow

# SGD: its update is proportional to the gradient, so a mis-scaled gradient shows in the parameters.
ONE_BATCH = {"mesh": "fsdp", "micro": 4, "global_batch": 8, "steps": 2, "optimizer": "sgd", "lr": 0.5}
ACCUMULATED = {**ONE_BATCH, "micro": 1}  # 4 micro-batches of 1 per rank
FSDP4 = {"mesh": "fsdp", "micro": 2, "global_batch": 8, "steps": 3, "optimizer": "adamw", "lr": 0.01}
HSDP22 = {**FSDP4, "mesh": "hsdp", "shard_size": 2}


def _probe(venv_bin, repo_root, out: Path, nproc: int, spec: dict) -> dict:
    out.mkdir(parents=True)
    cmd = [str(venv_bin / "torchrun"), "--nproc-per-node", str(nproc), str(HERE / "_step_probe.py"), str(out)]
    env = dict(os.environ, PYTHONPATH=str(repo_root))  # this checkout's workloads, not the installed one
    r = subprocess.run([*cmd, json.dumps(spec)], cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"probe {spec} failed:\n{r.stderr[-3000:]}"
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="module")
def runs(venv_bin, repo_root, tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("probe")
    cases = {"one": (2, ONE_BATCH), "accum": (2, ACCUMULATED), "fsdp4": (4, FSDP4), "hsdp22": (4, HSDP22)}
    return {name: _probe(venv_bin, repo_root, base / name, n, spec) for name, (n, spec) in cases.items()}


def _max_gap(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b), f"expected equal lengths, got {len(a)} and {len(b)}"
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def test_accumulated_micro_batches_report_the_loss_of_one_larger_batch(runs):
    got, expected = runs["accum"]["losses"], runs["one"]["losses"]
    assert _max_gap(got, expected) < 1e-5, f"expected the one-batch losses {expected}, got {got} from 4 micro-batches"


def test_accumulated_micro_batches_make_the_update_of_one_larger_batch(runs):
    gap = _max_gap(runs["accum"]["params"], runs["one"]["params"])
    assert gap < 1e-5, f"expected the same parameters after 2 SGD steps, largest difference {gap:.3g}"


def test_hsdp_2x2_gives_the_losses_of_fsdp_over_4(runs):
    got, expected = runs["hsdp22"]["losses"], runs["fsdp4"]["losses"]
    assert _max_gap(got, expected) < 1e-4, f"expected FSDP's losses {expected}, got {got} under HSDP 2 x 2"


def test_hsdp_2x2_makes_the_update_of_fsdp_over_4(runs):
    gap = _max_gap(runs["hsdp22"]["params"], runs["fsdp4"]["params"])
    assert gap < 1e-3, f"expected the same parameters after 3 AdamW steps, largest difference {gap:.3g}"
