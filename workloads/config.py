"""Typed configuration of one training run, and the checks made before any worker starts.

The same `TrainConfig` travels as a plain dict into every worker (Ray pickles it, torchrun
re-parses the command line), so `train_loop_per_worker(config)` can rebuild it on its first line.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import math
import os
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.errors import TrainConfigError
from workloads.uri import parse_location

CONFIG_DIR = Path(__file__).parent / "configs"
PRESETS = ("tiny", "qwen2.5-1.5b")
TASKS = ("random", "learnable")
LAUNCHERS = ("ray", "torchrun")
LOSSES = ("chunked", "full")
REDUCE_DTYPES = ("float32", "bfloat16")
PARAM_DTYPES = ("bfloat16", "float32")
MESHES = ("fsdp", "hsdp")
AC_POLICIES = ("full", "ops", "attention", "none")
FLOAT8_RECIPES = ("off", "tensorwise", "rowwise")
# The torchao a `--float8` job needs, as pip spells it: pyproject.toml's `gpu` extra pins the same (a test holds
# them equal), and the cluster job ships the same version's wheel (automation/job_modules.py `TORCHAO_WHEEL`).
TORCHAO_PIN = "torchao==0.17.0"

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


# Where local runs' directories go when nothing else says: ./runs, relative to where the driver runs, or
# the directory this environment variable names (the test suite points it at a temporary directory, so
# that tests leave nothing in the checkout).
RUNS_DIR = "runs"
RUNS_DIR_ENV = "RAY_EFA_EKS_RUNS_DIR"


def runs_root() -> Path:
    """The directory local runs go under: $RAY_EFA_EKS_RUNS_DIR if set, else ./runs."""
    return Path(os.environ.get(RUNS_DIR_ENV) or RUNS_DIR)


def new_run_id() -> str:
    """A sortable, unique id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def _opt(default, help: str, *, low=None, above=None, choices: tuple[str, ...] | None = None, needs=None):
    """A TrainConfig field: its default, its --help text and its own range or choices.

    ``low`` is the smallest legal value, ``above`` a bound the value must exceed; ``choices`` the
    legal strings; ``needs`` (field, value) the one setting of another field under which a value away
    from the default means anything (value True: any set value, None: unset), else it is refused, never
    dropped. ``validate`` checks them all before anything starts.
    """
    meta = {"help": help, "low": low, "above": above, "choices": choices, "needs": needs}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class TrainConfig:
    """Everything one run needs: the only description of a training job.

    Field names are the CLI flags with ``_`` for ``-`` and the keys of a stack's ``train:`` block;
    each field's metadata carries its --help text and its range, so the parser, the launchers'
    command lines (``to_argv``) and the checks all read the same declaration.
    """

    preset: str = _opt("tiny", "model architecture shipped in workloads/configs", choices=PRESETS)
    pretrained: str | None = _opt(
        None, "load weights with from_pretrained from a hub id or a local directory (offline) instead of random init"
    )
    launcher: str = _opt(
        "ray",
        "ray: start a Ray Train TorchTrainer from this process; "
        "torchrun: this process is one worker of a torchrun launch",
        choices=LAUNCHERS,
    )
    num_workers: int = _opt(1, "Ray Train workers (one process each; under torchrun WORLD_SIZE replaces it)", low=1)
    use_gpu: bool = _opt(False, "train on GPUs with NCCL (default: CPU with gloo)")
    gpus_per_worker: float = _opt(1.0, "GPUs each Ray worker requests", above=0)
    cpus_per_worker: float = _opt(1.0, "CPUs each Ray worker requests", above=0)
    steps: int = _opt(20, "optimizer steps", low=1)
    global_batch_size: int = _opt(8, "sequences per optimizer step, summed over all workers", low=1)
    micro_batch_size: int | None = _opt(
        None,
        "sequences per worker per forward pass; unset: global-batch-size / num-workers (no gradient accumulation); "
        "accumulated micro-batches reduce gradients only on the last one (FSDP2 no-sync)",
        low=1,
    )
    seq_len: int = _opt(2048, "tokens per sequence (at most the preset's max_position_embeddings)", low=1)
    lr: float = _opt(3e-4, "AdamW learning rate", above=0)
    weight_decay: float = _opt(0.1, "AdamW weight decay", low=0)
    warmup_steps: int = _opt(0, "linear learning-rate warm-up steps", low=0)
    grad_clip: float = _opt(1.0, "gradient-norm clip", above=0)
    seed: int = _opt(0, "seed of the initial weights and of synthetic data", low=0)
    task: str = _opt(
        "random",
        "synthetic data when --data is not given (learnable: a next-token permutation a model can learn)",
        choices=TASKS,
        needs=("data", None),
    )
    data: str | None = _opt(
        None,
        "real data: .txt (a document a line), .jsonl (field text) or .parquet (column text): a file, a directory or "
        "an s3://bucket/prefix/",
    )
    tokenizer: str | None = _opt(
        None,
        "tokenizer for --data: 'bytes' (built in), a local directory or a hub id "
        "(unset: --pretrained, or bytes for tiny, else Qwen/Qwen2.5-1.5B)",
        needs=("data", True),
    )
    run_id: str = _opt(
        "", "id of this run, naming its directory (empty: TORCHELASTIC_RUN_ID under torchrun, else UTC time + hex)"
    )
    run_dir: str = _opt("", "this run's directory (empty: runs/<run-id>)")
    nccl_log_dir: str = _opt("", "where each worker writes its NCCL debug log (empty: <run-dir>/nccl)")
    storage_path: str = _opt(
        "", "Ray Train storage: a local directory or s3://bucket/prefix (empty: <run-dir>/ray_results)"
    )
    name: str = _opt("", "Ray Train run name under the storage path (empty: the run id)")
    checkpoint_every: int = _opt(0, "save a sharded checkpoint every K steps (0: off, only a final summary)", low=0)
    max_failures: int = _opt(
        0, "how many worker-group failures Ray Train recovers from (resuming from the latest checkpoint)", low=0
    )
    summary_json: str | None = _opt(None, "write the run summary (throughput, MFU, losses, NCCL log dir) to this file")
    log_every: int = _opt(1, "rank 0 prints a progress line every K steps", low=1)
    activation_checkpointing: bool = _opt(
        False, "recompute each decoder block's activations in backward (saves memory, costs ~1/3 more compute)"
    )
    ac_policy: str = _opt(
        "full",
        "with --activation-checkpointing: full keeps only each checkpointed block's input and recomputes its "
        "forward in backward; ops keeps the outputs of every matmul and of attention and recomputes only the cheap "
        "ops (norms, SiLU, rotary), as torchtitan's op-level policy; attention keeps attention and its projections "
        "and recomputes the MLP (about a fifth of the memory of ops, BENCHMARKS.md); none keeps every activation",
        choices=AC_POLICIES,
        needs=("activation_checkpointing", True),
    )
    ac_blocks: int = _opt(
        0,
        "with --activation-checkpointing: only the first N decoder blocks use --ac-policy, the rest "
        "--ac-rest-policy (0: all blocks use --ac-policy)",
        low=0,
        needs=("activation_checkpointing", True),
    )
    ac_rest_policy: str = _opt(
        "none",
        "with --activation-checkpointing and --ac-blocks N: the policy of the blocks after the first N "
        "(none: they keep all their activations)",
        choices=AC_POLICIES,
        needs=("ac_blocks", True),
    )
    compile: bool = _opt(True, "torch.compile each decoder block (GPU only: CPU runs never compile)")
    unsharded: bool = _opt(
        False,
        "one worker only: no FSDP2 (nothing to shard); the model computes in --param-dtype weights and the "
        "optimizer keeps fp32 master copies (workloads/optim.py), which skips FSDP2's one-rank copies; no "
        "checkpoints",
    )
    float8: str = _opt(
        "off",
        "float8 matmuls (torchao) in the decoder blocks' linear layers no narrower than the hidden size; the LM head "
        "and the loss stay bf16. tensorwise: one scale per tensor, float8 all-gather under FSDP2; rowwise: one scale "
        "per row. Needs --use-gpu on compute capability 8.9 or higher (L4, H100) and torchao (the gpu extra)",
        choices=FLOAT8_RECIPES,
    )
    loss: str = _opt("chunked", "loss head (chunked never materialises the full fp32 logits)", choices=LOSSES)
    loss_chunk_size: int = _opt(8192, "tokens per chunk of the chunked loss", low=1, needs=("loss", "chunked"))
    reshard_after_forward: bool = _opt(
        False, "FSDP2: free gathered block parameters after forward (saves memory, re-gathers in backward)"
    )
    reduce_dtype: str = _opt(
        "float32",
        "FSDP2: dtype of the gradient reduce-scatter and all-reduce (bfloat16 halves the bytes on the network, "
        "float32 sums exactly; 2 x g6.12xlarge: bfloat16, BENCHMARKS.md)",
        choices=REDUCE_DTYPES,
    )
    param_dtype: str = _opt(
        "bfloat16",
        "FSDP2: dtype the blocks compute in (float32 is a slow full-precision reference for numerics)",
        choices=PARAM_DTYPES,
    )
    mesh: str = _opt(
        "fsdp",
        "fsdp: shard parameters, gradients and optimizer state over all workers; hsdp: shard inside a node and "
        "replicate across nodes (only the gradient all-reduce crosses nodes; on one node the same as fsdp). "
        "2 x g6.12xlarge: hsdp, micro-batch 8 x 2048, bfloat16 reduce, activation checkpointing (BENCHMARKS.md)",
        choices=MESHES,
    )
    shard_size: int = _opt(
        0,
        "hsdp: workers per shard group (0: the workers of one node); must divide the number of workers",
        low=0,
        needs=("mesh", "hsdp"),
    )
    fail_at_step: int = _opt(0, "fault drill: the last worker dies once at this step (0: off)", low=0)
    oom_drill_micro_batch: int = _opt(
        0,
        "fault drill: in the first steps, every worker's step with a micro-batch of at least N sequences raises "
        "torch.OutOfMemoryError, as a GPU that runs out of memory would (0: off)",
        low=0,
    )

    # ---- derived -------------------------------------------------------------------------
    @property
    def micro_batch(self) -> int:
        """Sequences per worker per forward pass."""
        return self.micro_batch_size or self.global_batch_size // max(self.num_workers, 1)

    @property
    def grad_accum(self) -> int:
        return self.global_batch_size // (self.num_workers * self.micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_len

    @property
    def precision(self) -> str:
        """The precision of the decoder blocks' matmuls, as the summary and the report name it."""
        return f"float8 {self.float8}" if self.float8 != "off" else self.param_dtype

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], label: Callable[[str], str] | None = None) -> TrainConfig:
        """A TrainConfig from field names; unknown names and values of the wrong type are refused.

        ``label`` names a field in errors (default: its CLI flag), e.g. a stack key.
        """
        label = label or flag_of
        _refuse_unknown(d, [f.name for f in dataclasses.fields(cls)], label)
        return cls(**{k: _typed(label(k), field_type(k), v) for k, v in d.items()})

    def to_argv(self) -> list[str]:
        """The command-line flags that rebuild this config: every field that differs from its default."""
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            flag = flag_of(f.name)
            if isinstance(value, bool):
                argv.append(flag if value else "--no-" + flag[2:])
            else:
                argv += [flag, repr(value) if isinstance(value, float) else str(value)]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str]) -> TrainConfig:
        """Parse the command line built by ``to_argv`` (or typed by a user); no defaults are resolved."""
        return cls(**vars(build_parser().parse_args(argv)))

    def resolved(self) -> TrainConfig:
        """Fill the run id and the directories that default from it."""
        run_id = self.run_id or new_run_id()
        # Absolute: Ray Train workers run in a directory of their own, not the launcher's.
        run_dir = str(Path(self.run_dir or runs_root() / run_id).expanduser().absolute())
        return dataclasses.replace(
            self,
            run_id=run_id,
            run_dir=run_dir,
            nccl_log_dir=str(Path(self.nccl_log_dir).absolute()) if self.nccl_log_dir else str(Path(run_dir) / "nccl"),
            storage_path=self.storage_path or str(Path(run_dir) / "ray_results"),
            name=self.name or run_id,
        )


# Fields the driver sets for every run (from the run id it chooses): a job block may not set them.
DRIVER_FIELDS = ("launcher", "run_id", "run_dir", "nccl_log_dir", "summary_json", "name")
# The fields a job block (a stack's train: block) may set.
BLOCK_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig) if f.name not in DRIVER_FIELDS)


def check_block_keys(block: Mapping[str, Any], label: Callable[[str], str], owner: str) -> None:
    """TrainConfigError for a key of a job block (``owner``, e.g. a stack's train:) that the driver sets or
    TrainConfig lacks; the values are judged when the block becomes a TrainConfig."""
    owned = sorted(set(block) & set(DRIVER_FIELDS))
    if owned:
        raise TrainConfigError(f"{label(owned[0])} is set by the driver for every run: remove it from {owner}")
    _refuse_unknown(block, BLOCK_FIELDS, label)


def _refuse_unknown(d: Mapping[str, Any], known: list[str] | tuple[str, ...], label: Callable[[str], str]) -> None:
    for key in d:
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"known ones are {', '.join(known)}"
            raise TrainConfigError(f"unknown training option {label(str(key))} ({key!r}): {hint}")


def flag_of(name: str) -> str:
    """The CLI flag of a TrainConfig field."""
    return "--" + name.replace("_", "-")


_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def field_type(name: str) -> type:
    """The value type of a TrainConfig field (``int`` for ``int | None``)."""
    annotation = {f.name: f.type for f in dataclasses.fields(TrainConfig)}[name]
    return _TYPES[str(annotation).split(" | ")[0]]


_KIND_NAMES = {int: "a whole number", float: "a number", str: "a string", bool: "true or false"}


def _typed(label: str, kind: type, value: Any) -> Any:
    """``value`` as ``kind`` (an int is a legal float); TrainConfigError naming ``label`` otherwise."""
    if value is None:
        return None  # a field whose default is not None refuses None in validate
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    kind_name = _KIND_NAMES.get(kind, kind.__name__)
    raise TrainConfigError(f"{label} {value!r} is not {kind_name}: set it to {kind_name}")


def build_parser() -> argparse.ArgumentParser:
    """The training CLI: one flag per TrainConfig field, its help and default from the field."""
    p = argparse.ArgumentParser(
        prog="python -m workloads.train",
        description="Train Qwen2.5 (or the tiny preset) with FSDP2 in bf16, under Ray Train or torchrun.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for f in dataclasses.fields(TrainConfig):
        meta = f.metadata
        shown = "unset" if f.default is None else repr(f.default) if f.default == "" else str(f.default)
        extra = f" (one of {', '.join(meta['choices'])})" if meta["choices"] else ""
        help_text = f"{meta['help']}{extra} [default: {shown}]"
        if field_type(f.name) is bool:
            p.add_argument(flag_of(f.name), action=argparse.BooleanOptionalAction, default=f.default, help=help_text)
        else:
            p.add_argument(flag_of(f.name), type=_parse_as(field_type(f.name)), default=f.default, help=help_text)
    return p


def _parse_as(kind: type) -> Callable[[str], Any]:
    """An argparse type whose error says what the flag needs (argparse's own names only the type)."""

    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            name = _KIND_NAMES.get(kind, kind.__name__)
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {name}: pass {name} (--help shows the default)"
            ) from None

    parse.__name__ = kind.__name__
    return parse


EXIT_CODES = """exit status:
  0  trained
  1  training failed (a worker raised, Ray Train gave up)
  2  bad input: refused before Ray or torchrun starts, one line naming the flag, the value and the fix"""


def load_model_config(preset: str) -> dict:
    """The transformers Qwen2 config dict of a shipped preset."""
    if preset not in PRESETS:
        raise TrainConfigError(f"--preset {preset!r} is unknown: choose one of {', '.join(PRESETS)}")
    d = json.loads((CONFIG_DIR / f"{preset}.json").read_text())
    d.pop("_comment", None)
    return d


def check_fields(cfg: TrainConfig, label: Callable[[str], str] = flag_of) -> None:
    """Each field against its own declaration: type, range, choices. TrainConfigError names the first bad one."""
    for f in dataclasses.fields(cfg):
        value, meta, name = getattr(cfg, f.name), f.metadata, label(f.name)
        if value is None:
            if f.default is not None:
                raise TrainConfigError(f"{name} is unset but has no 'unset' meaning: set it (default {f.default!r})")
            continue
        _typed(name, field_type(f.name), value)
        if isinstance(value, float) and not math.isfinite(value):
            raise TrainConfigError(f"{name} {value!r} is not a finite number: set a number such as {f.default!r}")
        if meta["choices"] and value not in meta["choices"]:
            raise TrainConfigError(f"{name} {value!r} is unknown: choose one of {', '.join(meta['choices'])}")
        if meta["low"] is not None and value < meta["low"]:
            raise TrainConfigError(f"{name} {value!r} is below {meta['low']}: set it to {meta['low']} or more")
        if meta["above"] is not None and value <= meta["above"]:
            raise TrainConfigError(f"{name} {value!r} must be above {meta['above']}: set a positive value")


def validate(cfg: TrainConfig, label: Callable[[str], str] = flag_of, local_paths: bool = True) -> None:
    """Raise TrainConfigError for the first bad input. Touches the filesystem, never the network or Ray.

    ``label`` names a field in the messages (default: its CLI flag; the driver passes stack keys).
    ``local_paths=False`` skips the checks of data and output paths on this machine, for a job
    that runs elsewhere (a cluster's pods) or creates its own run directory.
    """
    check_fields(cfg, label)
    _check_needs(cfg, label)
    check_locations(cfg, label)
    _check_batch(cfg, label)
    _check_seq_len(cfg, label)
    _check_mesh(cfg, label)
    _check_ac(cfg, label)
    _check_unsharded(cfg, label)
    _check_float8(cfg, label)
    if local_paths:
        _check_paths(cfg, label)
    elif cfg.run_id and not _RUN_ID.match(cfg.run_id):
        raise TrainConfigError(
            f"{label('run_id')} {cfg.run_id!r} is not a valid id: use letters, digits, '.', '_' or '-'"
        )
    if cfg.use_gpu and cfg.launcher == "ray" and cfg.gpus_per_worker > 1 and cfg.gpus_per_worker % 1:
        raise TrainConfigError(
            f"{label('gpus_per_worker')} {cfg.gpus_per_worker:g}: a worker above one GPU takes whole GPUs; "
            f"set {int(cfg.gpus_per_worker)} or {int(cfg.gpus_per_worker) + 1}"
        )


def _check_batch(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    gbs, workers = label("global_batch_size"), label("num_workers")
    per_worker = cfg.global_batch_size // cfg.num_workers
    if cfg.global_batch_size % cfg.num_workers:
        raise TrainConfigError(
            f"{gbs} {cfg.global_batch_size} does not divide over {workers} {cfg.num_workers}: "
            f"use a multiple of {cfg.num_workers}, e.g. {cfg.num_workers * max(1, per_worker)}"
        )
    if per_worker % cfg.micro_batch:
        raise TrainConfigError(
            f"{label('micro_batch_size')} {cfg.micro_batch} does not divide the per-worker batch {per_worker} "
            f"({gbs} {cfg.global_batch_size} / {workers} {cfg.num_workers}): pick a divisor of {per_worker}"
        )


def unmet_needs(cfg: TrainConfig) -> list[str]:
    """The fields set away from their default while the field each ``needs`` gives it no meaning."""
    unmet = []
    for f in dataclasses.fields(cfg):
        if f.metadata["needs"] is not None and getattr(cfg, f.name) != f.default:
            other, wanted = f.metadata["needs"]
            have = getattr(cfg, other)
            if not (bool(have) if wanted is True else have == wanted):
                unmet.append(f.name)
    return unmet


def _check_needs(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    """A field without meaning under the others' values is refused, never dropped."""
    for name in unmet_needs(cfg)[:1]:
        other, wanted = TrainConfig.__dataclass_fields__[name].metadata["needs"]
        state = {True: "set", None: "unset"}.get(wanted, repr(wanted))
        fix = {True: f"set {label(other)}", None: f"leave {label(other)} unset"}.get(
            wanted, f"set {label(other)} to {wanted!r}"
        )
        raise TrainConfigError(
            f"{label(name)} {getattr(cfg, name)!r} applies only when {label(other)} is {state}: drop {label(name)}, "
            f"or {fix}"
        )


def _check_mesh(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    if cfg.mesh == "hsdp" and cfg.shard_size and cfg.num_workers % cfg.shard_size:
        raise TrainConfigError(
            f"{label('shard_size')} {cfg.shard_size} does not divide {label('num_workers')} {cfg.num_workers}: "
            "pass a divisor (e.g. the GPUs of one node) or 0 for the workers of a node"
        )


def _check_ac(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    # torch.compile compiles one checkpointed block and reuses that graph for every block whose code
    # is the same (torch 2.11: two selective policies in one model both ran as the first block's,
    # same memory as all-ops, bench/results/2026-12-05-h100/sac-sweep2.jsonl), so the blocks of a
    # compiled model may differ only by being checkpointed or not.
    rest, first = cfg.ac_rest_policy, cfg.ac_policy
    if cfg.activation_checkpointing and cfg.compile and cfg.ac_blocks and "none" not in (first, rest) and first != rest:
        raise TrainConfigError(
            f"{label('ac_policy')} {first!r} on the first {cfg.ac_blocks} blocks and {label('ac_rest_policy')} "
            f"{rest!r} after them: compiled blocks would all run one of the two; set {label('ac_rest_policy')} "
            f"none or {first}, or turn off {label('compile')}"
        )


def _check_unsharded(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    if cfg.unsharded and cfg.num_workers != 1:
        raise TrainConfigError(
            f"{label('unsharded')} trains on one worker, not {label('num_workers')} {cfg.num_workers}: "
            f"drop {label('unsharded')} to shard with FSDP2"
        )
    if cfg.unsharded and cfg.checkpoint_every:
        raise TrainConfigError(
            f"{label('unsharded')} keeps its fp32 weights in the optimizer, which the sharded checkpoint "
            f"does not save: drop {label('unsharded')} or set {label('checkpoint_every')} 0"
        )


def _check_float8(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    # torchao's float8 matmuls need float8 tensor cores (compute capability 8.9+); the workers check the GPU's.
    if cfg.float8 != "off" and not cfg.use_gpu:
        raise TrainConfigError(
            f"{label('float8')} {cfg.float8!r} needs {label('use_gpu')}: float8 matmuls run only on GPUs of compute "
            f"capability 8.9 or higher (L4, H100); set {label('float8')} to off to train on CPU"
        )


def _check_seq_len(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    limit = load_model_config(cfg.preset)["max_position_embeddings"]
    if cfg.seq_len > limit:
        raise TrainConfigError(
            f"{label('seq_len')} {cfg.seq_len} exceeds the {limit} positions (max_position_embeddings) of "
            f"preset {cfg.preset!r}: set it to {limit} or less"
        )


# The fields that name a place, and whether s3:// is legal there (the others are written on the machine).
PATH_FIELDS = {"data": True, "storage_path": True, "summary_json": False, "run_dir": False, "nccl_log_dir": False}


def check_locations(cfg: TrainConfig, label: Callable[[str], str] = flag_of) -> None:
    """Every path field in a form this project reads (workloads/uri.py), wherever the job runs."""
    for name, remote in PATH_FIELDS.items():
        value = getattr(cfg, name)
        if value is not None and (value or name == "data"):
            parse_location(label(name), value, remote=remote)


def _check_paths(cfg: TrainConfig, label: Callable[[str], str]) -> None:
    if cfg.run_id and not _RUN_ID.match(cfg.run_id):
        raise TrainConfigError(
            f"{label('run_id')} {cfg.run_id!r} is not a valid id: use letters, digits, '.', '_' or '-' (at most 63)"
        )
    if cfg.data:
        _check_readable(label("data"), cfg.data)
    if cfg.pretrained and _looks_local(cfg.pretrained) and not Path(cfg.pretrained).is_dir():
        raise TrainConfigError(
            f"{label('pretrained')} {cfg.pretrained!r} is not a directory: pass a local model directory "
            "or a hub id such as Qwen/Qwen2.5-1.5B"
        )
    if cfg.storage_path and not parse_location(label("storage_path"), cfg.storage_path).remote:
        _check_writable(label("storage_path"), parse_location(label("storage_path"), cfg.storage_path).path)
    if cfg.summary_json:
        check_output_file(label("summary_json"), parse_location(label("summary_json"), cfg.summary_json).path)


def check_gpu_capacity(
    cfg: TrainConfig, available_gpus: float, where: str = "this machine", workers_flag: str = "--num-workers"
) -> None:
    """Refuse GPU workers beyond the GPUs of the cluster (or of this machine)."""
    if not cfg.use_gpu:
        return
    if available_gpus <= 0:
        raise TrainConfigError(
            f"--use-gpu is set but {where} has no GPU: drop --use-gpu to train on CPU (gloo), or run where GPUs are"
        )
    needed = cfg.num_workers * cfg.gpus_per_worker
    if needed > available_gpus:
        fit = int(available_gpus // cfg.gpus_per_worker)
        fix = f"lower {workers_flag} to {fit}" if fit else f"lower --gpus-per-worker to {available_gpus:g}"
        raise TrainConfigError(
            f"{workers_flag} {cfg.num_workers} x --gpus-per-worker {cfg.gpus_per_worker:g} needs {needed:g} GPUs "
            f"but {where} has {available_gpus:g}: {fix} or add GPUs"
        )


def _looks_local(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or os.path.exists(ref)


def _check_readable(flag: str, path: str) -> None:
    where = parse_location(flag, path)
    if where.remote:
        return  # listed and its heads read by workloads.data.check_data, with a deadline
    p = Path(where.path)
    if not p.exists():
        raise TrainConfigError(
            f"{flag} {path!r} does not exist: pass a .txt, .jsonl or .parquet file or a directory of them"
        )
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    if not files:
        raise TrainConfigError(f"{flag} {path!r} is an empty directory: put .txt, .jsonl or .parquet files in it")
    for f in files:
        if not os.access(f, os.R_OK):
            raise TrainConfigError(f"{flag} file {str(f)!r} is not readable: fix its permissions (chmod a+r)")


def check_output_file(flag: str, path: str) -> None:
    """A file this run writes at its end, checked before it starts: not a folder, in a writable folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise TrainConfigError(f"{flag} {path!r} is a folder: name a file in it, e.g. {str(p / 'summary.json')!r}")
    if p.exists() and not os.access(p, os.W_OK):
        raise TrainConfigError(
            f"{flag} {path!r} exists and cannot be written: fix its permissions or name another file"
        )
    if p.parent.exists() and not p.parent.is_dir():
        raise TrainConfigError(f"{flag} {path!r}: {str(p.parent)!r} is a file, not a folder: name a file in a folder")
    _check_writable(flag, str(p.absolute().parent))


def _check_writable(flag: str, path: str) -> None:
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-test-"):
            pass
    except OSError as e:
        raise TrainConfigError(
            f"{flag} {path!r} cannot be written ({e.strerror or e}): pick a writable directory"
        ) from None
