"""Training throughput of the module's step against the reference recipe, in one process.

Runs without Ray (GPU machines that lack it) by calling the training module's own
`build_training` and `train_step`, on one GPU as a one-rank process group. Variants, all at the
same batch and sequence length, interleaved A/B/C/A/B/C so drifts in clocks or temperature hit all
alike; each window runs in a fresh process of its own (so nothing a window leaves behind, such as
the FSDP1 reference's flat parameters, can shrink the next one's memory), builds its model, runs
`--warmup` steps (compilation, allocator) and then times `--steps` steps between two device
synchronisations. Reported per variant: the median tokens/s over the rounds, tokens/s per GPU, MFU,
step time and peak memory (each row also records what was allocated at its start, `held_at_start_gb`:
0 in a fresh process).

Variants:
  reference  the AWS sample's recipe as `ray.train.torch.prepare_model(parallel_strategy="fsdp")`
             sets it up, without Ray: FSDP1 FULL_SHARD, torch's size-based auto-wrap policy at its
             default threshold (1e8 parameters), MixedPrecision bf16 for params, reductions and
             buffers, transformers' own loss (`model(input_ids, labels=...).loss`, KV cache left at
             its default), torch's default AdamW (foreach, not fused).
  fsdp2      plain FSDP2 bf16: `fully_shard` per decoder block then the root, SDPA, the full
             fp32-logits loss, fused AdamW, no compile.
  default    the training module's defaults (`TrainConfig()`), whatever they are now.
  Any other name is `key=value+...` overrides of TrainConfig, e.g. `compile=1+loss=full`; the three
  named variants take overrides after a `+`, e.g. `reference+micro_batch_size=8` runs the global
  batch as two micro-batches of 8 when 16 at once does not fit.
  `liger=K.K...` (bench only, not a TrainConfig field) swaps in Liger-Kernel's Triton kernels for the
  window: rms (RMSNorm), swiglu (the MLP), rope (rotary embedding), each through
  `apply_liger_kernel_to_qwen2` before the model is built (so compile traces them), and flce (its fused
  linear cross-entropy in place of the chunked loss), e.g. `default+liger=rms.swiglu.rope.flce`.
  `f8opt=K.K...` (bench only) changes torchao's Float8LinearConfig for a `float8=tensorwise` window (issue 47,
  item 5): fastaccum (the two backward GEMMs accumulate fast, as the forward one does), pow2 (scales rounded
  down to powers of two), bf16wgrad (the weight-gradient GEMM in bf16: its operands' casts skipped).

MFU = tokens/s x (6N + 12 L d T) / peak, N the parameters with the tied embedding once, peak the
GPU's dense bf16 rate (989 TFLOP/s for H100/H200).

    python bench/train_throughput.py --variants reference,fsdp2,default --shapes 8x2048 --rounds 3
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import json
import multiprocessing
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from workloads.config import TrainConfig, field_type  # noqa: E402
from workloads.data import MicroBatches  # noqa: E402
from workloads.loop import Training, build_training, release_memory, train_step  # noqa: E402
from workloads.model import count_params, flops_per_token, peak_tflops, qwen2_config  # noqa: E402

PLAIN_FSDP2 = {"loss": "full", "compile": False, "reshard_after_forward": True, "activation_checkpointing": False}


LIGER_KERNELS = ("rms", "swiglu", "rope", "flce")


def liger_kernels(name: str) -> tuple[str, ...]:
    """The Liger kernels a variant name asks for (`liger=rms.flce`), in LIGER_KERNELS' order."""
    asked: set[str] = set()
    for item in name.replace("+", ",").split(","):
        if item.startswith("liger="):
            asked |= set(filter(None, item.removeprefix("liger=").split(".")))
    unknown = asked - set(LIGER_KERNELS)
    if unknown:
        known = ", ".join(LIGER_KERNELS)
        raise SystemExit(f"unknown Liger kernel(s) {sorted(unknown)} in {name!r}: choose from {known}")
    return tuple(k for k in LIGER_KERNELS if k in asked)


def apply_liger(kernels: tuple[str, ...]) -> None:
    """Patch transformers' Qwen2 (and the project's loss) with Liger's kernels, in this process only."""
    if not kernels:
        return
    from liger_kernel.transformers import apply_liger_kernel_to_qwen2

    apply_liger_kernel_to_qwen2(
        rope="rope" in kernels,
        rms_norm="rms" in kernels,
        swiglu="swiglu" in kernels,
        cross_entropy=False,
        fused_linear_cross_entropy=False,
    )
    if "flce" in kernels:
        from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

        from workloads import loss as loss_fns

        def flce(hidden, weight, labels, chunk_size=None):
            return liger_fused_linear_cross_entropy(hidden, weight, labels, ignore_index=loss_fns.IGNORE_INDEX)

        loss_fns.chunked_cross_entropy = flce


F8OPTS = ("fastaccum", "pow2", "bf16wgrad")


def float8_option_names(name: str) -> tuple[str, ...]:
    """The Float8LinearConfig options a variant name asks for (`f8opt=fastaccum.pow2`), in F8OPTS' order."""
    asked = {o for i in name.replace("+", ",").split(",") if i.startswith("f8opt=") for o in i[6:].split(".") if o}
    if asked - set(F8OPTS):
        raise SystemExit(f"unknown f8opt(s) {sorted(asked - set(F8OPTS))} in {name!r}: choose from {', '.join(F8OPTS)}")
    return tuple(o for o in F8OPTS if o in asked)


def float8_options(names: tuple[str, ...]) -> dict:
    """Float8LinearConfig fields of the options `names` (torchao 0.17 torchao/float8/config.py)."""
    from torchao.float8.config import CastConfig, Float8GemmConfig, ScalingType

    def off(dtype):  # a skipped cast still names its dtype: torchao checks both uses of an operand agree
        return CastConfig(scaling_type=ScalingType.DISABLED, target_dtype=dtype)

    fields = {
        "fastaccum": {f"gemm_config_grad_{g}": Float8GemmConfig(use_fast_accum=True) for g in ("input", "weight")},
        "pow2": {"round_scales_to_power_of_2": True},
        "bf16wgrad": {
            "cast_config_input_for_grad_weight": off(torch.float8_e4m3fn),
            "cast_config_grad_output_for_grad_weight": off(torch.float8_e5m2),
        },
    }
    return {k: v for n in names for k, v in fields[n].items()}


def apply_bench_only(name: str) -> None:
    """The bench-only keys of a variant (`liger=`, `f8opt=`), applied in this process only."""
    apply_liger(liger_kernels(name))
    if opts := float8_option_names(name):
        import functools

        import torchao.float8

        # workloads/model.py imports Float8LinearConfig from torchao.float8 when it converts the model
        torchao.float8.Float8LinearConfig = functools.partial(torchao.float8.Float8LinearConfig, **float8_options(opts))


BENCH_ONLY = ("liger=", "f8opt=")


def _parse_overrides(text: str) -> dict:
    out = {}
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    for item in filter(None, text.replace("+", ",").split(",")):
        if item.startswith(BENCH_ONLY):
            continue  # bench-only: `apply_bench_only` in the window's process
        k, v = item.split("=", 1)
        if k not in fields:
            raise SystemExit(f"unknown TrainConfig field {k!r} in variant {text!r}")
        kind = field_type(k)
        out[k] = (v.lower() in ("1", "true", "yes")) if kind is bool else kind(v)
    return out


def variant_config(name: str) -> tuple[bool, dict]:
    """(is the reference recipe, TrainConfig overrides) of a variant name.

    `reference`, `fsdp2` and `default` may carry overrides after a `+`, e.g.
    `fsdp2+micro_batch_size=8` (the same global batch in two micro-batches); for the reference
    only the batch fields (micro_batch_size) matter.
    """
    base, _, rest = name.partition("+")
    if base == "reference":
        return True, _parse_overrides(rest)
    if base == "fsdp2":
        return False, {**PLAIN_FSDP2, **_parse_overrides(rest)}
    if base == "default":
        return False, _parse_overrides(rest)
    return False, _parse_overrides(name)


class _HFLoss(torch.nn.Module):
    """The reference recipe's forward: transformers computes the loss from `labels`."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, labels):
        return self.inner(input_ids=input_ids, labels=labels).loss


def build_reference(cfg: TrainConfig, device: torch.device) -> Training:
    from functools import partial

    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
    from transformers import Qwen2ForCausalLM

    config = qwen2_config(cfg)
    config.use_cache = True  # transformers' default, which the sample leaves alone
    torch.manual_seed(cfg.seed)
    with torch.device(device):
        lm = Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    n = count_params(lm)
    wrapped = FSDP(
        lm,
        auto_wrap_policy=partial(size_based_auto_wrap_policy),
        mixed_precision=MixedPrecision(
            param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16, buffer_dtype=torch.bfloat16
        ),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        device_id=device,
    )
    model = _HFLoss(wrapped)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay)
    return Training(model, opt, n, config.vocab_size, config.num_hidden_layers, config.hidden_size)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def isolated_window(name: str, cfg: TrainConfig, warmup: int, steps: int) -> dict:
    """`window` in a fresh spawned process, its own one-rank group: whatever a window leaves allocated
    (on 2026-12-05 the memory held at a window's start grew from 0 to 28.5 GB over four windows in one
    process, and the reference ran out of memory) dies with that process. An OOM is a row with `error`."""
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(_child_window, name, cfg.to_dict(), warmup, steps).result()


def _child_window(name: str, cfg_dict: dict, warmup: int, steps: int) -> dict:
    cfg = TrainConfig.from_dict(cfg_dict)
    apply_bench_only(name)
    device = torch.device("cuda", 0) if cfg.use_gpu else torch.device("cpu")
    if cfg.use_gpu:
        torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group(
            "cpu:gloo,cuda:nccl" if cfg.use_gpu else "gloo", init_method=f"file://{d}/pg", rank=0, world_size=1
        )
        try:
            return window(name, cfg, device, warmup, steps)
        except torch.OutOfMemoryError as e:
            return {
                "variant": name,
                "batch_size": cfg.global_batch_size,
                "seq_len": cfg.seq_len,
                "error": f"out of memory: {str(e)[:200]}",
            }
        finally:
            dist.destroy_process_group()


def window(name: str, cfg: TrainConfig, device: torch.device, warmup: int, steps: int) -> dict:
    """Build the variant, warm it up, time `steps` steps. Returns one measurement row."""
    is_reference, overrides = variant_config(name)
    run_cfg = dataclasses.replace(cfg, **overrides)
    release_memory(device)
    held_gb = torch.cuda.memory_allocated(device) / 1e9 if device.type == "cuda" else None
    t_build = time.perf_counter()
    tr = build_reference(run_cfg, device) if is_reference else build_training(run_cfg, device, 1)
    batches = MicroBatches(run_cfg, tr.vocab, 0, 1).iterate(0)
    build_s = time.perf_counter() - t_build
    t_warm = time.perf_counter()
    losses = [
        train_step(tr.model, tr.optimizer, batches, run_cfg.grad_accum, run_cfg.grad_clip, device, tr.vocab)
        for _ in range(warmup)
    ]
    _sync(device)
    warm_s = time.perf_counter() - t_warm
    t0 = time.perf_counter()
    for _ in range(steps):
        losses.append(
            train_step(tr.model, tr.optimizer, batches, run_cfg.grad_accum, run_cfg.grad_clip, device, tr.vocab)
        )
    _sync(device)
    elapsed = time.perf_counter() - t0
    peak_gb = torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None
    tokens = steps * cfg.global_batch_size * cfg.seq_len
    tps = tokens / elapsed
    peak = peak_tflops(device)
    fpt = flops_per_token(tr.n_params, tr.n_layers, tr.hidden, cfg.seq_len)
    row = {
        "variant": name,
        "batch_size": cfg.global_batch_size,
        "micro_batch": run_cfg.micro_batch,
        "seq_len": cfg.seq_len,
        "tokens_per_s": tps,
        "tokens_per_s_per_gpu": tps,
        "mfu": tps * fpt / (peak * 1e12) if peak else None,
        "step_time_ms": 1e3 * elapsed / steps,
        "peak_mem_gb": peak_gb,
        "held_at_start_gb": held_gb,
        "own_peak_gb": peak_gb - held_gb if peak_gb is not None else None,
        "build_s": build_s,
        "warmup_s": warm_s,
        "loss_last": float(losses[-1]),
        "losses": [float(x) for x in losses],
    }
    return row


def numerics(names: list[str], cfg: TrainConfig, n_steps: int) -> dict:
    """Same seed, same data, `n_steps` steps per variant: the loss curves side by side. The data is the learnable
    synthetic task, or real text where `--set data=FILE` names it (docs/float8.md's pre-registered comparison)."""
    task = cfg.task if cfg.data else "learnable"
    curves = {}
    for name in names:
        curves[name] = isolated_window(name, dataclasses.replace(cfg, task=task), 0, n_steps)["losses"]
    base = curves[names[0]]
    return {
        "steps": n_steps,
        "task": f"data {Path(cfg.data).name}" if cfg.data else task,
        "seed": cfg.seed,
        "curves": curves,
        "max_abs_diff": {n: max(abs(a - b) for a, b in zip(base, c, strict=True)) for n, c in curves.items()},
        "max_rel_diff": {n: max(abs(a - b) / abs(b) for a, b in zip(base, c, strict=True)) for n, c in curves.items()},
        "mean_abs_diff": {
            n: statistics.fmean(abs(a - b) for a, b in zip(base, c, strict=True)) for n, c in curves.items()
        },
    }


def environment(device) -> dict:
    import transformers

    env = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
    }
    if device.type == "cuda":
        env["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        env["cuda"] = torch.version.cuda
    from importlib.metadata import PackageNotFoundError, version

    for package in ("torchao", "liger-kernel"):
        try:
            env[package] = version(package)
        except PackageNotFoundError:
            env[package] = None
    return env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    p.add_argument("--preset", default="qwen2.5-1.5b")
    p.add_argument("--variants", default="reference,fsdp2,default")
    p.add_argument("--shapes", default="8x2048", help="comma list of BATCHxSEQ_LEN")
    p.add_argument("--only-at", default="", help="SHAPE=variant|variant;... run only these variants at that shape")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--numerics-steps", type=int, default=0, help="also compare loss curves over N steps")
    p.add_argument(
        "--numerics-variants",
        default="fsdp2,default",
        help="variants of the loss-curve comparison; the first is the baseline",
    )
    p.add_argument(
        "--numerics-shape", default="", help="BATCHxSEQ_LEN of the comparison (default: the first of --shapes)"
    )
    p.add_argument("--out", default="", help="append JSON lines here as results arrive")
    p.add_argument("--set", default="", help="TrainConfig overrides for every variant, key=value,...")
    args = p.parse_args(argv)

    use_gpu = torch.cuda.is_available()
    device = torch.device("cuda", 0) if use_gpu else torch.device("cpu")
    out = open(args.out, "a") if args.out else None

    def emit(obj):
        line = json.dumps(obj)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    emit({"environment": environment(device), "argv": sys.argv[1:]})
    only = {}
    for part in filter(None, args.only_at.split(";")):
        shape, names = part.split("=", 1)
        only[shape] = names.split("|")
    base_overrides = _parse_overrides(args.set)
    results = []
    for shape in args.shapes.split(","):
        b, t = map(int, shape.lower().split("x"))
        cfg = TrainConfig(
            preset=args.preset, use_gpu=use_gpu, global_batch_size=b, seq_len=t, num_workers=1, **base_overrides
        ).resolved()
        names = only.get(shape, args.variants.split(","))
        for r in range(args.rounds):
            for name in names:
                row = isolated_window(name, cfg, args.warmup, args.steps)
                row["round"] = r
                emit({k: v for k, v in row.items() if k != "losses"})
                results.append(row)
    print(
        "\nvariant                      shape     tokens/s   MFU    step ms  own peak GB  "
        "(median of rounds; each window in a fresh process)"
    )
    for shape in args.shapes.split(","):
        b, t = map(int, shape.lower().split("x"))
        for name in dict.fromkeys(r["variant"] for r in results if r["seq_len"] == t and r["batch_size"] == b):
            rows = [
                r
                for r in results
                if r["variant"] == name and r["seq_len"] == t and r["batch_size"] == b and "error" not in r
            ]
            if not rows:
                print(f"{name:28s} {shape:9s} failed: {[r.get('error') for r in results if r['variant'] == name][:1]}")
                continue
            tps = statistics.median(r["tokens_per_s"] for r in rows)
            mfu = statistics.median(r["mfu"] for r in rows) if rows[0]["mfu"] is not None else None
            ms = statistics.median(r["step_time_ms"] for r in rows)
            mem = max(r.get("own_peak_gb") or 0 for r in rows)
            summary = {
                "summary": name,
                "shape": shape,
                "tokens_per_s": tps,
                "mfu": mfu,
                "step_time_ms": ms,
                "own_peak_gb": mem,
                "windows": len(rows),
            }
            if out:
                out.write(json.dumps(summary) + "\n")
            mfu_s = f"{mfu:6.1%}" if mfu is not None else "   n/a"
            print(f"{name:28s} {shape:9s} {tps:10,.0f} {mfu_s} {ms:8.1f} {mem:8.1f}")
    if args.numerics_steps:
        b, t = map(int, (args.numerics_shape or args.shapes.split(",")[0]).lower().split("x"))
        cfg = TrainConfig(
            preset=args.preset, use_gpu=use_gpu, global_batch_size=b, seq_len=t, num_workers=1, **base_overrides
        ).resolved()
        emit({"numerics": numerics(args.numerics_variants.split(","), cfg, args.numerics_steps)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
