"""The chunked loss head equals transformers-style full cross-entropy, value and gradients."""

from __future__ import annotations

import pytest
import torch

from workloads.loss import IGNORE_INDEX, chunked_cross_entropy, full_cross_entropy


def _case(dtype, n=37, d=16, v=101, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(v, d, generator=g) * 0.2).to(dtype).requires_grad_()
    y = torch.randint(0, v, (n,), generator=g)
    y[::5] = IGNORE_INDEX  # padded positions must not count
    return h, w, y


def _loss_and_grads(fn, h, w, y):
    h = h.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    loss = fn(h, w, y)
    (loss * 3.0).backward()  # a non-unit upstream gradient must be applied too
    return loss.detach(), h.grad, w.grad


@pytest.mark.parametrize("chunk", [1, 8, 37, 1000])
def test_chunked_loss_matches_full_in_fp32(chunk):
    h, w, y = _case(torch.float32)
    ref = _loss_and_grads(full_cross_entropy, h, w, y)
    got = _loss_and_grads(lambda a, b, c: chunked_cross_entropy(a, b, c, chunk), h, w, y)
    for name, r, g in zip(("loss", "grad_hidden", "grad_weight"), ref, got, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name} (chunk {chunk}): {m}")


def test_chunked_loss_matches_full_in_bf16():
    h, w, y = _case(torch.bfloat16, n=64, d=32, v=257)
    ref = _loss_and_grads(full_cross_entropy, h, w, y)
    got = _loss_and_grads(lambda a, b, c: chunked_cross_entropy(a, b, c, 16), h, w, y)
    assert got[1].dtype == torch.bfloat16 and got[2].dtype == torch.bfloat16, "gradients must keep the parameter dtype"
    for name, r, g in zip(("loss", "grad_hidden", "grad_weight"), ref, got, strict=True):
        torch.testing.assert_close(g.float(), r.float(), rtol=2e-2, atol=2e-3, msg=lambda m, name=name: f"{name}: {m}")


def test_all_ignored_labels_give_zero_loss_and_gradient():
    h, w, y = _case(torch.float32)
    y[:] = IGNORE_INDEX
    loss, gh, gw = _loss_and_grads(lambda a, b, c: chunked_cross_entropy(a, b, c, 8), h, w, y)
    assert loss.item() == 0.0 and gh.abs().max().item() == 0.0 and gw.abs().max().item() == 0.0


def test_single_counted_label_is_averaged_over_one_token():
    h, w, y = _case(torch.float32)
    y[:] = IGNORE_INDEX
    y[3] = 7  # one token counts: the mean is that token's loss, not half of it
    ref = _loss_and_grads(full_cross_entropy, h, w, y)
    got = _loss_and_grads(lambda a, b, c: chunked_cross_entropy(a, b, c, 8), h, w, y)
    for name, r, g in zip(("loss", "grad_hidden", "grad_weight"), ref, got, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
