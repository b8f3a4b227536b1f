"""`MasterAdamW` (`--unsharded`): the model computes in bf16, the optimizer updates fp32 copies, and
the step's arithmetic is plain AdamW with the gradient-norm clip, on CPU."""

from __future__ import annotations

import pytest
import torch

from workloads.loop import train_step
from workloads.optim import MasterAdamW

CPU = torch.device("cpu")
VOCAB = 13


class TiedLM(torch.nn.Module):
    """Embedding and output weight tied (as Qwen2.5-1.5B's), a norm, and a float buffer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(VOCAB, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, VOCAB, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.full((8,), 0.5))

    def forward(self, ids, labels):
        h = self.norm(self.emb(ids)) * self.scale.to(self.emb.weight.dtype)
        logits = self.head(h).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _steps(opt_of, clip: float, n: int = 4):
    model = TiedLM()
    opt = opt_of(model)
    g = torch.Generator().manual_seed(1)
    data = [torch.randint(0, VOCAB, (4, 6), generator=g) for _ in range(n)]
    out = []
    for ids in data:
        stats: dict = {}
        loss = train_step(model, opt, iter([(ids, ids.roll(-1, 1))]), 1, clip, CPU, VOCAB, stats)
        out.append((loss.item(), stats["grad_norm"].item()))
    return model, opt, out


def _adamw(params):
    return {"lr": 1e-2, "betas": (0.9, 0.95), "weight_decay": 0.1}


@pytest.mark.parametrize("clip", [1e9, 1e-2])
def test_fp32_masters_step_as_plain_adamw_with_the_clip(clip):
    plain, _, want = _steps(lambda m: torch.optim.AdamW(m.parameters(), **_adamw(m)), clip)
    master, opt, got = _steps(lambda m: MasterAdamW(m, torch.float32, **_adamw(m)), clip)
    for (lw, nw), (lg, ng) in zip(want, got, strict=True):
        assert lg == pytest.approx(lw, rel=1e-5) and ng == pytest.approx(nw, rel=1e-5)
    for p, q in zip(plain.parameters(), master.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


def test_bf16_model_takes_its_weights_from_the_fp32_masters_after_each_step():
    model, opt, _ = _steps(lambda m: MasterAdamW(m, torch.bfloat16, **_adamw(m)), 1.0)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert all(m.dtype == torch.float32 for m in opt.masters)
    assert model.scale.dtype == torch.float32, "buffers keep their dtype, as under FSDP2's mixed precision"
    for p, m in zip(model.parameters(), opt.masters, strict=True):
        assert torch.equal(p, m.to(torch.bfloat16))
    assert model.head.weight is model.emb.weight, "the output weight stays tied to the embedding"
    assert len(opt.masters) == 3, "the tied weight is one master (embedding, norm weight and bias)"


def test_bf16_model_learns_like_the_fp32_one():
    _, _, fp32 = _steps(lambda m: torch.optim.AdamW(m.parameters(), **_adamw(m)), 1.0, n=6)
    _, _, bf16 = _steps(lambda m: MasterAdamW(m, torch.bfloat16, **_adamw(m)), 1.0, n=6)
    for (lw, _), (lg, _) in zip(fp32, bf16, strict=True):
        assert lg == pytest.approx(lw, rel=2e-2), "bf16 compute stays within bf16's tolerance of fp32"


def test_step_leaves_no_gradient_on_model_or_masters():
    model, opt, _ = _steps(lambda m: MasterAdamW(m, torch.bfloat16, **_adamw(m)), 1.0, n=1)
    assert all(p.grad is None for p in model.parameters())
    assert all(m.grad is None for m in opt.masters)
