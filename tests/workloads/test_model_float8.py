"""`--float8` on a machine without float8 tensor cores or torchao, and which layers it converts; on CPU (torchao's
float8 needs a GPU of compute capability 8.9+, so the conversion itself runs in tests/gpu)."""

from __future__ import annotations

import builtins
import dataclasses
import sys

import pytest
import torch

from workloads import model as model_mod
from workloads.config import ConfigError, TrainConfig

F8 = TrainConfig(preset="tiny", seq_len=64, use_gpu=True, float8="tensorwise")


def test_float8_on_a_cpu_worker_is_refused_in_one_line_naming_the_bf16_key():
    with pytest.raises(ConfigError, match=r"^--float8 tensorwise needs a GPU [^\n]*`float8: off`[^\n]*$"):
        model_mod.build_model(F8, torch.device("cpu"))


@pytest.mark.parametrize("name, capability", [("NVIDIA A100-SXM4-80GB", (8, 0)), ("NVIDIA A10G", (8, 6))])
def test_float8_below_compute_capability_8_9_is_refused_naming_the_gpu(monkeypatch, name, capability):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    with pytest.raises(ConfigError) as e:
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
    with pytest.raises(ConfigError, match=r"needs torchao, which does not load here .*'ray-efa-eks\[gpu\]'"):
        model_mod.convert_float8(lm, "tensorwise", fsdp=True)


def test_float8_on_an_l4_without_torchao_is_refused_naming_the_bf16_key(monkeypatch):
    _no_torchao(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 9))
    with pytest.raises(ConfigError) as e:
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
    fake.convert_to_float8_training, fake.Float8LinearConfig = convert, Float8LinearConfig
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
    with pytest.raises(ConfigError) as e:
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
    assert summary["precision"] == "float8 tensorwise", f"expected the precision field, got {summary}"
