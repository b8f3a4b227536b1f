"""Causal-LM loss heads over the final hidden states.

`full` is what transformers does: materialise the logits of every token, upcast to fp32, then
cross-entropy. For Qwen2.5's 151,936-token vocabulary that is 8 x 2048 x 151,936 x 4 bytes = 10 GB
of fp32 logits for one micro-batch of 8 x 2048, plus their gradient.

`chunked` never holds more than one chunk of logits: the forward pass walks the tokens in chunks,
computes each chunk's loss *and* its gradients with respect to the hidden states and the output
weight right away, and keeps only those gradients for backward. Backward then only scales them, so
the logits are computed once, not recomputed (a recompute of the 151,936-way head costs more than
it saves at this model size).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def full_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss over labels != IGNORE_INDEX; hidden [N, d], weight [V, d], labels [N]."""
    logits = (hidden @ weight.t()).float()
    return F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)


def _chunk_loss_and_grad(logits: torch.Tensor, y: torch.Tensor, m: torch.Tensor, inv: torch.Tensor):
    """Summed loss of one chunk and d(mean loss)/d(logits) = (softmax - onehot) * inv on valid rows.

    Pure elementwise work and one reduction over the vocabulary: on GPU it is compiled, so the
    chunk's logits are read twice and never copied to fp32 in memory.
    """
    x = logits.float()
    lse = torch.logsumexp(x, dim=-1)
    target = x.gather(1, y[:, None]).squeeze(1)
    loss = ((lse - target) * m).sum()
    onehot = torch.arange(x.shape[1], device=x.device)[None, :] == y[:, None]
    g = (torch.exp(x - lse[:, None]) - onehot.to(x.dtype)) * (m.to(x.dtype) * inv)[:, None]
    return loss, g.to(logits.dtype)


_compiled_chunk = None


def _chunk_fn(device: torch.device):
    global _compiled_chunk
    if device.type != "cuda":
        return _chunk_loss_and_grad
    if _compiled_chunk is None:
        _compiled_chunk = torch.compile(_chunk_loss_and_grad, dynamic=False)
    return _compiled_chunk


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_size):
        n = hidden.shape[0]
        valid = labels != IGNORE_INDEX
        n_valid = valid.sum().clamp(min=1)
        safe = torch.where(valid, labels, torch.zeros_like(labels))
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_h = torch.empty_like(hidden)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        inv = 1.0 / n_valid.to(torch.float32)
        chunk = _chunk_fn(hidden.device)
        for s in range(0, n, chunk_size):
            h = hidden[s : s + chunk_size]
            part, g = chunk(h @ weight.t(), safe[s : s + chunk_size], valid[s : s + chunk_size], inv)
            loss += part
            grad_h[s : s + chunk_size] = g @ weight
            grad_w += (g.t() @ h).float()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.weight_dtype = weight.dtype
        return loss * inv

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_out.to(grad_h.dtype), (grad_w * grad_out).to(ctx.weight_dtype), None, None


def chunked_cross_entropy(
    hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_size: int = 4096
) -> torch.Tensor:
    """Same value and gradients as `full_cross_entropy`, in O(chunk_size x V) memory."""
    return _ChunkedLinearCrossEntropy.apply(hidden, weight, labels, chunk_size)
