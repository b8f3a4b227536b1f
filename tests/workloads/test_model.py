"""The model builder: pretrained weights from a local directory offline; MFU's peak per GPU."""

from __future__ import annotations

import pytest
import torch

from workloads import model as model_mod
from workloads.config import TrainConfig


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
