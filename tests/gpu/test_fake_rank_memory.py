"""On a CUDA machine (`pytest -m gpu`): the chosen cluster default, as rank 0 of a fake world of 8 on
2 nodes of 4 (bench/fake_rank_step.py), fits an L4 under workloads/throughput_model.py's budget (reserved +
the CUDA context + NCCL's buffers + a margin) and sends only the bf16 gradient all-reduce across nodes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import REPO

from workloads import throughput_model

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# The default workloads/throughput_model.py chose on 2026-12-05 (bench/results/2026-12-05-h100/README.md says why).
DEFAULT = (
    "mesh=hsdp+micro_batch_size=8+reduce_dtype=bfloat16+activation_checkpointing=1+ac_policy=attention"
    "+reshard_after_forward=1+loss_chunk_size=2048"
)
N_PARAMS = 1_543_714_304  # Qwen2.5-1.5B, tied embedding once


@pytest.fixture(scope="module")
def row(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fake") / "row.jsonl"
    cmd = [sys.executable, "bench/fake_rank_step.py", "--configs", DEFAULT, "--steps", "2", "--out", str(out)]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text().splitlines()[0])


def test_default_fits_the_l4_budget(row):
    assert "oom" not in row and "error" not in row, f"expected the default to run, got {row}"
    limit, got = throughput_model.reserved_limit_gib(), row["peak_reserved_gib"]
    assert got <= limit, f"expected at most {limit:.2f} GiB reserved per rank, got {got:.2f} GiB"


def test_memory_outside_the_allocator_is_within_the_budgets_context(row):
    budget, got = throughput_model.CONTEXT_GIB, row["outside_allocator_gib"]
    assert got <= budget + 0.05, f"expected at most {budget:.2f} GiB outside PyTorch's allocator, got {got:.2f} GiB"


def test_default_sends_one_bf16_copy_of_the_parameters_per_nic_per_step(row):
    got = row["collectives"]["inter_node_bytes_per_nic"]
    assert got == pytest.approx(2 * N_PARAMS, rel=1e-3), f"expected about {2 * N_PARAMS} B per NIC, got {got}"
