"""Activation checkpointing policies (workloads.model.checkpoint_block) on the tiny preset, on CPU:
every policy gives full checkpointing's loss and gradients, and the selective ones skip the
recompute of the ops they keep."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workloads import model as model_mod
from workloads.config import TrainConfig

MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}
BASE = TrainConfig(preset="tiny", seq_len=64, activation_checkpointing=True)


class _CountMatmuls(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += func in MATMULS
        return func(*args, **(kwargs or {}))


def _model(cfg: TrainConfig) -> model_mod.CausalLM:
    m = model_mod.build_model(cfg, torch.device("cpu"))
    for i in range(len(m.layers)):
        m.layers[i] = model_mod.prepared_block(m, cfg, i, "cpu")  # checkpointed as the training paths do
    return m


def _run(cfg: TrainConfig) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
    """Loss, gradients by parameter name, and the matmuls dispatched during backward."""
    m = _model(cfg)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 512, (2, cfg.seq_len), generator=g)
    loss = m(ids, ids)
    counter = _CountMatmuls()
    with counter:
        loss.backward()
    grads = {n.replace("_checkpoint_wrapped_module.", ""): p.grad for n, p in m.named_parameters()}
    return loss.detach(), grads, counter.n


@pytest.fixture(scope="module")
def full():
    return _run(BASE)


@pytest.mark.parametrize(
    "over",
    [
        {"ac_policy": "ops"},
        {"ac_policy": "attention"},
        {"ac_blocks": 1},
        {"ac_policy": "ops", "ac_blocks": 1, "ac_rest_policy": "attention"},
    ],
)
def test_policy_gives_full_checkpointings_loss_and_gradients(full, over):
    loss, grads, _ = _run(dataclasses.replace(BASE, **over))
    torch.testing.assert_close(loss, full[0], msg=lambda m: f"{over}: loss differs from full checkpointing: {m}")
    assert grads.keys() == full[1].keys(), f"{over}: parameters {sorted(grads)} against {sorted(full[1])}"
    for name, g in grads.items():
        torch.testing.assert_close(g, full[1][name], msg=lambda m, n=name: f"{over}: grad of {n}: {m}")


def test_ops_policy_recomputes_no_matmul_in_backward(full):
    _, _, without_ac = _run(dataclasses.replace(BASE, activation_checkpointing=False))
    _, _, ops = _run(dataclasses.replace(BASE, ac_policy="ops"))
    assert full[2] > without_ac, f"full checkpointing should recompute matmuls: {full[2]} vs {without_ac} without"
    assert ops == without_ac, f"expected the {without_ac} backward matmuls of no checkpointing, got {ops}"


def test_attention_policy_recomputes_only_the_mlps_gate_and_up_matmuls():
    # tiny: hidden 64, MLP 176. Backward needs the outputs of Q, K, V, O (kept: no wider than 64) and
    # of the gate and up projections (64 -> 176: recomputed); the down projection's output feeds only
    # the residual, so no policy recomputes it. 2 blocks x 2 matmuls over no checkpointing.
    _, _, without_ac = _run(dataclasses.replace(BASE, activation_checkpointing=False))
    _, _, kept = _run(dataclasses.replace(BASE, ac_policy="attention"))
    assert kept == without_ac + 4, f"expected {without_ac} + 4 backward matmuls, got {kept}"


def test_ac_blocks_gives_the_first_n_blocks_the_policy_and_the_rest_the_rest_policy():
    cfg = dataclasses.replace(BASE, ac_policy="ops", ac_blocks=1, ac_rest_policy="attention")
    got = [model_mod.block_policy(cfg, i) for i in range(3)]
    assert got == ["ops", "attention", "attention"], f"expected ops then attention, got {got}"


def test_rest_policy_none_leaves_the_blocks_after_the_first_n_unwrapped():
    m = _model(dataclasses.replace(BASE, ac_blocks=1))
    wrapped = [type(b).__name__ == "CheckpointWrapper" for b in m.layers]
    assert wrapped == [True, False], f"expected block 0 wrapped and block 1 not, got {wrapped}"


def test_two_checkpointing_policies_in_one_compiled_model_are_refused():
    from workloads.config import ConfigError, validate

    cfg = dataclasses.replace(BASE, ac_policy="ops", ac_blocks=4, ac_rest_policy="attention", preset="qwen2.5-1.5b")
    with pytest.raises(ConfigError, match="compiled blocks would all run one of the two"):
        validate(cfg, local_paths=False)


def test_a_checkpointed_and_an_uncheckpointed_run_of_blocks_may_be_compiled_together():
    from workloads.config import validate

    validate(dataclasses.replace(BASE, ac_policy="attention", ac_blocks=22, ac_rest_policy="none"), local_paths=False)
