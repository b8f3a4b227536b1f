"""bench/fake_rank_step.py counts the collectives of the real module's step: checked against a hand
count from the tiny preset's parameter shapes, as rank 0 of a fake world of 8 on 2 nodes of 4."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import torch

from workloads.config import TrainConfig
from workloads.model import build_model

WORLD, PER_NODE = 8, 4
CONFIGS = ["mesh=fsdp", "mesh=hsdp", "mesh=fsdp+accum=3", "mesh=hsdp+accum=3+reduce_dtype=bfloat16"]


@pytest.fixture(scope="module")
def rows(venv_bin, repo_root, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("count") / "rows.jsonl"
    cmd = [str(venv_bin / "python"), "bench/fake_rank_step.py", "--preset", "tiny", "--seq-len", "16"]
    cmd += ["--warmup", "1", "--steps", "0", "--configs", ";".join(CONFIGS), "--out", str(out)]
    r = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    return {row["config"]: row["collectives"] for row in map(json.loads, out.read_text().splitlines())}


def _padded_numel(shard_over: int) -> int:
    """Elements FSDP2 gathers: each parameter's dim 0 padded to a multiple of the shard group."""
    model = build_model(TrainConfig(preset="tiny"), torch.device("meta"))
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += math.ceil(p.shape[0] / shard_over) * shard_over * p[0].numel()
    return total


def _bytes(row: dict, key: str) -> int:
    return row["by_kind"].get(key, {}).get("bytes", 0)


def test_fsdp_step_gathers_bf16_parameters_once_and_reduce_scatters_fp32_gradients_once(rows):
    n = _padded_numel(WORLD)
    got = (
        _bytes(rows["mesh=fsdp"], "all_gather/bfloat16/8-rank"),
        _bytes(rows["mesh=fsdp"], "reduce_scatter/float32/8-rank"),
    )
    assert got == (2 * n, 4 * n), f"expected all-gather {2 * n} B and reduce-scatter {4 * n} B, got {got}"


def test_fsdp_nic_carries_seven_eighths_of_gather_and_reduce_scatter(rows):
    n = _padded_numel(WORLD)
    expected = 7 / 8 * (2 * n + 4 * n)
    got = rows["mesh=fsdp"]["inter_node_bytes_per_nic"]
    assert got == pytest.approx(expected), f"expected {expected} B per NIC per step, got {got}"


def test_hsdp_sends_only_the_gradient_all_reduce_across_nodes(rows):
    n = _padded_numel(PER_NODE)
    row = rows["mesh=hsdp"]
    # Each of a node's 4 ranks all-reduces its fp32 quarter with one peer on the other node: a
    # 2-rank ring sends the whole buffer once, so the NIC carries 4 x n/4 x 4 B.
    assert _bytes(row, "all_reduce/float32/2-rank") == n, f"expected one fp32 shard of {n // 4} elements, got {row}"
    assert row["inter_node_bytes_per_nic"] == pytest.approx(4 * n), f"expected {4 * n} B per NIC, got {row}"


def test_accumulation_keeps_gradient_bytes_per_step_fixed(rows):
    one, three = rows["mesh=fsdp"], rows["mesh=fsdp+accum=3"]
    got = _bytes(three, "reduce_scatter/float32/8-rank")
    expected = _bytes(one, "reduce_scatter/float32/8-rank")
    assert got == expected, f"expected 3 accumulated micro-batches to reduce-scatter {expected} B like one, got {got}"


def test_accumulation_regathers_parameters_for_each_micro_batch(rows):
    # FSDP2 reshards after backward, so each micro-batch gathers again: under fsdp that crosses nodes.
    one, three = rows["mesh=fsdp"], rows["mesh=fsdp+accum=3"]
    got = _bytes(three, "all_gather/bfloat16/8-rank")
    expected = 3 * _bytes(one, "all_gather/bfloat16/8-rank")
    assert got == expected, f"expected three gathers ({expected} B) for 3 micro-batches, got {got}"


def test_hsdp_accumulation_with_bf16_reduce_halves_the_nic_bytes(rows):
    n = _padded_numel(PER_NODE)
    got = rows["mesh=hsdp+accum=3+reduce_dtype=bfloat16"]["inter_node_bytes_per_nic"]
    assert got == pytest.approx(2 * n), f"expected {2 * n} B per NIC (bf16 all-reduce, once per step), got {got}"
