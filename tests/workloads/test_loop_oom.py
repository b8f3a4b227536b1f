"""A GPU out of memory in the first optimizer steps halves the micro-batch and doubles the accumulation
(workloads.loop.train_loop_per_worker), on CPU with the OOM injected by `--oom-drill-micro-batch`."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch.distributed as dist

from workloads.config import TrainConfig
from workloads.loop import FirstStepsOutOfMemory, halved, train_loop_per_worker
from workloads.metrics import read_metrics

OOM = FirstStepsOutOfMemory(1, "CUDA out of memory.")


def test_halving_keeps_the_global_batch_and_the_tokens_per_step():
    cfg = TrainConfig(num_workers=2, global_batch_size=16, micro_batch_size=8)
    got = halved(cfg, OOM)
    assert (got.micro_batch, got.grad_accum) == (4, 2), f"expected 4 x 2, got {got.micro_batch} x {got.grad_accum}"
    assert got.tokens_per_step == cfg.tokens_per_step, f"tokens per step {got.tokens_per_step} != {cfg.tokens_per_step}"


def test_halving_picks_a_micro_batch_that_divides_the_per_worker_batch():
    got = halved(TrainConfig(num_workers=1, global_batch_size=6, micro_batch_size=6), OOM)
    assert (got.micro_batch, got.grad_accum) == (3, 2), f"expected 3 x 2, got {got.micro_batch} x {got.grad_accum}"


def test_a_micro_batch_of_one_fails_naming_the_fix():
    fix = "micro-batch of 1 x 2048 tokens, so nothing is left to halve: lower --seq-len"
    with pytest.raises(RuntimeError, match=fix):
        halved(TrainConfig(global_batch_size=4, micro_batch_size=1), OOM)


@pytest.fixture
def group(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG_FILE", "")  # the loop routes NCCL's log through the environment
    monkeypatch.setenv("NCCL_DEBUG", "")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _run(tmp_path, drill: int) -> dict:
    cfg = TrainConfig(
        preset="tiny", steps=3, global_batch_size=4, micro_batch_size=4, seq_len=32, oom_drill_micro_batch=drill
    )
    cfg = dataclasses.replace(cfg, run_id="oom", run_dir=str(tmp_path / "run")).resolved()
    return train_loop_per_worker(cfg.to_dict())


def test_first_step_oom_continues_with_half_the_micro_batch(tmp_path, group, capsys):
    summary = _run(tmp_path, drill=3)
    got = [(f["step"], f["micro_batch"], f["to_micro_batch"], f["to_grad_accum"]) for f in summary["oom_fallbacks"]]
    assert got == [(1, 4, 2, 2)], f"expected one fallback at step 1 from 4 to 2 x 2, got {got}"
    assert len(summary["losses"]) == 3, f"expected all 3 steps trained, got losses {summary['losses']}"
    assert "out of GPU memory at step 1 with micro-batch 4 x 1 accumulated" in capsys.readouterr().out


def test_metrics_after_an_oom_name_the_new_micro_batch_and_accumulation(tmp_path, group):
    _run(tmp_path, drill=3)
    lines = read_metrics(tmp_path / "run" / "metrics.jsonl")
    got = [(r["step"], r["micro_batch"], r["grad_accum"]) for r in lines]
    assert got == [(1, 2, 2), (2, 2, 2), (3, 2, 2)], f"expected steps 1-3 at micro-batch 2 x 2, got {got}"


def test_oom_at_micro_batch_one_ends_the_run_loudly(tmp_path, group):
    with pytest.raises(RuntimeError, match="nothing is left to halve"):
        _run(tmp_path, drill=1)


def test_repeated_ooms_halve_until_the_step_fits(tmp_path, group):
    summary = _run(tmp_path, drill=2)
    assert [f["to_micro_batch"] for f in summary["oom_fallbacks"]] == [2, 1], summary["oom_fallbacks"]
    assert (summary["micro_batch"], summary["grad_accum"]) == (1, 4), json.dumps(summary)[:500]
