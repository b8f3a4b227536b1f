"""The model builder: pretrained weights from a local directory offline; MFU's peak per GPU."""

from __future__ import annotations

import builtins
import dataclasses
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from workloads import model as model_mod
from workloads.config import TrainConfig, TrainConfigError, validate
from workloads.model import mesh_shape


def test_pretrained_local_directory_loads_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = model_mod.build_model(TrainConfig(preset="tiny", seed=7), torch.device("cpu"))
    source.lm.save_pretrained(tmp_path / "tiny-model")
    loaded = model_mod.build_model(
        TrainConfig(preset="tiny", seed=99, pretrained=str(tmp_path / "tiny-model")), torch.device("cpu")
    )
    a = source.lm.model.layers[0].mlp.down_proj.weight
    b = loaded.lm.model.layers[0].mlp.down_proj.weight
    assert torch.equal(a, b), "weights loaded from the directory differ from the saved ones"
    assert loaded.lm.config.use_cache is False
    assert loaded.lm.lm_head.weight is loaded.lm.model.embed_tokens.weight, "the embedding must stay tied"


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA L4", 121.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA L40S", None),
        ("NVIDIA L40", None),
    ],
)
def test_peak_matches_whole_gpu_names(monkeypatch, name, peak):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    assert model_mod.peak_tflops(torch.device("cuda", 0)) == peak


def test_no_peak_and_so_no_mfu_on_cpu():
    assert model_mod.peak_tflops(torch.device("cpu")) is None


def test_flops_per_token_follows_the_stated_formula():
    assert model_mod.flops_per_token(1000, 2, 8, 16) == 6 * 1000 + 12 * 2 * 8 * 16


# ---- --mesh: the device-mesh shape FSDP2 shards over, and the refusal of a shard size that does not divide.


def test_fsdp_shards_over_every_rank():
    assert mesh_shape("fsdp", 8, 0, 4) == (8,), "expected one dimension of all 8 ranks"


def test_hsdp_shards_inside_a_node_and_replicates_across_nodes():
    got = mesh_shape("hsdp", 8, 0, 4)
    assert got == (2, 4), f"expected (replicas, shard) = (2, 4) on 2 nodes of 4, got {got}"


def test_hsdp_shard_size_overrides_the_node():
    got = mesh_shape("hsdp", 4, 2, 4)
    assert got == (2, 2), f"expected (2, 2) with --shard-size 2 on 4 ranks, got {got}"


def test_hsdp_shard_size_that_does_not_divide_the_world_is_refused_by_flag():
    with pytest.raises(TrainConfigError, match=r"--shard-size 3 does not divide 8 workers"):
        mesh_shape("hsdp", 8, 3, 4)


def test_validate_refuses_a_shard_size_that_does_not_divide_the_workers():
    cfg = TrainConfig(preset="tiny", mesh="hsdp", shard_size=3, num_workers=4)
    with pytest.raises(TrainConfigError, match=r"--shard-size 3 does not divide --num-workers 4"):
        validate(cfg)


def test_validate_refuses_an_unknown_mesh_by_flag():
    with pytest.raises(TrainConfigError, match=r"--mesh 'ddp' is unknown: choose one of fsdp, hsdp"):
        validate(TrainConfig(preset="tiny", mesh="ddp"))


# ---- Activation checkpointing policies (workloads.model.checkpoint_block) on the tiny preset, on CPU:
# every policy gives full checkpointing's loss and gradients, and the selective ones skip the
# recompute of the ops they keep.

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
    from workloads.config import TrainConfigError, validate

    cfg = dataclasses.replace(BASE, ac_policy="ops", ac_blocks=4, ac_rest_policy="attention", preset="qwen2.5-1.5b")
    with pytest.raises(TrainConfigError, match="compiled blocks would all run one of the two"):
        validate(cfg, local_paths=False)


def test_a_checkpointed_and_an_uncheckpointed_run_of_blocks_may_be_compiled_together():
    from workloads.config import validate

    validate(dataclasses.replace(BASE, ac_policy="attention", ac_blocks=22, ac_rest_policy="none"), local_paths=False)


# ---- `--float8` on a machine without float8 tensor cores or torchao, and which layers it converts; on CPU (torchao's
# float8 needs a GPU of compute capability 8.9+, so the conversion itself runs in tests/gpu).

F8 = TrainConfig(preset="tiny", seq_len=64, use_gpu=True, float8="tensorwise")


def test_float8_on_a_cpu_worker_is_refused_in_one_line_naming_the_bf16_key():
    with pytest.raises(TrainConfigError, match=r"^--float8 tensorwise needs a GPU [^\n]*`float8: off`[^\n]*$"):
        model_mod.build_model(F8, torch.device("cpu"))


@pytest.mark.parametrize("name, capability", [("NVIDIA A100-SXM4-80GB", (8, 0)), ("NVIDIA A10G", (8, 6))])
def test_float8_below_compute_capability_8_9_is_refused_naming_the_gpu(monkeypatch, name, capability):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    with pytest.raises(TrainConfigError) as e:
        model_mod.check_float8_device(F8, torch.device("cuda", 0))
    expected = f"{name} has {capability[0]}.{capability[1]}: set `float8: off` in the stack's train: block"
    assert expected in str(e.value) and "\n" not in str(e.value), f"expected {expected!r} in one line: {e.value}"


@pytest.mark.parametrize("capability", [(8, 9), (9, 0)])
def test_float8_on_an_l4_or_h100_passes_the_device_check(monkeypatch, capability):
    # L4 (Ada) is 8.9, H100 and H200 (Hopper) 9.0: NVIDIA's CUDA GPUs compute capability table.
    _fake_torchao(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    model_mod.check_float8_device(F8, torch.device("cuda", 0))


def _no_torchao(monkeypatch) -> None:
    real_import = builtins.__import__

    def no_torchao(name, *args, **kwargs):
        if name.startswith("torchao"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "torchao", raising=False)
    monkeypatch.delitem(sys.modules, "torchao.float8", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_torchao)


def test_float8_without_torchao_names_the_extra(monkeypatch):
    _no_torchao(monkeypatch)
    lm = model_mod.build_model(dataclasses.replace(F8, float8="off"), torch.device("cpu")).lm
    with pytest.raises(TrainConfigError, match=r"needs torchao, which does not load here .*'ray-efa-eks\[gpu\]'"):
        model_mod.convert_float8(lm, "tensorwise", fsdp=True)


def test_float8_on_an_l4_without_torchao_is_refused_naming_the_bf16_key(monkeypatch):
    _no_torchao(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    with pytest.raises(TrainConfigError) as e:
        model_mod.check_float8_device(F8, torch.device("cuda", 0))
    said = str(e.value)
    assert "needs torchao, which does not load here" in said and "`float8: off`" in said, said


def _fake_torchao(monkeypatch) -> list[str]:
    """A stand-in of torchao 0.17.0's `torchao.float8` (float8_linear_utils.py): `convert_to_float8_training(module,
    module_filter_fn=, config=)` offers each nn.Linear below `module` with its name relative to `module` to the
    filter and swaps those it accepts. Returns the names swapped."""
    import types

    swapped: list[str] = []

    def convert(module, *, module_filter_fn=None, config=None):
        for fqn, m in module.named_modules():
            if isinstance(m, torch.nn.Linear) and (module_filter_fn is None or module_filter_fn(m, fqn)):
                swapped.append(fqn)
        return module

    class Float8LinearConfig:
        def __init__(self, enable_fsdp_float8_all_gather=False):
            self.enable_fsdp_float8_all_gather = enable_fsdp_float8_all_gather

        @staticmethod
        def from_recipe_name(name):
            return Float8LinearConfig()

    fake = types.ModuleType("torchao.float8")
    fake.__dict__.update(convert_to_float8_training=convert, Float8LinearConfig=Float8LinearConfig)
    monkeypatch.setitem(sys.modules, "torchao", types.ModuleType("torchao"))
    monkeypatch.setitem(sys.modules, "torchao.float8", fake)
    return swapped


def test_float8_converts_the_mlp_projections_and_leaves_attention_and_the_head_bf16(monkeypatch):
    swapped = _fake_torchao(monkeypatch)
    lm = model_mod.build_model(dataclasses.replace(F8, float8="off"), torch.device("cpu")).lm
    n = model_mod.convert_float8(lm, "tensorwise", fsdp=True)
    expected = [f"{i}.mlp.{p}_proj" for i in range(len(lm.model.layers)) for p in ("gate", "up", "down")]
    assert sorted(swapped) == sorted(expected) and n == len(expected), f"expected {expected}, got {swapped}"


def test_a_linear_whose_width_is_not_a_multiple_of_16_stays_bf16():
    # The float8 GEMM (cuBLASLt / torch._scaled_mm) needs both dimensions divisible by 16.
    assert not model_mod.float8_eligible(torch.nn.Linear(64, 184), hidden=64)
    assert model_mod.float8_eligible(torch.nn.Linear(64, 176), hidden=64)


def test_float8_all_gather_refreshes_the_scales_after_each_optimizer_step(monkeypatch):
    calls = []
    monkeypatch.setattr(model_mod, "precompute_float8_scales", lambda model: calls.append(model))
    lm = model_mod.build_model(dataclasses.replace(F8, float8="off"), torch.device("cpu")).lm
    model_mod.CausalLM(lm, float8_all_gather=False).after_optimizer_step()
    assert calls == [], "without float8 all-gather no scale is precomputed"
    model = model_mod.CausalLM(lm, float8_all_gather=True)
    model.after_optimizer_step()
    assert calls == [model], f"expected one precompute over the model, got {calls}"


@pytest.mark.parametrize("policy, shape_b, kept", [("ops", (64, 176), True), ("attention", (64, 176), False)])
def test_selective_checkpointing_treats_a_float8_matmul_as_a_matmul(policy, shape_b, kept):
    # torch._scaled_mm(a, b, scale_a, scale_b, ...): the operands come first, the scales after them.
    from torch.utils.checkpoint import CheckpointPolicy

    decide = model_mod._keeps(policy, hidden=64)
    a, b, scale = torch.empty(8, 64), torch.empty(*shape_b), torch.empty(())
    got = decide(None, torch.ops.aten._scaled_mm.default, a, b, scale, scale)
    want = CheckpointPolicy.MUST_SAVE if kept else CheckpointPolicy.PREFER_RECOMPUTE
    assert got == want, f"{policy}: a float8 matmul 64 -> {shape_b[1]} should be {want}, got {got}"


def test_a_float8_run_says_which_torchao_ran(monkeypatch):
    from workloads import loop

    monkeypatch.setattr("importlib.metadata.version", lambda name: {"torchao": "0.17.0"}[name])
    line = loop.float8_line("tensorwise", 84)
    assert line == "[train] float8 tensorwise: 84 linear layers in float8 (torchao 0.17.0)", line


@pytest.mark.parametrize("cause, expected", [("A10G", "NVIDIA A10G has 8.6"), ("torchao", "needs torchao")])
def test_a_float8_worker_stops_before_building_or_stepping_naming_the_bf16_key(monkeypatch, cause, expected):
    from workloads import loop

    if cause == "torchao":
        _no_torchao(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6) if cause == "A10G" else (8, 9))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A10G")
    ran: list[str] = []
    monkeypatch.setattr(loop, "_join", lambda cfg: (None, torch.device("cuda", 0)))
    monkeypatch.setattr(loop, "build_training", lambda *a, **k: ran.append("build"))
    monkeypatch.setattr(loop, "train_step", lambda *a, **k: ran.append("step"))
    with pytest.raises(TrainConfigError) as e:
        loop.train_loop_per_worker(F8.to_dict())
    said = (expected in str(e.value), "`float8: off`" in str(e.value), ran)
    assert said == (True, True, []), f"expected {expected!r}, the bf16 key and nothing run, got {said}: {e.value}"


@pytest.mark.parametrize("float8, precision", [("off", "bfloat16"), ("tensorwise", "float8 tensorwise")])
def test_the_job_names_the_precision_it_runs(float8, precision):
    assert dataclasses.replace(F8, float8=float8).precision == precision


def test_the_run_summary_carries_the_precision_that_ran(tmp_path):
    from types import SimpleNamespace

    from workloads import loop

    cfg = dataclasses.replace(F8, nccl_log_dir=str(tmp_path))
    env, tr = SimpleNamespace(world=1), SimpleNamespace(n_params=1)
    summary = loop._summary(cfg, env, torch.device("cpu"), tr, 0, [1.0], [0.1], None, 1.0, None)
    assert summary.precision == "float8 tensorwise", f"expected the precision field, got {summary}"
