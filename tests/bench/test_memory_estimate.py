"""bench/memory_estimate.py: the per-GPU memory arithmetic of the reference job."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys

import pytest
from conftest import REPO


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_memory_estimate", REPO / "bench" / "memory_estimate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


me = _load_script()


@pytest.fixture(scope="module")
def shape():
    return me.load_shape("qwen2.5-1.5b")


def test_param_count_equals_meta_qwen2_with_tied_embedding_once(shape):
    import torch
    from transformers import Qwen2ForCausalLM

    from workloads.config import TrainConfig
    from workloads.model import count_params, qwen2_config

    with torch.device("meta"):
        lm = Qwen2ForCausalLM._from_config(
            qwen2_config(TrainConfig(preset="qwen2.5-1.5b")), attn_implementation="sdpa", dtype=torch.float32
        )
    expected = count_params(lm)
    got = me.total_params(shape)
    assert got == expected, f"expected the meta model's {expected} parameters, got {got}"
    assert abs(got - 1.54e9) < 0.04e9, f"expected about 1.54e9 parameters for Qwen2.5-1.5B, got {got:.4g}"


def test_sharded_state_bytes_scale_as_one_over_world_size(shape):
    n = me.total_params(shape)
    one = me.sharded_state_bytes(n, 1)
    eight = me.sharded_state_bytes(n, 8)
    assert one == 16 * n, f"expected 16 bytes/param unsharded ({16 * n}), got {one}"
    assert abs(eight - one / 8) <= 1, f"expected {one / 8} bytes at world size 8, got {eight}"


def test_full_loss_holds_fp32_logits_and_their_gradient(shape):
    b, t = 3, 2048
    got = me.loss_bytes(shape, b * t, "full", 4096)
    expected = b * t * shape.vocab * 4 * 2
    assert got == expected, f"expected b*T*V*4*2 = {expected}, got {got}"


def test_chunked_loss_grows_only_by_grad_hidden_past_one_chunk(shape):
    chunk = 4096
    small = me.loss_bytes(shape, chunk, "chunked", chunk)
    large = me.loss_bytes(shape, 8 * 2048, "chunked", chunk)
    expected = (8 * 2048 - chunk) * shape.hidden * 2
    assert large - small == expected, f"expected only bf16 grad_hidden to grow ({expected} bytes), got {large - small}"


def test_activation_checkpointing_lowers_the_activation_term(shape):
    for b in (1, 2, 8):
        off = me.activation_bytes(shape, b * 2048, activation_checkpointing=False)
        on = me.activation_bytes(shape, b * 2048, activation_checkpointing=True)
        assert on < off, f"micro-batch {b}: expected checkpointing to lower activations below {off}, got {on}"


def test_activations_scale_linearly_with_tokens(shape):
    one = me.activation_bytes(shape, 2048, activation_checkpointing=False)
    four = me.activation_bytes(shape, 4 * 2048, activation_checkpointing=False)
    assert four == 4 * one, f"expected 4 x {one} bytes for 4x the tokens, got {four}"


def test_reshard_false_keeps_every_block_gathered_in_bf16(shape):
    blk = me.block_params(shape)
    kept = me.gathered_block_bytes(shape, reshard_after_forward=False)
    in_flight = me.gathered_block_bytes(shape, reshard_after_forward=True)
    assert kept == 2 * blk * shape.layers, f"expected the whole bf16 block stack {2 * blk * shape.layers}, got {kept}"
    assert in_flight == 2 * blk * 2, f"expected two bf16 blocks in flight {2 * blk * 2}, got {in_flight}"


def test_case_that_cannot_fit_is_reported_as_not_fitting(shape):
    setting = me.Setting(micro_batch=8, reshard_after_forward=False, activation_checkpointing=False, loss="full")
    e = me.estimate(shape, setting, gpu_mem_gib=22.5)
    assert not e.fits, (
        "expected micro-batch 8 without checkpointing, full loss, not to fit in 22.5 GiB; "
        f"total {e.total / me.GIB:.1f} GiB"
    )


def test_small_case_is_reported_as_fitting_on_a_large_gpu(shape):
    e = me.estimate(shape, me.Setting(micro_batch=1, activation_checkpointing=True), gpu_mem_gib=141.0)
    assert e.fits, f"expected micro-batch 1 with checkpointing to fit in 141 GiB; total {e.total / me.GIB:.1f} GiB"


def test_largest_fitting_micro_batch_is_the_boundary(shape):
    base = me.Setting(micro_batch=1, activation_checkpointing=True)
    best = me.largest_fitting_micro_batch(shape, base, 22.5)
    assert best >= 1, f"expected at least micro-batch 1 to fit with checkpointing, got {best}"
    assert me.estimate(shape, dataclasses.replace(base, micro_batch=best), 22.5).fits, (
        f"micro-batch {best} reported largest but does not fit"
    )
    assert not me.estimate(shape, dataclasses.replace(base, micro_batch=best + 1), 22.5).fits, (
        f"micro-batch {best + 1} fits, so {best} is not the largest"
    )


def test_largest_fitting_micro_batch_is_zero_when_nothing_fits(shape):
    got = me.largest_fitting_micro_batch(shape, me.Setting(micro_batch=1), gpu_mem_gib=1.0)
    assert got == 0, f"expected 0 on a 1 GiB GPU, got {got}"


def test_json_output_lists_every_combination(capsys):
    assert me.main(["--json", "--world-size", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    combos = {
        (r["micro_batch"], r["reshard_after_forward"], r["activation_checkpointing"], r["loss"]) for r in out["rows"]
    }
    expected = {
        (b, r, ac, loss)
        for b in (1, 2, 4, 8)
        for r in (True, False)
        for ac in (False, True)
        for loss in ("chunked", "full")
    }
    assert combos == expected, f"expected {len(expected)} combinations, got missing {expected - combos}"
    assert {r["world_size"] for r in out["rows"]} == {4}, "expected --world-size 4 in every row"
    assert out["estimate_not_measurement"] is True, "expected the JSON to say it is an estimate"
