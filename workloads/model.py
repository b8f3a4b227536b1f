"""The model: transformers' Qwen2 with a loss head, sharded with FSDP2 in bf16.

FLOPs per token (for MFU), stated once here:
    6 * N + 12 * L * d * T
N is the parameter count with the tied embedding counted once, L the number of layers, d the
hidden size, T the sequence length (the second term is attention's QK^T and AV, forward and
backward). MFU = tokens/s * FLOPs per token / (world size * the GPU's dense bf16 peak).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from workloads import loss as loss_fns
from workloads.config import TrainConfig, TrainConfigError, load_model_config

# Dense bf16 peak per GPU, TFLOP/s, from the vendors' datasheets (no sparsity).
PEAK_BF16_TFLOPS = {"L4": 121.0, "H100": 989.0, "H200": 989.0, "A100": 312.0}


def qwen2_config(cfg: TrainConfig):
    from transformers import Qwen2Config

    d = load_model_config(cfg.preset)
    config = Qwen2Config(**d)
    config.use_cache = False  # a KV cache is for generation; it only costs memory (and recompiles) in training
    return config


class CausalLM(nn.Module):
    """A Qwen2ForCausalLM whose forward returns the next-token loss.

    Wrapping keeps the loss inside the FSDP root's forward, so the output weight is unsharded when
    the loss head reads it.
    """

    def __init__(
        self,
        lm: nn.Module,
        loss: str = "chunked",
        loss_chunk_size: int = 8192,
        float8_all_gather: bool = False,
        float8_layers: int = 0,
    ):
        super().__init__()
        self.lm = lm
        self.loss = loss
        self.loss_chunk_size = loss_chunk_size
        self.float8_all_gather = float8_all_gather
        self.float8_layers = float8_layers  # linear layers converted by `--float8` (0: none)

    def after_optimizer_step(self) -> None:
        """What the weights need once the optimizer has changed them: their float8 scales, when FSDP2
        all-gathers them in float8."""
        if self.float8_all_gather:
            precompute_float8_scales(self)

    @property
    def layers(self) -> nn.ModuleList:
        return self.lm.model.layers

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        hidden = self.lm.model(input_ids=input_ids, use_cache=False).last_hidden_state
        h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
        y = labels[:, 1:].reshape(-1)
        weight = self.lm.lm_head.weight
        if self.loss == "chunked":
            return loss_fns.chunked_cross_entropy(h, weight, y, self.loss_chunk_size)
        return loss_fns.full_cross_entropy(h, weight, y)


def build_model(cfg: TrainConfig, device: torch.device) -> CausalLM:
    """Random init from the shipped preset (seeded: every rank builds the same weights), or
    `from_pretrained` when cfg.pretrained is set (a local directory loads offline)."""
    from transformers import Qwen2ForCausalLM

    if cfg.pretrained:
        local = Path(cfg.pretrained).expanduser().is_dir()
        lm = Qwen2ForCausalLM.from_pretrained(
            cfg.pretrained, dtype=torch.float32, attn_implementation="sdpa", local_files_only=local
        )
        lm.config.use_cache = False
        lm.to(device)
    else:
        torch.manual_seed(cfg.seed)
        with torch.device(device):
            lm = Qwen2ForCausalLM._from_config(qwen2_config(cfg), attn_implementation="sdpa", dtype=torch.float32)
    float8_all_gather, float8_layers = False, 0
    if cfg.float8 != "off":
        check_float8_device(cfg, torch.device(device))
        float8_layers = convert_float8(lm, cfg.float8, fsdp=not cfg.unsharded)
        float8_all_gather = cfg.float8 == "tensorwise" and not cfg.unsharded
    return CausalLM(lm, cfg.loss, cfg.loss_chunk_size, float8_all_gather, float8_layers)


# Float8 matmuls need float8 tensor cores: compute capability 8.9 (Ada: L4) or higher (Hopper: H100, H200)
# (torchao/float8/README.md: "requires ... CUDA capability 8.9+").
FLOAT8_MIN_CAPABILITY = (8, 9)


# The one key that runs today's bf16 job instead, as a float8 refusal names it (stack and CLI spellings).
BF16_FIX = "set `float8: off` in the stack's train: block (--float8 off) to train in bf16"


def check_float8_device(cfg: TrainConfig, device: torch.device) -> None:
    """TrainConfigError, one line naming the reason and BF16_FIX, when `--float8` is asked of a device without float8
    tensor cores or torchao does not load: never a silent fall back to bf16."""
    if cfg.float8 == "off":
        return
    if device.type != "cuda":
        raise TrainConfigError(f"--float8 {cfg.float8} needs a GPU and this worker runs on {device.type}: {BF16_FIX}")
    cap = torch.cuda.get_device_capability(device)
    if tuple(cap) < FLOAT8_MIN_CAPABILITY:
        raise TrainConfigError(
            f"--float8 {cfg.float8} needs a GPU of compute capability 8.9 or higher (L4, H100) but "
            f"{torch.cuda.get_device_name(device)} has {cap[0]}.{cap[1]}: {BF16_FIX}"
        )
    try:
        import torchao.float8  # noqa: F401
    except ImportError as e:
        raise TrainConfigError(
            f"--float8 {cfg.float8} needs torchao, which does not load here ({e}): {BF16_FIX}"
        ) from None


def float8_eligible(module: nn.Module, hidden: int) -> bool:
    """A linear layer float8 pays on: the MLP's projections, the only ones wider than the hidden size (Qwen2.5-1.5B:
    1536 <-> 8960), with both sides multiples of 16 (the float8 GEMM's requirement). The attention's
    projections stay bf16: measured on one H100 (2026-12-06, bench/results/2026-12-06-h100/run2-16x2048.jsonl),
    the MLP alone ran 1.0-1.4% faster than every eligible layer, its scaling casts costing less than the
    square 1536 x 1536 GEMMs save."""
    if not isinstance(module, nn.Linear):
        return False
    n, k = module.weight.shape
    return n % 16 == 0 and k % 16 == 0 and max(n, k) > hidden


def convert_float8(lm: nn.Module, recipe: str, fsdp: bool) -> int:
    """Swap the eligible linear layers of the decoder blocks for torchao's Float8Linear (`recipe`:
    tensorwise or rowwise); the embedding, the LM head and the loss stay bf16. Under FSDP2 the tensorwise
    recipe all-gathers the weights in float8 (half the bytes). Returns how many layers were swapped."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    except ImportError as e:
        raise TrainConfigError(
            f"--float8 {recipe} needs torchao, which does not load here ({e}): pip install 'ray-efa-eks[gpu]' "
            f"(pins torchao), or {BF16_FIX}"
        ) from None
    if recipe == "tensorwise":
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=fsdp)
    else:
        config = Float8LinearConfig.from_recipe_name(recipe)
    hidden = lm.config.hidden_size
    swapped = []

    def keep(module: nn.Module, fqn: str) -> bool:
        ok = float8_eligible(module, hidden)
        if ok:
            swapped.append(fqn)
        return ok

    convert_to_float8_training(lm.model.layers, module_filter_fn=keep, config=config)
    return len(swapped)


def precompute_float8_scales(model: nn.Module) -> None:
    """After an optimizer step under FSDP2 with float8 all-gather: every float8 weight's scale in one
    all-reduce, instead of one per weight at each all-gather (torchao's precompute_float8_dynamic_scale_for_fsdp,
    as torchtitan calls it after `optimizer.step()`)."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

    precompute_float8_dynamic_scale_for_fsdp(model)


def mesh_shape(mesh: str, world: int, shard_size: int, ranks_per_node: int) -> tuple[int, ...]:
    """The device-mesh shape of `--mesh`: (world,) for fsdp; (replicas, shard) for hsdp, where the
    shard group is `shard_size` ranks (0: the ranks of one node). Raises TrainConfigError if it does not
    divide the world.

    FSDP2 treats a 2-D mesh as HSDP: parameters are sharded over the last dimension and replicated
    over the first (https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html, `mesh`).
    """
    if mesh == "fsdp":
        return (world,)
    shard = shard_size or ranks_per_node
    if shard <= 0 or world % shard:
        raise TrainConfigError(
            f"--mesh hsdp with --shard-size {shard} does not divide {world} workers: "
            f"pass a --shard-size that divides {world} (e.g. the GPUs of one node)"
        )
    return (world // shard, shard)


def build_mesh(cfg: TrainConfig, device_type: str, world: int, ranks_per_node: int):
    """The DeviceMesh FSDP2 shards over (see `mesh_shape`)."""
    from torch.distributed.device_mesh import init_device_mesh

    shape = mesh_shape(cfg.mesh, world, cfg.shard_size, ranks_per_node)
    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def apply_fsdp(model: CausalLM, cfg: TrainConfig, mesh) -> CausalLM:
    """`fully_shard` each decoder block, then the root: parameters computed in `cfg.param_dtype`
    (bf16 by default; fp32 gives a full-precision reference), gradient reductions in
    `cfg.reduce_dtype` (fp32 by default).

    Optional per block, before sharding: activation checkpointing (`checkpoint_block`, each block's
    policy from `block_policy`) and `torch.compile`. A 1-D mesh
    shards over all its ranks; a 2-D (replicate, shard) mesh is HSDP.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(
        param_dtype=getattr(torch, cfg.param_dtype), reduce_dtype=getattr(torch, cfg.reduce_dtype)
    )
    layers = model.layers
    for i in range(len(layers)):
        block = prepared_block(model, cfg, i, mesh.device_type)
        # The last block's parameters are needed again at once by backward: keep them gathered.
        reshard = cfg.reshard_after_forward and i < len(layers) - 1
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard)
        layers[i] = block
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=cfg.reshard_after_forward)
    return model


def apply_unsharded(model: CausalLM, cfg: TrainConfig, device: torch.device) -> CausalLM:
    """One rank without FSDP2 (`--unsharded`): each block checkpointed and compiled as `apply_fsdp`
    would. The parameters stay fp32 here; `workloads.optim.MasterAdamW` takes them as its master
    copies and casts the model's."""
    layers = model.layers
    for i in range(len(layers)):
        layers[i] = prepared_block(model, cfg, i, device.type)
    return model


def prepared_block(model: CausalLM, cfg: TrainConfig, i: int, device_type: str) -> nn.Module:
    """Decoder block `i` as both paths run it: wrapped for activation checkpointing (its `block_policy`)
    when asked, and compiled on a GPU (inductor's CPU path is slow to build)."""
    block = model.layers[i]
    if cfg.activation_checkpointing:
        block = checkpoint_block(block, block_policy(cfg, i), model.lm.config.hidden_size)
    if cfg.compile and device_type == "cuda":
        block.compile()
    return block


# Ops whose outputs selective checkpointing keeps: their recompute costs FLOPs (matmuls) or a whole
# attention kernel. These are the ops autograd dispatches to in eager and compiled blocks alike (a
# linear with bias is addmm). Backward's recompute stops at the last tensor backward needs, so an
# output nothing in backward reads (the MLP's down projection, feeding only the residual) is never
# recomputed: keeping it would cost memory for nothing.
_MATMULS = ("mm", "addmm")
# Float8Linear's GEMM (torchao): a matmul to keep like the others; its operands are the first two arguments.
_SCALED_MATMULS = ("_scaled_mm",)
_ATTENTION = (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
)


def _ops(names: tuple[str, ...]) -> frozenset:
    return frozenset(getattr(torch.ops.aten, n).default for n in names if hasattr(torch.ops.aten, n))


def _keeps(policy: str, hidden: int):
    """The op-level policy of `ac_policy`: "ops" saves every matmul's output and attention's;
    "attention" saves attention's and those of the matmuls no wider than the hidden size on either
    side (Q, K, V and the output projection), so the MLP's wide matmuls are recomputed."""
    from torch.utils.checkpoint import CheckpointPolicy

    matmuls, scaled, attention = _ops(_MATMULS), _ops(_SCALED_MATMULS), _ops(_ATTENTION)

    def decide(ctx, op, *args, **kwargs):
        keep = op in attention
        if op in matmuls or op in scaled:
            a, b = args[:2] if op in scaled else args[-2:]
            keep = policy == "ops" or (a.shape[-1] <= hidden and b.shape[-1] <= hidden)
        return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

    return decide


def block_policy(cfg: TrainConfig, i: int) -> str:
    """The checkpointing policy of decoder block `i`: `ac_policy` for the first `ac_blocks` blocks (all when
    0), `ac_rest_policy` after them."""
    return cfg.ac_policy if not cfg.ac_blocks or i < cfg.ac_blocks else cfg.ac_rest_policy


def checkpoint_block(block: nn.Module, policy: str, hidden: int) -> nn.Module:
    """`block` wrapped for activation checkpointing (non-reentrant). "full" keeps only the block's input
    and recomputes its forward in backward; "ops" and "attention" are selective: the outputs of the
    ops `_keeps` names are saved in forward and reused, the rest recomputed
    (torch.utils.checkpoint.create_selective_checkpoint_contexts, as torchtitan's op-level SAC)."""
    from functools import partial

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    if policy == "none":
        return block
    if policy == "full":
        return checkpoint_wrapper(block)
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    keeps = _keeps(policy, hidden)
    return checkpoint_wrapper(block, context_fn=partial(create_selective_checkpoint_contexts, keeps))


def count_params(model: nn.Module) -> int:
    """Parameters with shared (tied) tensors counted once; full sizes even when sharded."""
    seen, total = set(), 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def flops_per_token(n_params: int, n_layers: int, hidden: int, seq_len: int) -> float:
    return 6.0 * n_params + 12.0 * n_layers * hidden * seq_len


def peak_tflops(device: torch.device) -> float | None:
    """Dense bf16 peak of this GPU, or None on CPU or an unknown GPU (MFU is then not reported)."""
    if device.type != "cuda":
        return None
    # Whole words: "NVIDIA L40S" is not an L4, "NVIDIA H100 80GB HBM3" is an H100.
    words = torch.cuda.get_device_name(device).replace("-", " ").split()
    for key, tflops in PEAK_BF16_TFLOPS.items():
        if key in words:
            return tflops
    return None
