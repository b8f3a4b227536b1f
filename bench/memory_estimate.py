"""Estimate the per-GPU memory of the reference job from the model's shapes: an estimate, not a measurement.

Measured numbers supersede it: `bench/fake_rank_step.py` runs the real step as rank 0 of a fake
world of 8 on a GPU and reports PyTorch's peak allocated and reserved memory
(bench/results/2026-12-04-h200/README.md, "Memory per rank, measured"). For the fsdp, 4 x 2048,
activation-checkpointing job this estimate says 19.6 GiB where 11.5 GiB allocated / 15.1 GiB reserved
were measured (2026-12-04, H200): it errs high, which keeps the stack's fit test on the safe side.

The reference job: Qwen2.5-1.5B (workloads/configs/qwen2.5-1.5b.json), FSDP2 full shard as
`workloads.model.apply_fsdp` does it (`fully_shard` per decoder block, then the root), bf16 compute
parameters (MixedPrecisionPolicy param_dtype=bf16, reduce_dtype=fp32), fp32 sharded master
parameters, fp32 sharded gradients and fused AdamW (two fp32 states), SDPA flash attention, loss
head from `workloads.loss`. Nothing is allocated: the shapes come from the shipped config.

    python bench/memory_estimate.py
    python bench/memory_estimate.py --world-size 4 --seq-len 4096 --gpu-mem-gib 22.5 --json

prints one row per micro-batch 1, 2, 4, 8 x reshard_after_forward True/False x activation
checkpointing off/on x loss chunked/full: the terms below in GiB, the estimated total and whether
it fits, then the largest micro-batch that fits with `TrainConfig()`'s defaults.

Formula, bytes per GPU. P parameters (tied embedding counted once), P_blk one decoder block's,
L layers, d hidden, I intermediate, V vocabulary, W world size, b micro-batch, T sequence length,
N = b*T tokens, C = min(loss chunk, N):

    states  = 16 * P / W           fp32 master 4 + fp32 grad 4 + AdamW exp_avg 4 + exp_avg_sq 4, sharded
    blocks  = 2 * P_blk * k        bf16 gathered blocks: k = 2 with reshard_after_forward (the last
                                   block, which apply_fsdp never reshards, plus one prefetched), k = L without
    root    = 2 * (V*d + d)        the root's gathered bf16 tied embedding/lm_head and final norm
    acts    = N * (L * A_blk + A_root)            without activation checkpointing
            = N * (L * 2d + A_blk + A_root)       with it: each block's bf16 input, plus one block's
                                                  activations while it is recomputed in backward
    loss    = C*V*(4+2) + V*d*4 + V*d*(2+4) + N*d*2   chunked: one chunk's fp32 logits and bf16 copy,
                                   the fp32 grad_weight accumulator, the per-chunk grad_weight product
                                   (bf16) and its fp32 upcast, bf16 grad_hidden
            = N*V*4*2                                  full: fp32 logits and their gradient
    tensors = states + blocks + root + acts + loss
    total   = tensors * 1.10 + 1.75 GiB  10% for caching-allocator fragmentation; 1.75 GiB for what the
                                         L4 budget adds to reserved memory (2026-12-05-h100/README.md): the
                                         CUDA context 0.82 (measured), NCCL's buffers 0.43 (cited), margin 0.5
    fits    = total <= --gpu-mem-gib

A_blk (bytes per token per block) is the sum of `block_saved_tensors`; A_root of `root_saved_tensors`.

All terms are added because they are alive together at the loss head: the end of forward, with
every block's saved activations still held and no backward yet. With activation checkpointing the
recomputed block lives later, once the loss buffers are freed, so counting it too is conservative
by at most one block's activations. The sharded fp32 gradients do not exist yet at that moment
(zero_grad sets them to None), which is conservative by 4 * P / W. The `full` loss can briefly hold
a third fp32 logits-sized buffer in backward (log_softmax's gradient before its input's), and a
bf16 one: more than the formula's two, so `full` rows err low.

Default GPU: NVIDIA L4 (g6.12xlarge), sold as 24 GB; EC2's DescribeInstanceTypes lists 22888 MiB
(22.35 GiB) per L4, which is the default of --gpu-mem-gib. The CUDA context and NCCL buffers are
counted in the 1.75 GiB allowance above, not subtracted from --gpu-mem-gib.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from workloads.throughput_model import CONTEXT_GIB, MARGIN_GIB, NCCL_GIB  # noqa: E402

GIB = 1024**3
BF16, FP32 = 2, 4
# Bytes per parameter of the sharded training state: fp32 master, fp32 grad, AdamW's two fp32 moments.
STATE_BYTES_PER_PARAM = FP32 + FP32 + 2 * FP32
# Blocks gathered at once with reshard_after_forward: the last block (kept gathered by apply_fsdp
# because backward needs it at once) and the one FSDP2 prefetches.
BLOCKS_IN_FLIGHT = 2
WORKSPACE_BYTES = int((CONTEXT_GIB + NCCL_GIB + MARGIN_GIB) * GIB)  # what the L4 budget adds to reserved memory
FRAGMENTATION = 0.10
DEFAULT_GPU_MEM_GIB = 22888 / 1024  # NVIDIA L4 as EC2 lists it for g6.12xlarge: 22888 MiB
DEFAULT_WORLD_SIZE = 8  # 2 x g6.12xlarge = 8 x L4
MICRO_BATCHES = (1, 2, 4, 8)


@dataclass(frozen=True)
class ModelShape:
    """The shapes of a Qwen2 decoder-only model that memory depends on."""

    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool = True

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Setting:
    """One configuration of the job whose per-GPU memory is estimated."""

    micro_batch: int
    seq_len: int = 2048
    world_size: int = DEFAULT_WORLD_SIZE
    reshard_after_forward: bool = True
    activation_checkpointing: bool = False
    loss: str = "chunked"
    loss_chunk_size: int = 4096

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq_len


@dataclass(frozen=True)
class Estimate:
    """Per-GPU bytes of each term, the total and whether it fits in `gpu_mem_bytes`."""

    setting: Setting
    states: int
    blocks: int
    root: int
    activations: int
    loss: int
    tensors: int
    total: int
    gpu_mem_bytes: int

    @property
    def fits(self) -> bool:
        return self.total <= self.gpu_mem_bytes


def shape_from_config(config) -> ModelShape:
    """ModelShape of a transformers Qwen2Config (or any object with its attribute names)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return ModelShape(
        vocab=config.vocab_size,
        hidden=config.hidden_size,
        intermediate=config.intermediate_size,
        layers=config.num_hidden_layers,
        heads=config.num_attention_heads,
        kv_heads=config.num_key_value_heads,
        head_dim=head_dim,
        tied=bool(config.tie_word_embeddings),
    )


def load_shape(preset: str = "qwen2.5-1.5b") -> ModelShape:
    """The shape of a shipped preset, read through the same Qwen2Config the training module builds."""
    from workloads.config import TrainConfig
    from workloads.model import qwen2_config

    return shape_from_config(qwen2_config(TrainConfig(preset=preset)))


# ---- parameters ------------------------------------------------------------------------------
def block_params(s: ModelShape) -> int:
    """Parameters of one Qwen2 decoder block (q/k/v projections carry biases, o_proj does not)."""
    q = s.hidden * s.heads * s.head_dim + s.heads * s.head_dim
    kv = 2 * (s.hidden * s.kv_dim + s.kv_dim)
    o = s.heads * s.head_dim * s.hidden
    mlp = 3 * s.hidden * s.intermediate  # gate, up, down; no biases
    norms = 2 * s.hidden
    return q + kv + o + mlp + norms


def root_params(s: ModelShape) -> int:
    """Parameters outside the blocks: embedding (= lm_head when tied) and the final norm."""
    return s.vocab * s.hidden * (1 if s.tied else 2) + s.hidden


def total_params(s: ModelShape) -> int:
    """All parameters, a tied embedding counted once."""
    return s.layers * block_params(s) + root_params(s)


# ---- terms -----------------------------------------------------------------------------------
def sharded_state_bytes(n_params: int, world_size: int) -> int:
    """fp32 master params + fp32 grads + AdamW's two fp32 moments, each sharded over the world."""
    return STATE_BYTES_PER_PARAM * n_params // world_size


def gathered_block_bytes(s: ModelShape, reshard_after_forward: bool) -> int:
    """bf16 unsharded block parameters held at the loss head."""
    k = min(BLOCKS_IN_FLIGHT, s.layers) if reshard_after_forward else s.layers
    return BF16 * block_params(s) * k


def root_gathered_bytes(s: ModelShape) -> int:
    """The root's bf16 unsharded parameters: the loss head reads lm_head inside the root's forward."""
    return BF16 * root_params(s)


def block_saved_tensors(s: ModelShape) -> list[tuple[str, int]]:
    """Tensors one decoder block saves for backward, as (what, bytes per token), without checkpointing.

    Traced from transformers' Qwen2DecoderLayer in bf16 with SDPA flash attention and no attention
    mask (causal): residual adds, views, transposes and RoPE's products with the (grad-free) cos/sin
    save nothing large.
    """
    d, i, qd, kvd = s.hidden, s.intermediate, s.heads * s.head_dim, s.kv_dim
    return [
        # Qwen2RMSNorm upcasts its input; pow and the multiply by rsqrt both save that fp32 copy.
        ("input_layernorm: fp32 copy of the block input", FP32 * d),
        ("input_layernorm: rsqrt of the variance (fp32, one per token)", FP32),
        # `weight * x.to(bf16)` saves the normalised bf16 x for weight's gradient.
        ("input_layernorm: normalised input before the weight (bf16)", BF16 * d),
        # The norm's output, shared input of q_proj, k_proj and v_proj (one tensor, saved once).
        ("q/k/v_proj input: input_layernorm output (bf16)", BF16 * d),
        # SDPA saves its q, k, v after RoPE. K/V keep 2 heads: transformers passes enable_gqa=True
        # when there is no mask, so repeat_kv does not expand them to 12 heads.
        ("sdpa: query after RoPE (bf16)", BF16 * qd),
        ("sdpa: key after RoPE (bf16, KV heads only)", BF16 * kvd),
        ("sdpa: value (bf16, KV heads only)", BF16 * kvd),
        # The flash kernel saves its output; reshape(...).contiguous() of it is a no-op, so o_proj's
        # saved input is the same tensor and is not counted twice.
        ("sdpa: attention output = o_proj input (bf16)", BF16 * qd),
        ("sdpa: logsumexp per head (fp32)", FP32 * s.heads),
        ("post_attention_layernorm: fp32 copy of its input", FP32 * d),
        ("post_attention_layernorm: rsqrt of the variance (fp32)", FP32),
        ("post_attention_layernorm: normalised input before the weight (bf16)", BF16 * d),
        ("gate/up_proj input: post_attention_layernorm output (bf16)", BF16 * d),
        ("silu input: gate_proj output (bf16)", BF16 * i),
        ("mul input: silu output (bf16)", BF16 * i),
        ("mul input: up_proj output (bf16)", BF16 * i),
        ("down_proj input: silu(gate) * up (bf16)", BF16 * i),
    ]


def root_saved_tensors(s: ModelShape) -> list[tuple[str, int]]:
    """Tensors outside the blocks alive at the loss head, as (what, bytes per token)."""
    d = s.hidden
    return [
        ("final norm: fp32 copy of the last block's output", FP32 * d),
        ("final norm: rsqrt of the variance (fp32)", FP32),
        ("final norm: normalised input before the weight (bf16)", BF16 * d),
        ("final norm output = last_hidden_state (bf16)", BF16 * d),
        # hidden[:, :-1].reshape(-1, d) in CausalLM.forward copies (the slice is not contiguous).
        ("loss input: contiguous copy of the shifted hidden states (bf16)", BF16 * d),
    ]


def block_activation_bytes_per_token(s: ModelShape) -> int:
    return sum(b for _, b in block_saved_tensors(s))


def activation_bytes(s: ModelShape, tokens: int, activation_checkpointing: bool) -> int:
    """Activations held at the loss head for `tokens` tokens (micro-batch x sequence length)."""
    per_block = block_activation_bytes_per_token(s)
    root = sum(b for _, b in root_saved_tensors(s))
    if activation_checkpointing:
        # checkpoint_wrapper keeps each block's bf16 input; one block is live again in backward.
        return tokens * (s.layers * BF16 * s.hidden + per_block + root)
    return tokens * (s.layers * per_block + root)


def full_loss_bytes(s: ModelShape, tokens: int) -> int:
    """`full` loss: every token's fp32 logits and their fp32 gradient."""
    return tokens * s.vocab * FP32 * 2


def chunked_loss_bytes(s: ModelShape, tokens: int, chunk_size: int) -> int:
    """`chunked` loss at its peak inside one chunk (see workloads.loss._ChunkedLinearCrossEntropy)."""
    chunk = min(chunk_size, tokens)
    logits = chunk * s.vocab * (FP32 + BF16)  # fp32 logits turned probs, and their bf16 copy g
    grad_w = s.vocab * s.hidden * FP32  # the accumulator, saved for backward
    grad_w_update = s.vocab * s.hidden * (BF16 + FP32)  # (g.t() @ h) in bf16, then .float()
    grad_h = tokens * s.hidden * BF16
    return logits + grad_w + grad_w_update + grad_h


def loss_bytes(s: ModelShape, tokens: int, loss: str, chunk_size: int) -> int:
    if loss == "chunked":
        return chunked_loss_bytes(s, tokens, chunk_size)
    if loss == "full":
        return full_loss_bytes(s, tokens)
    raise ValueError(f"loss {loss!r} is unknown: choose chunked or full")


def with_overheads(tensor_bytes: int) -> int:
    """Add allocator fragmentation (a fraction of the tensors) and the fixed CUDA/NCCL workspace."""
    return int(tensor_bytes * (1 + FRAGMENTATION)) + WORKSPACE_BYTES


def estimate(s: ModelShape, setting: Setting, gpu_mem_gib: float = DEFAULT_GPU_MEM_GIB) -> Estimate:
    """Per-GPU peak memory of `setting`, term by term (see the module docstring for the formula)."""
    states = sharded_state_bytes(total_params(s), setting.world_size)
    blocks = gathered_block_bytes(s, setting.reshard_after_forward)
    root = root_gathered_bytes(s)
    acts = activation_bytes(s, setting.tokens, setting.activation_checkpointing)
    loss = loss_bytes(s, setting.tokens, setting.loss, setting.loss_chunk_size)
    tensors = states + blocks + root + acts + loss
    return Estimate(
        setting=setting,
        states=states,
        blocks=blocks,
        root=root,
        activations=acts,
        loss=loss,
        tensors=tensors,
        total=with_overheads(tensors),
        gpu_mem_bytes=int(gpu_mem_gib * GIB),
    )


def grid(s: ModelShape, base: Setting, gpu_mem_gib: float, micro_batches=MICRO_BATCHES) -> list[Estimate]:
    """Every micro-batch x reshard x activation checkpointing x loss, other fields from `base`."""
    return [
        estimate(
            s,
            dataclasses.replace(base, micro_batch=b, reshard_after_forward=r, activation_checkpointing=ac, loss=loss),
            gpu_mem_gib,
        )
        for b in micro_batches
        for r in (True, False)
        for ac in (False, True)
        for loss in ("chunked", "full")
    ]


def largest_fitting_micro_batch(s: ModelShape, base: Setting, gpu_mem_gib: float, limit: int = 4096) -> int:
    """The largest micro-batch of `base` that fits, 0 if not even 1 does. Memory grows with it."""
    best = 0
    for b in range(1, limit + 1):
        if not estimate(s, dataclasses.replace(base, micro_batch=b), gpu_mem_gib).fits:
            break
        best = b
    return best


# ---- output ----------------------------------------------------------------------------------
def _gib(n: int) -> str:
    return f"{n / GIB:6.2f}"


def format_table(rows: list[Estimate]) -> str:
    head = (
        f"{'b':>2} {'reshard':>7} {'AC':>3} {'loss':>7} | "
        f"{'states':>6} {'blocks':>6} {'root':>6} {'acts':>6} {'loss':>6} | {'total':>6}  fits"
    )
    lines = [head, "-" * len(head)]
    for e in rows:
        st = e.setting
        lines.append(
            f"{st.micro_batch:>2} {str(st.reshard_after_forward):>7} "
            f"{'on' if st.activation_checkpointing else 'off':>3} "
            f"{st.loss:>7} | {_gib(e.states)} {_gib(e.blocks)} {_gib(e.root)} {_gib(e.activations)} {_gib(e.loss)} | "
            f"{_gib(e.total)}  {'yes' if e.fits else 'NO'}"
        )
    return "\n".join(lines)


def _as_dict(e: Estimate) -> dict:
    d = {k: getattr(e, k) for k in ("states", "blocks", "root", "activations", "loss", "tensors", "total")}
    return {**dataclasses.asdict(e.setting), **{f"{k}_gib": round(v / GIB, 3) for k, v in d.items()}, "fits": e.fits}


def main(argv: list[str] | None = None) -> int:
    from workloads.config import TrainConfig

    defaults = TrainConfig(preset="qwen2.5-1.5b")  # the cluster job's model; the module defaults to tiny
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--world-size",
        type=int,
        default=DEFAULT_WORLD_SIZE,
        help=f"GPUs the states are sharded over (default {DEFAULT_WORLD_SIZE})",
    )
    ap.add_argument(
        "--seq-len", type=int, default=defaults.seq_len, help=f"tokens per sequence (default {defaults.seq_len})"
    )
    ap.add_argument(
        "--gpu-mem-gib",
        type=float,
        default=DEFAULT_GPU_MEM_GIB,
        help=f"memory per GPU (default {DEFAULT_GPU_MEM_GIB:.2f}: an L4)",
    )
    ap.add_argument(
        "--loss-chunk-size",
        type=int,
        default=defaults.loss_chunk_size,
        help=f"tokens per chunk of the chunked loss (default {defaults.loss_chunk_size})",
    )
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(argv)
    for flag, v in (
        ("--world-size", args.world_size),
        ("--seq-len", args.seq_len),
        ("--loss-chunk-size", args.loss_chunk_size),
    ):
        if v <= 0:
            ap.error(f"{flag} must be > 0 (got {v})")
    if args.gpu_mem_gib <= 0:
        ap.error(f"--gpu-mem-gib must be > 0 (got {args.gpu_mem_gib})")

    s = load_shape(defaults.preset)
    base = Setting(
        micro_batch=1,
        seq_len=args.seq_len,
        world_size=args.world_size,
        reshard_after_forward=defaults.reshard_after_forward,
        activation_checkpointing=defaults.activation_checkpointing,
        loss=defaults.loss,
        loss_chunk_size=args.loss_chunk_size,
    )
    rows = grid(s, base, args.gpu_mem_gib)
    best = largest_fitting_micro_batch(s, base, args.gpu_mem_gib)
    n = total_params(s)
    if args.json:
        print(
            json.dumps(
                {
                    "estimate_not_measurement": True,
                    "preset": defaults.preset,
                    "params": n,
                    "block_activation_bytes_per_token": block_activation_bytes_per_token(s),
                    "gpu_mem_gib": args.gpu_mem_gib,
                    "workspace_gib": WORKSPACE_BYTES / GIB,
                    "fragmentation": FRAGMENTATION,
                    "rows": [_as_dict(e) for e in rows],
                    "defaults": {
                        k: getattr(base, k)
                        for k in ("reshard_after_forward", "activation_checkpointing", "loss", "loss_chunk_size")
                    },
                    "largest_fitting_micro_batch": best,
                },
                indent=2,
            )
        )
        return 0
    print(
        f"ESTIMATE (not a measurement) for {defaults.preset}: {n / 1e9:.3f}e9 params, "
        f"{block_activation_bytes_per_token(s)} activation bytes/token/block, world size {args.world_size}, "
        f"seq len {args.seq_len}, loss chunk {args.loss_chunk_size}, GPU {args.gpu_mem_gib:.2f} GiB, "
        f"total = tensors x {1 + FRAGMENTATION:.2f} + {WORKSPACE_BYTES / GIB} GiB. Columns in GiB per GPU."
    )
    print(format_table(rows))
    print(
        f"largest micro-batch that fits with TrainConfig() defaults (loss={base.loss}, loss_chunk_size="
        f"{base.loss_chunk_size}, reshard_after_forward={base.reshard_after_forward}, activation_checkpointing="
        f"{base.activation_checkpointing}): {best if best else 'none (not even 1)'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
