"""The run summary: what rank 0 of a finished training run reports, written as summary.json.

The training loop builds it; the driver, the report, the benchmarks and the drill read it by attribute.
Stored runs and test fixtures hold summaries of older versions with fewer keys, so `from_dict` takes any
subset and leaves the rest at their defaults (None: "not recorded"), and ignores keys it does not know.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

MFU_FORMULA = "tokens/s * (6*N + 12*L*d*T) / (world_size * peak_bf16_flops)"


@dataclass(frozen=True)
class RunSummary:
    run_id: str | None = None
    preset: str | None = None
    world_size: int | None = None  # training processes (ranks)
    backend: str | None = None  # torch.distributed's: "nccl" on GPUs, "gloo" on CPUs
    device: str | None = None  # the GPU's name, or "cpu"
    steps: int | None = None  # optimizer steps the run was asked for, from step 0
    resumed_from_step: int | None = None  # the checkpoint's step this attempt started from; None from scratch
    global_batch_size: int | None = None  # sequences per optimizer step, all ranks together
    micro_batch: int | None = None  # sequences per rank per forward pass
    grad_accum: int | None = None  # forward passes per optimizer step
    seq_len: int | None = None  # tokens per sequence
    precision: str | None = None  # the decoder blocks' matmuls: "bf16" or "float8 <recipe>"
    params: int | None = None  # model parameters, a count
    tokens_per_s: float | None = None  # mean after warm-up, all ranks together
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None  # model FLOPs utilisation, a fraction (0.4 is 40%), per `mfu_formula`
    mfu_formula: str | None = None
    step_time_s: float | None = None  # the median optimizer step, seconds
    loss_first: float | None = None
    loss_last: float | None = None
    losses: tuple[float, ...] = ()  # per step this attempt ran
    peak_mem_gb: float | None = None  # rank 0's peak allocated GPU memory, GB (0 on CPU)
    nccl_log_dir: str | None = None  # where rank 0's host wrote the NCCL logs
    nccl_log_host: str | None = None
    checkpoint: str | None = None  # the final checkpoint's location; None without checkpointing
    oom_fallbacks: tuple[dict[str, Any], ...] = ()  # each first-steps OOM and the micro-batch it fell back to

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        return {**d, "losses": list(self.losses), "oom_fallbacks": [dict(f) for f in self.oom_fallbacks]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSummary:
        known = {f.name for f in dataclasses.fields(cls)}
        kept = {k: v for k, v in d.items() if k in known}
        for k in ("losses", "oom_fallbacks"):
            kept[k] = tuple(kept.get(k) or ())
        return cls(**kept)

    @classmethod
    def parse(cls, text: str) -> RunSummary | None:
        """The summary in a summary.json's text; None for text that is not a JSON object."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            return None
        return cls.from_dict(data) if isinstance(data, dict) else None
