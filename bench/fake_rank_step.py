"""Rank 0 of a fake world: the real module's step, its collectives counted, its memory and time measured.

One process joins PyTorch's `fake` process group as rank 0 of `--world` ranks: every collective
returns at once without sending anything, so the step does exactly one rank's compute and holds
exactly one rank's memory, while `bench.collectives.CollectiveRecorder` records each collective's
kind, dtype, bytes and group. For each config it prints one JSON row:

- the collectives of one optimizer step (after warm-up) and the bytes they put on each link
  (`bench/collectives.py` states the ring model): per NIC across nodes, per GPU inside a node;
- on a GPU: the compute-only step time (median of `--steps`) and the peak allocated and reserved
  memory over the run of that config (what `torch.cuda.max_memory_*` report).

    python bench/fake_rank_step.py --preset tiny --seq-len 32 --configs "mesh=fsdp;mesh=hsdp+accum=2"
    python bench/fake_rank_step.py --configs "mesh=hsdp+micro_batch_size=4+accum=4+activation_checkpointing=1"

A config is `+`-joined `field=value` pairs of TrainConfig, plus `accum=K` (micro-batches per
optimizer step; the global batch is world x micro-batch x K). Defaults: TrainConfig's, with
`--world` workers, micro-batch 4 and `--gpus-per-node` ranks per node for hsdp.
Set PYTORCH_CUDA_ALLOC_CONF before the run to measure an allocator setting (it is read at start).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from bench.collectives import CollectiveRecorder, summarise  # noqa: E402
from bench.train_throughput import apply_bench_only  # noqa: E402
from workloads.config import TrainConfig  # noqa: E402
from workloads.data import MicroBatches  # noqa: E402
from workloads.loop import build_training, release_memory, train_step  # noqa: E402

GIB = 1024**3


def parse_config(spec: str, base: TrainConfig, world: int) -> TrainConfig:
    """`field=value+field=value` (plus `accum=K`) over `base`; refuses unknown fields by name."""
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    over: dict = {}
    accum = 1
    for part in filter(None, spec.split("+")):
        key, _, raw = part.partition("=")
        if key == "accum":
            accum = int(raw)
            continue
        if key == "liger":
            continue  # bench-only (bench/train_throughput.py `apply_bench_only`): applied per config in main
        if key not in fields:
            raise SystemExit(f"config {spec!r}: unknown TrainConfig field {key!r} (use a field of workloads/config.py)")
        over[key] = _value(getattr(base, key), raw)
    cfg = dataclasses.replace(base, **over)
    mb = cfg.micro_batch_size or 4
    # The global batch field is `batch_size`, renamed `global_batch_size` by the TrainConfig table.
    batch = "global_batch_size" if "global_batch_size" in fields else "batch_size"
    return dataclasses.replace(cfg, micro_batch_size=mb, **{batch: world * mb * accum})


def _value(default, raw: str):
    """`raw` as the type of the field's default (a number if the default is None)."""
    if isinstance(default, bool):
        return raw.lower() in ("1", "true", "yes", "on")
    for kind in (int, float):
        if isinstance(default, kind) or default is None:
            try:
                return kind(raw)
            except ValueError:
                if default is not None:
                    raise
    return raw


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(spec: str, cfg: TrainConfig, device, world: int, per_node: int, warmup: int, steps: int) -> dict:
    """Build, warm up, record one step's collectives, time `steps` steps. One row."""
    release_memory(device)
    tr = build_training(cfg, device, world, per_node)
    batches = MicroBatches(cfg, tr.vocab, 0, world).iterate(0)

    def step():
        return train_step(tr.model, tr.optimizer, batches, cfg.grad_accum, cfg.grad_clip, device, tr.vocab)

    for _ in range(warmup):
        step()
    rec = CollectiveRecorder()
    with rec.recording():
        step()
    _sync(device)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    row = {
        "config": spec,
        "mesh": cfg.mesh,
        "world": world,
        "gpus_per_node": per_node,
        "micro_batch": cfg.micro_batch,
        "accum": cfg.grad_accum,
        "seq_len": cfg.seq_len,
        "reduce_dtype": cfg.reduce_dtype,
        "activation_checkpointing": cfg.activation_checkpointing,
        "ac_policy": cfg.ac_policy,
        "ac_blocks": cfg.ac_blocks,
        "ac_rest_policy": cfg.ac_rest_policy,
        "reshard_after_forward": cfg.reshard_after_forward,
        "loss_chunk_size": cfg.loss_chunk_size,
        "float8": cfg.float8,
        "tokens_per_rank_step": cfg.micro_batch * cfg.grad_accum * cfg.seq_len,
        "n_params": tr.n_params,
        "n_layers": tr.n_layers,
        "hidden": tr.hidden,
        "collectives": summarise(rec.calls, world, per_node),
        "step_time_s": statistics.median(times) if times else None,
        "step_times_s": times,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    }
    if device.type == "cuda":
        row["peak_allocated_gib"] = torch.cuda.max_memory_allocated(device) / GIB
        row["peak_reserved_gib"] = torch.cuda.max_memory_reserved(device) / GIB
        # What the process holds on the GPU outside PyTorch's allocator, the model still alive: the CUDA
        # context, loaded kernels, cuBLAS/cuDNN handles (the fake group allocates no NCCL buffers).
        free, total = torch.cuda.mem_get_info(device)
        row["outside_allocator_gib"] = (total - free - torch.cuda.memory_reserved(device)) / GIB
    tr = batches = None  # drop the model before the next config is built
    release_memory(device)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="qwen2.5-1.5b")
    p.add_argument("--world", type=int, default=8)
    p.add_argument("--gpus-per-node", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--configs", default="mesh=fsdp", help="';'-separated configs (see the module docstring)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed steps per config (0: count only)")
    p.add_argument("--out", help="append one JSON row per config to this file")
    a = p.parse_args(argv)
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=a.world)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    base = TrainConfig(preset=a.preset, seq_len=a.seq_len, num_workers=a.world, use_gpu=cuda, run_id="fake")
    for spec in a.configs.split(";"):
        cfg = parse_config(spec, base, a.world)
        apply_bench_only(spec)
        try:
            row = measure(spec, cfg, device, a.world, a.gpus_per_node, a.warmup, a.steps)
        except torch.OutOfMemoryError as e:
            row = {"config": spec, "oom": str(e).splitlines()[0]}
        except Exception as e:  # one config that cannot run (a compile error) must not lose the others
            row = {"config": spec, "error": f"{type(e).__name__}: {str(e)[:500]}"}
        release_memory(device)
        line = json.dumps(row)
        print(line, flush=True)
        if a.out:
            with open(a.out, "a") as f:
                f.write(line + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
