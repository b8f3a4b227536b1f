"""The training job of a run, as a `workloads.config.TrainConfig`, and where each of its values came from.

One precedence, lowest first, each layer overriding the one before key by key: TrainConfig's own
defaults, the cluster's defaults (``CLUSTER_JOB``, the one place they live; ``LOCAL_JOB`` locally),
the durability defaults (automation/storage.py's ``Durability``: storage path, checkpoint interval,
retries), the stack's ``ray-efa-eks:train`` block (keys are TrainConfig's field names), then the CLI's
flags (``--steps``, ``--num-workers``, ...). Nothing is applied after the user's values: what the
driver must insist on (storage on a cluster is S3) refuses the stack with the key, the value and the
fix instead of replacing the value. ``ResolvedJob`` keeps the job and the layer each field came from,
which `render` and the run's first lines show.

TrainConfig's own checks judge every value, and the rules that need the cluster and the job together
(the GPUs the workers ask for against the GPU nodes) are checked here, before anything is submitted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from infra.config import GpuNodesConfig, RayWorkerConfig, StackConfig, parse_quantity
from infra.names import RUN_ROOT as CLUSTER_ROOT  # mounted in every pod of the RayCluster
from workloads.config import TrainConfig, TrainConfigError, check_block_keys, flag_of, unmet_needs, validate
from workloads.uri import parse_location

STACK_KEY = StackConfig.keyname("train", prefixed=True)

# The cluster's job: Qwen2.5-1.5B on 8 workers x 1 GPU (two g6.12xlarge) in the layout that
# workloads/throughput_model.py chooses (bench/results/2026-12-04-h200/README.md): HSDP 2 x 4
# (shard inside a node, replicate across the two), so only a bf16 gradient all-reduce crosses the
# 40 Gbps NIC (3.09 GB per step, against 8.10 GB for FSDP over 8 with an fp32 reduce);
# 8 x 2048-token micro-batches per worker and no accumulation (8 x 8 = 64 sequences per step);
# selective activation checkpointing that keeps attention and its projections and recomputes the MLP,
# parameters resharded after forward and a loss chunk of 2048 tokens, which pay for what it keeps
# (without checkpointing no micro-batch of 2048 tokens fits an L4). Measured on an H100 at world
# size 8: 17.9 GiB reserved per rank, 3-4% faster than full checkpointing
# (bench/results/2026-12-05-h100/README.md, the L4 memory budget).
# Float8 (tensorwise, the MLP's projections): 1.12-1.15x the bf16 step on one H100 inside the L4 budget
# (docs/float8.md); the L4 has float8 tensor cores (compute capability 8.9) at twice its bf16 rate. torchao
# ships with the job (automation/job_modules.py); `float8: off` in the stack's train: block runs bf16.
# LOCAL_JOB leaves it off: float8 needs a GPU of compute capability 8.9 or higher.
CLUSTER_JOB: Mapping[str, object] = {
    "preset": "qwen2.5-1.5b",
    "num_workers": 8,
    "use_gpu": True,
    "gpus_per_worker": 1.0,
    "steps": 100,
    "global_batch_size": 64,
    "micro_batch_size": 8,
    "seq_len": 2048,
    "activation_checkpointing": True,
    "ac_policy": "attention",
    "reshard_after_forward": True,
    "loss_chunk_size": 2048,
    "mesh": "hsdp",
    "reduce_dtype": "bfloat16",
    "float8": "tensorwise",
}

# The local run: the tiny preset on 2 CPU workers (about a minute on 2 cores), a task the tiny
# model learns in 20 steps so the report shows the loss falling.
LOCAL_JOB: Mapping[str, object] = {
    "preset": "tiny",
    "num_workers": 2,
    "cpus_per_worker": 1.0,
    "steps": 20,
    "global_batch_size": 4,
    "seq_len": 64,
    "task": "learnable",
    "lr": 3e-3,
}

# Cores of each worker pod left to Ray's own processes (raylet, agents, the object store).
RAY_RESERVED_CPUS = 2


def stack_label(name: str) -> str:
    """How an error names a field of the stack's train: block."""
    return f"{STACK_KEY}.{name}"


# Where a value of the job came from: the layers, lowest precedence first (a CLI flag names itself).
TRAIN_DEFAULT = "TrainConfig default"
CLUSTER_DEFAULT = "cluster default"
DURABILITY_DEFAULT = "durability default"
STACK_BLOCK = "stack train: block"
DRIVER = "driver, per run"
# The fields Durability sets: shown with their source even where they equal TrainConfig's defaults.
DURABILITY_FIELDS = ("storage_path", "checkpoint_every", "max_failures")
# The fields of the run's own paths, set by the driver from the run id (with_run_paths).
RUN_PATH_FIELDS = ("launcher", "run_id", "run_dir", "nccl_log_dir", "summary_json")
# The storage path of the cluster job before the stack is up: Durability fills it with the stack's output.
PENDING_RUN_BUCKET = "the stack's run bucket (stack output storage_uri, known once `up` has run)"


@dataclass(frozen=True)
class ResolvedJob:
    """A job and the layer each field's value came from (a field ``sources`` omits is TrainConfig's default);
    ``pending`` describes a value not known yet (the run bucket before `up`), by field."""

    config: TrainConfig
    sources: Mapping[str, str]
    pending: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def source(self, name: str) -> str:
        return self.sources.get(name, TRAIN_DEFAULT)

    def shown(self) -> list[tuple[str, object, str]]:
        """(field, value, source) of every field not at TrainConfig's default, and of the durability fields;
        not the run's own paths (RUN_PATH_FIELDS), which follow from the run id."""
        rows = []
        for f in dataclasses.fields(TrainConfig):
            value = getattr(self.config, f.name)
            if f.name in DURABILITY_FIELDS or (value != f.default and f.name not in RUN_PATH_FIELDS):
                rows.append((f.name, self.pending.get(f.name, value), self.source(f.name)))
        return rows

    def text(self, title: str) -> str:
        """``title``, the shown fields as aligned ``name = value  (source)`` lines, then the precision line."""
        rows = self.shown()
        width = max((len(name) for name, _, _ in rows), default=0)
        lines = [f"{name:<{width}} = {value}  ({source})" for name, value, source in rows]
        head = f"{title}, each value's source (the rest: TrainConfig's defaults, and the run's paths under its id):"
        return "\n  ".join([head, *lines]) + "\n" + self.precision()

    def precision(self) -> str:
        """Which precision the job's matmuls run in, where that came from, and the key that changes it."""
        job, source, key = self.config, self.source("float8"), stack_label("float8")
        if job.float8 == "off":
            return f"precision: {job.precision} (float8 off: {source}); {key}: tensorwise runs MLP matmuls in float8"
        return (
            f"precision: {job.precision} in the MLP's matmuls, {job.param_dtype} elsewhere ({source}): about 1.12x the "
            f"bf16 step on one H100 (docs/float8.md), on float8 tensor cores (compute capability 8.9+, the L4 is 8.9), "
            f"torchao shipped with the job; {key}: off runs bf16"
        )

    def as_dict(self) -> dict[str, dict[str, object]]:
        """The shown fields for --json: ``{field: {"value": ..., "source": ...}}``."""
        return {name: {"value": value, "source": source} for name, value, source in self.shown()}


def check_cluster_storage(block: Mapping[str, object]) -> None:
    """TrainConfigError when the train: block's storage_path is not S3: Ray Train's workers run in pods on
    several nodes and must all reach the storage, and a pod's own disk goes with the pod."""
    if "storage_path" not in block:
        return
    label, value = stack_label("storage_path"), str(block["storage_path"])
    if not parse_location(label, value).remote:
        raise TrainConfigError(
            f"{label} {value!r} is a local path, but the cluster's workers run in pods on several nodes: Ray Train "
            "needs storage every worker reaches, and a pod's disk is lost with the pod; set it to "
            "s3://<bucket>/<prefix> (the pods' role may write the stack's run bucket), or remove it to keep runs "
            "in the stack's run bucket"
        )


def with_run_paths(job: TrainConfig, run_id: str, run_dir: str) -> TrainConfig:
    """``job`` for run ``run_id``: its directory, NCCL logs and summary under ``run_dir``."""
    return dataclasses.replace(
        job,
        launcher="ray",
        run_id=run_id,
        run_dir=run_dir,
        nccl_log_dir=f"{run_dir}/nccl",
        summary_json=f"{run_dir}/summary.json",
    )


def resolve_cluster_job(
    cfg: StackConfig,
    run_id: str,
    durability: Mapping[str, object] | None = None,
    flags: Mapping[str, object] | None = None,
) -> ResolvedJob:
    """The job `train` submits to the stack's cluster, from its layers (the module docstring's order),
    validated against the job's and the cluster's rules; TrainConfigError names the stack key and the fix.

    ``durability`` is automation/storage.py's Durability as a mapping (no storage_path: the run bucket,
    not known yet); ``flags`` the CLI's overrides by field name (None: not given).
    """
    check_block_keys(cfg.train, stack_label, STACK_KEY)
    check_cluster_storage(cfg.train)
    kept = {k: v for k, v in (durability or {}).items() if v is not None}
    layers: list[tuple[str, Mapping[str, object]]] = [
        (CLUSTER_DEFAULT, CLUSTER_JOB),
        (DURABILITY_DEFAULT, kept),
        (STACK_BLOCK, cfg.train),
        *[(flag_of(k), {k: v}) for k, v in (flags or {}).items() if v is not None],  # one a flag given
    ]
    # Merged key by key, a later layer winning; each key's source is the layer it came from.
    values = {k: v for _, layer in layers for k, v in layer.items()}
    sources = {k: name for name, layer in layers for k in layer}
    pending = {}
    if durability is not None and "storage_path" not in values:  # Durability's run bucket, before `up`
        pending["storage_path"] = PENDING_RUN_BUCKET
        sources["storage_path"] = DURABILITY_DEFAULT
    job = TrainConfig.from_dict(values, label=stack_label)
    # A cluster default that the block's own values leave without meaning (ac_policy once the block turns
    # activation checkpointing off) was the cluster's choice, not the user's: TrainConfig's default replaces it.
    for name in (n for n in unmet_needs(job) if sources.get(n) == CLUSTER_DEFAULT):
        job = dataclasses.replace(job, **{name: getattr(TrainConfig(), name)})
        del sources[name]
    if "cpus_per_worker" not in values:  # the pod's CPUs shared by its workers: a cluster default too
        workers_per_pod = max(1, int(cfg.ray.worker.num_gpus // max(job.gpus_per_worker, 1)))
        pod_cpus = parse_quantity(RayWorkerConfig.keyname("cpu"), cfg.ray.worker.cpu)
        job = dataclasses.replace(
            job, cpus_per_worker=float(max(1, math.floor((pod_cpus - RAY_RESERVED_CPUS) / workers_per_pod)))
        )
        sources["cpus_per_worker"] = CLUSTER_DEFAULT
    job = with_run_paths(job, run_id, f"{CLUSTER_ROOT}/runs/{run_id}")
    sources.update(dict.fromkeys(RUN_PATH_FIELDS, DRIVER))
    # The cluster's rules first: a CPU job hears "the workers are GPU pods", not what else needs a GPU (float8).
    check_fits_cluster(job, cfg.gpu_nodes.node_count, cfg.gpu_nodes.gpus_per_node)
    validate(job, label=stack_label, local_paths=False)  # the paths are the head pod's, not this machine's
    return ResolvedJob(job, sources, pending)


def cluster_job(cfg: StackConfig, run_id: str, steps: int | None = None, num_workers: int | None = None) -> TrainConfig:
    """The cluster job without durability (the cluster's defaults, the stack's train: block, ``steps`` and
    ``num_workers`` from the CLI), validated; the target's job adds durability (``resolve_cluster_job``)."""
    return resolve_cluster_job(cfg, run_id, flags={"steps": steps, "num_workers": num_workers}).config


def check_fits_cluster(job: TrainConfig, nodes: int, gpus_per_node: int) -> None:
    """TrainConfigError when the workers are not GPU workers or ask for more GPUs than the GPU nodes have."""
    workers, per_worker = stack_label("num_workers"), stack_label("gpus_per_worker")
    if not job.use_gpu:
        raise TrainConfigError(f"{stack_label('use_gpu')} is false: the cluster's workers are GPU pods; set it to true")
    if job.gpus_per_worker > gpus_per_node:
        raise TrainConfigError(
            f"{per_worker} {job.gpus_per_worker:g} exceeds the {gpus_per_node} GPUs of one node: "
            f"set it to at most {gpus_per_node}"
        )
    total, wanted = nodes * gpus_per_node, job.num_workers * job.gpus_per_worker
    if wanted > total:
        raise TrainConfigError(
            f"{workers} {job.num_workers} x {per_worker} {job.gpus_per_worker:g} = {wanted:g} GPUs but the cluster "
            f"has {total} ({nodes} nodes x {gpus_per_node}): set {workers} to at most "
            f"{int(total // job.gpus_per_worker)} or raise {GpuNodesConfig.keyname('node_count')}"
        )


def one_node_note(job: TrainConfig, nodes: int, gpus_per_node: int) -> str | None:
    """A warning when the whole job fits on one of several nodes, so no traffic need cross EFA."""
    total, wanted = nodes * gpus_per_node, job.num_workers * job.gpus_per_worker
    if nodes > 1 and wanted <= gpus_per_node:
        return (
            f"the training job uses {wanted:g} GPU(s), which fit on one node: Ray may place every worker on one node "
            f"and no traffic would cross EFA; set {stack_label('num_workers')} to {int(total // job.gpus_per_worker)}"
        )
    return None


def local_job(
    run_id: str, runs_root: Path, steps: int | None = None, num_workers: int | None = None, use_gpu: bool = False
) -> TrainConfig:
    """The local target's job: LOCAL_JOB with the CLI's overrides, validated."""
    overrides = {k: v for k, v in (("steps", steps), ("num_workers", num_workers)) if v is not None}
    job = TrainConfig.from_dict({**LOCAL_JOB, **overrides, "use_gpu": use_gpu})
    job = with_run_paths(job, run_id, str((runs_root / run_id).absolute()))
    validate(job, local_paths=False)  # the run directory is created by the job itself
    return job


def command(job: TrainConfig) -> list[str]:
    """The arguments after `python` that run ``job``: the training module and the fields that differ."""
    return ["-m", "workloads.train", *job.to_argv()]
