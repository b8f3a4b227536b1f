"""Where one training step's GPU time goes: torch.profiler over a few steps of the module's step.

Builds the model as `bench/train_throughput.py` does (one GPU, one-rank process group, the same
`build_training` / `train_step`), warms up, profiles `--steps` steps and prints the kernels with
the most GPU time, grouped into matmul, attention, loss, optimizer, FSDP copies and the rest.

    python3 bench/profile_step.py --steps 3            # module defaults, 8 x 2048
    python3 bench/profile_step.py --set float8=tensorwise,liger=rms --gemms 12

`--gemms N` also lists the N matmuls (aten mm/addmm/bmm by input shapes) with the most GPU time and
the TFLOP/s each reached, to tell which of the step's matrix shapes run below the card's rate.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from bench.train_throughput import _parse_overrides, apply_bench_only  # noqa: E402  (one parser)
from workloads.config import TrainConfig  # noqa: E402
from workloads.data import MicroBatches  # noqa: E402
from workloads.loop import build_training, train_step  # noqa: E402

GROUPS = [  # first match wins; names are CUDA kernel names as the profiler reports them
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn")),
    ("matmul", ("gemm", "sm90_xmma", "cutlass", "nvjet", "matmul", "wgmma")),
    ("optimizer", ("adam", "multi_tensor", "foreach", "norm_kernel", "lpnorm")),
    # Float8's scaling: the amax reductions and the casts inductor generates around `_scaled_mm` (torchao).
    ("float8 amax and casts (triton)", ("abs_max", "_scaled_mm", "reciprocal", "clamp")),
    ("compiled elementwise (triton)", ("triton",)),
    ("fsdp copies", ("chunk_cat", "split_with_sizes", "copy_", "memcpy", "all_gather", "reduce_scatter", "nccl")),
]


def group_of(name: str) -> str:
    low = name.lower()
    for group, keys in GROUPS:
        if any(k in low for k in keys):
            return group
    return "other"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="qwen2.5-1.5b")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--gemms", type=int, default=0, help="also list the N matmul shapes with the most GPU time")
    p.add_argument("--set", default="", help="TrainConfig overrides, key=value,... (e.g. unsharded=1)")
    args = p.parse_args(argv)
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29534"), ("RANK", "0"), ("WORLD_SIZE", "1")):
        os.environ.setdefault(k, v)
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group("cpu:gloo,cuda:nccl")
    apply_bench_only(args.set)
    cfg = TrainConfig(
        preset=args.preset,
        use_gpu=True,
        global_batch_size=args.batch_size,
        seq_len=args.seq_len,
        num_workers=1,
        **_parse_overrides(args.set),
    ).resolved()
    tr = build_training(cfg, device, 1)
    batches = MicroBatches(cfg, tr.vocab, 0, 1).iterate(0)
    for _ in range(args.warmup):
        train_step(tr.model, tr.optimizer, batches, cfg.grad_accum, cfg.grad_clip, device, tr.vocab)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=bool(args.gemms)) as prof:
        for _ in range(args.steps):
            train_step(tr.model, tr.optimizer, batches, cfg.grad_accum, cfg.grad_clip, device, tr.vocab)
        torch.cuda.synchronize()
    kernels = collections.Counter()
    for ev in prof.key_averages():
        if ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        t = getattr(ev, "self_device_time_total", None)
        if t is None:
            t = ev.self_cuda_time_total
        if t > 0:
            kernels[ev.key] += t
    total = sum(kernels.values())
    groups = collections.Counter()
    for name, t in kernels.items():
        groups[group_of(name)] += t
    print(f"GPU time over {args.steps} steps: {total / 1e3:.1f} ms ({total / 1e3 / args.steps:.1f} ms per step)")
    for g, t in groups.most_common():
        print(f"  {g:32s} {t / 1e3 / args.steps:8.1f} ms/step {t / total:6.1%}")
    print(f"top {args.top} kernels:")
    for name, t in kernels.most_common(args.top):
        print(f"  {t / 1e3 / args.steps:8.2f} ms/step {t / total:6.1%}  {name[:110]}")
    if args.gemms:
        print_gemms(prof, args.steps, args.gemms)
    dist.destroy_process_group()
    return 0


def gemm_flops(name: str, shapes: list) -> float:
    """FLOPs of one aten matmul call from its input shapes (0 when the shapes do not say)."""
    dims = [s for s in shapes if isinstance(s, list) and len(s) >= 2]
    if name == "aten::addmm" and len(dims) >= 2:
        dims = dims[-2:]
    if len(dims) < 2:
        return 0.0
    a, b = dims[0], dims[1]
    batch = 1
    for d in a[:-2]:
        batch *= d
    return 2.0 * batch * a[-2] * a[-1] * b[-1]


def print_gemms(prof, steps: int, top: int) -> None:
    rows = []
    for ev in prof.key_averages(group_by_input_shape=True):
        if ev.key not in ("aten::mm", "aten::addmm", "aten::bmm"):
            continue
        t = getattr(ev, "device_time_total", 0) or getattr(ev, "cuda_time_total", 0)
        if t <= 0:
            continue
        flops = gemm_flops(ev.key, ev.input_shapes) * ev.count
        rows.append((t, ev.key, ev.input_shapes, ev.count, flops))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"matmuls by shape: {total / 1e3 / steps:.1f} ms per step")
    for t, key, shapes, count, flops in rows[:top]:
        rate = flops / (t * 1e-6) / 1e12 if flops else float("nan")
        dims = [s for s in shapes if s]
        print(f"  {t / 1e3 / steps:8.2f} ms/step  {count // steps:4d}/step  {rate:6.0f} TFLOP/s  {key} {dims}")


if __name__ == "__main__":
    sys.exit(main())
