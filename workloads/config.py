"""Typed configuration of one training run, and the checks made before any worker starts.

The same `TrainConfig` travels as a plain dict into every worker (Ray pickles it, torchrun
re-parses the command line), so `train_loop_per_worker(config)` can rebuild it on its first line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CONFIG_DIR = Path(__file__).parent / "configs"
PRESETS = ("tiny", "qwen2.5-1.5b")
TASKS = ("random", "learnable")
LAUNCHERS = ("ray", "torchrun")
LOSSES = ("chunked", "full")
REDUCE_DTYPES = ("float32", "bfloat16")
PARAM_DTYPES = ("bfloat16", "float32")
MESHES = ("fsdp", "hsdp")

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


class ConfigError(ValueError):
    """Bad input, with a message that names the flag, the value and the fix."""


def new_run_id() -> str:
    """A sortable, unique id: UTC time plus 6 random hex digits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


@dataclass(frozen=True)
class TrainConfig:
    """Everything one run needs. Field names are the CLI flags with `_` for `-`."""

    preset: str = "qwen2.5-1.5b"
    pretrained: str | None = None
    launcher: str = "ray"
    num_workers: int = 1
    use_gpu: bool = False
    gpus_per_worker: float = 1.0
    cpus_per_worker: float = 1.0
    steps: int = 20
    batch_size: int = 8  # global: sequences per optimizer step, over all workers
    micro_batch_size: int = 0  # per worker per forward; 0 means batch_size / num_workers
    seq_len: int = 2048
    lr: float = 3e-4
    weight_decay: float = 0.1
    warmup_steps: int = 0
    grad_clip: float = 1.0
    seed: int = 0
    task: str = "random"
    data: str | None = None
    tokenizer: str | None = None
    run_id: str = ""
    run_dir: str = ""
    nccl_log_dir: str = ""
    storage_path: str = ""
    name: str = ""
    checkpoint_every: int = 0
    max_failures: int = 0
    summary_json: str | None = None
    log_every: int = 1
    activation_checkpointing: bool = False
    compile: bool = True  # GPU only
    loss: str = "chunked"
    loss_chunk_size: int = 8192
    reshard_after_forward: bool = False
    reduce_dtype: str = "float32"  # FSDP2 gradient reduce-scatter dtype
    param_dtype: str = "bfloat16"  # FSDP2 compute dtype; float32 is a full-precision reference
    mesh: str = "fsdp"  # fsdp: shard over all ranks; hsdp: shard inside a node, replicate across nodes
    shard_size: int = 0  # hsdp: ranks per shard group; 0 means the ranks of one node
    fail_at_step: int = 0  # fault injection: one worker dies once, at this step

    # ---- derived -------------------------------------------------------------------------
    @property
    def micro_batch(self) -> int:
        return self.micro_batch_size or self.batch_size // max(self.num_workers, 1)

    @property
    def grad_accum(self) -> int:
        return self.batch_size // (self.num_workers * self.micro_batch)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown training option(s) {unknown}: known ones are {sorted(known)}")
        return cls(**d)

    def resolved(self) -> TrainConfig:
        """Fill the run id and the directories that default from it."""
        run_id = self.run_id or new_run_id()
        # Absolute: Ray Train workers run in a directory of their own, not the launcher's.
        run_dir = str(Path(self.run_dir or Path("runs") / run_id).expanduser().absolute())
        return dataclasses.replace(
            self,
            run_id=run_id,
            run_dir=run_dir,
            nccl_log_dir=str(Path(self.nccl_log_dir).absolute()) if self.nccl_log_dir else str(Path(run_dir) / "nccl"),
            storage_path=self.storage_path or str(Path(run_dir) / "ray_results"),
            name=self.name or run_id,
        )


def load_model_config(preset: str) -> dict:
    """The transformers Qwen2 config dict of a shipped preset."""
    if preset not in PRESETS:
        raise ConfigError(f"--preset {preset!r} is unknown: choose one of {', '.join(PRESETS)}")
    d = json.loads((CONFIG_DIR / f"{preset}.json").read_text())
    d.pop("_comment", None)
    return d


def validate(cfg: TrainConfig) -> None:
    """Raise ConfigError for the first bad input. Touches the filesystem, never the network."""

    def need(ok: bool, msg: str) -> None:
        if not ok:
            raise ConfigError(msg)

    load_model_config(cfg.preset)
    need(cfg.launcher in LAUNCHERS, f"--launcher {cfg.launcher!r} is unknown: choose ray or torchrun")
    need(cfg.task in TASKS, f"--task {cfg.task!r} is unknown: choose one of {', '.join(TASKS)}")
    need(cfg.loss in LOSSES, f"--loss {cfg.loss!r} is unknown: choose one of {', '.join(LOSSES)}")
    need(
        cfg.reduce_dtype in REDUCE_DTYPES,
        f"--reduce-dtype {cfg.reduce_dtype!r} is unknown: choose one of {', '.join(REDUCE_DTYPES)}",
    )
    need(
        cfg.param_dtype in PARAM_DTYPES,
        f"--param-dtype {cfg.param_dtype!r} is unknown: choose one of {', '.join(PARAM_DTYPES)}",
    )
    need(cfg.mesh in MESHES, f"--mesh {cfg.mesh!r} is unknown: choose one of {', '.join(MESHES)}")
    need(cfg.shard_size >= 0, f"--shard-size must be >= 0 (got {cfg.shard_size}): 0 shards over the ranks of a node")
    need(
        cfg.mesh != "hsdp" or not cfg.shard_size or cfg.num_workers % cfg.shard_size == 0,
        f"--shard-size {cfg.shard_size} does not divide --num-workers {cfg.num_workers}: "
        "pass a divisor (e.g. the GPUs of one node) or 0 for the workers of a node",
    )
    need(cfg.seq_len > 0, f"--seq-len must be > 0 (got {cfg.seq_len}): pass a positive sequence length, e.g. 2048")
    need(cfg.steps > 0, f"--steps must be > 0 (got {cfg.steps})")
    need(cfg.num_workers > 0, f"--num-workers must be > 0 (got {cfg.num_workers})")
    need(cfg.batch_size > 0, f"--batch-size must be > 0 (got {cfg.batch_size})")
    need(
        cfg.batch_size % cfg.num_workers == 0,
        f"--batch-size {cfg.batch_size} does not divide over --num-workers {cfg.num_workers}: "
        f"use a multiple of {cfg.num_workers}, e.g. {cfg.num_workers * max(1, cfg.batch_size // cfg.num_workers)}",
    )
    per_worker = cfg.batch_size // cfg.num_workers
    need(cfg.micro_batch_size >= 0, f"--micro-batch-size must be >= 0 (got {cfg.micro_batch_size})")
    need(
        per_worker % cfg.micro_batch == 0,
        f"--micro-batch-size {cfg.micro_batch} does not divide the per-worker batch {per_worker} "
        f"(--batch-size {cfg.batch_size} / --num-workers {cfg.num_workers}): pick a divisor of {per_worker}",
    )
    need(cfg.lr > 0, f"--lr must be > 0 (got {cfg.lr})")
    need(cfg.checkpoint_every >= 0, f"--checkpoint-every must be >= 0 (got {cfg.checkpoint_every})")
    need(cfg.max_failures >= 0, f"--max-failures must be >= 0 (got {cfg.max_failures})")
    need(cfg.loss_chunk_size > 0, f"--loss-chunk-size must be > 0 (got {cfg.loss_chunk_size})")
    need(cfg.log_every > 0, f"--log-every must be > 0 (got {cfg.log_every})")
    need(cfg.gpus_per_worker > 0, f"--gpus-per-worker must be > 0 (got {cfg.gpus_per_worker})")
    need(cfg.cpus_per_worker > 0, f"--cpus-per-worker must be > 0 (got {cfg.cpus_per_worker})")
    if cfg.run_id:
        need(
            bool(_RUN_ID.match(cfg.run_id)),
            f"--run-id {cfg.run_id!r} is not a valid id: use letters, digits, '.', '_' or '-' (at most 63)",
        )
    if cfg.task != "random" and cfg.data:
        raise ConfigError(f"--task {cfg.task} and --data both set: --data replaces the synthetic task, drop one")
    if cfg.data:
        _check_readable(cfg.data)
    if cfg.pretrained and _looks_local(cfg.pretrained):
        need(
            Path(cfg.pretrained).is_dir(),
            f"--pretrained {cfg.pretrained!r} is not a directory: pass a local model directory or a hub id such as Qwen/Qwen2.5-1.5B",
        )
    if cfg.storage_path and "://" not in cfg.storage_path:
        _check_writable("--storage-path", cfg.storage_path)
    if cfg.summary_json:
        _check_writable("--summary-json", str(Path(cfg.summary_json).absolute().parent))
    if (
        cfg.use_gpu
        and cfg.launcher == "ray"
        and cfg.gpus_per_worker != int(cfg.gpus_per_worker)
        and cfg.gpus_per_worker > 1
    ):
        raise ConfigError(f"--gpus-per-worker {cfg.gpus_per_worker}: use a whole number above 1")


def check_gpu_capacity(cfg: TrainConfig, available_gpus: float) -> None:
    """Refuse more GPU workers than the cluster (or this machine) has GPUs."""
    if not cfg.use_gpu:
        return
    needed = cfg.num_workers * cfg.gpus_per_worker
    if needed > available_gpus:
        raise ConfigError(
            f"--num-workers {cfg.num_workers} x --gpus-per-worker {cfg.gpus_per_worker:g} needs {needed:g} GPUs "
            f"but {available_gpus:g} are available: lower --num-workers to {int(available_gpus // cfg.gpus_per_worker)} "
            "or add GPU nodes"
        )


def _looks_local(ref: str) -> bool:
    return ref.startswith((".", "/", "~")) or os.path.exists(ref)


def _check_readable(path: str) -> None:
    if "://" in path:
        return  # remote data is read by Ray Data on the workers; its errors name the URI
    p = Path(path)
    if not p.exists():
        raise ConfigError(
            f"--data {path!r} does not exist: pass a .txt, .jsonl or .parquet file or a directory of them"
        )
    files = [p] if p.is_file() else [f for f in p.rglob("*") if f.is_file()]
    if not files:
        raise ConfigError(f"--data {path!r} is an empty directory: put .txt, .jsonl or .parquet files in it")
    for f in files:
        if not os.access(f, os.R_OK):
            raise ConfigError(f"--data file {str(f)!r} is not readable: fix its permissions (chmod a+r)")


def _check_writable(flag: str, path: str) -> None:
    p = Path(path).expanduser()
    try:
        p.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=p, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"{flag} {path!r} cannot be written ({e.strerror or e}): pick a writable directory") from None
