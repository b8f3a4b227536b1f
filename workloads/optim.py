"""AdamW over fp32 master weights, for a model that is not sharded (one GPU, `--unsharded`).

FSDP2 keeps fp32 parameters and computes in bf16 copies of them; on one rank that costs copies
that go nowhere (the all-gather's copy-in and copy-out, the reduce-scatter's `chunk_cat`, NCCL's
one-rank memcpy: 33.9 ms of a 322.9 ms step on an H200, BENCHMARKS.md). `MasterAdamW` gives the
same arithmetic without them: the model's parameters become bf16 (what the blocks compute in, as
FSDP2's `param_dtype`), the optimizer keeps the fp32 copies and updates those, and after each step
writes them back into the model in bf16. Gradients are computed in bf16, as under FSDP2, and taken
into fp32 once per step; the norm clip is folded into the fused AdamW kernel (its `grad_scale`
divides every gradient), so clipping costs no pass over the gradients of its own.
"""

from __future__ import annotations

import torch


class MasterAdamW(torch.optim.AdamW):
    """AdamW whose parameters are fp32 copies of `model`'s; `model`'s own become `dtype`.

    Call `clip_grad_norm_` (it also takes the model's gradients into fp32), then `step`, then
    `zero_grad`, as `workloads.loop.train_step` does. Buffers (rotary's inverse frequencies) keep
    their dtype, as under FSDP2's mixed precision.
    """

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype, **kwargs):
        self.model_params = list(model.parameters())  # tied weights once
        masters = []
        for p in self.model_params:
            masters.append(p.detach().float().clone())
            p.data = p.data.to(dtype)
        super().__init__(masters, **kwargs)
        self.masters = masters
        self._taken = False

    @torch.no_grad()
    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """The gradients' total 2-norm (fp32, before clipping) and a clip by `max_norm`, as
        `torch.nn.utils.clip_grad_norm_` does (coefficient max_norm / (norm + 1e-6), at most 1)."""
        grads = [p.grad for p in self.model_params if p.grad is not None]
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32)))
        self._take_grads()
        inverse = torch.clamp((total + 1e-6) / max_norm, min=1.0)
        if self.defaults.get("fused"):
            self.grad_scale = inverse  # the fused kernel divides each gradient by it
        else:
            torch._foreach_div_([m.grad for m in self.masters if m.grad is not None], inverse)
        return total

    def _take_grads(self) -> None:
        for m, p in zip(self.masters, self.model_params, strict=True):
            m.grad = None if p.grad is None else p.grad.float()
        self._taken = True

    @torch.no_grad()
    def step(self, closure=None):
        if not self._taken:
            self._take_grads()
        loss = super().step(closure)
        torch._foreach_copy_(self.model_params, self.masters)
        self._taken = False
        self.grad_scale = None
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        for p in self.model_params:
            p.grad = None
