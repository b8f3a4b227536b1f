"""The training job of a run, as a `workloads.config.TrainConfig`, and its command line.

On AWS the job is the cluster's defaults (``CLUSTER_JOB``, the one place they live) overridden
key by key by the stack's ``ray-efa-eks:train`` block, whose keys are TrainConfig's field names;
on the local target it is ``LOCAL_JOB``. Either way TrainConfig's own checks judge every value,
and the rules that need the cluster and the job together (the GPUs the workers ask for against
the GPU nodes) are checked here, before anything is submitted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.config import GpuNodesConfig, RayWorkerConfig, StackConfig, parse_quantity
from infra.names import RUN_ROOT as CLUSTER_ROOT  # mounted in every pod of the RayCluster
from workloads.config import ConfigError, TrainConfig, check_block_keys, validate

STACK_KEY = StackConfig.keyname("train", prefixed=True)

# The cluster's job: Qwen2.5-1.5B on 8 workers x 1 GPU (two g6.12xlarge) in the layout that
# bench/throughput_model.py chooses (BENCHMARKS.md, "The cluster job on 8 x L4"): HSDP 2 x 4
# (shard inside a node, replicate across the two), so only a bf16 gradient all-reduce crosses the
# 40 Gbps NIC (3.09 GB per step, against 8.10 GB for FSDP over 8 with an fp32 reduce);
# 8 x 2048-token micro-batches per worker and no accumulation (8 x 8 = 64 sequences per step);
# selective activation checkpointing that keeps attention and its projections and recomputes the MLP,
# parameters resharded after forward and a loss chunk of 2048 tokens, which pay for what it keeps
# (without checkpointing no micro-batch of 2048 tokens fits an L4). Measured on an H100 at world
# size 8: 17.9 GiB reserved per rank, 3-4% faster than full checkpointing
# (bench/results/2026-12-05-h100/, BENCHMARKS.md's L4 memory budget).
CLUSTER_JOB: Mapping[str, Any] = {
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
}

# The local run: the tiny preset on 2 CPU workers (about a minute on 2 cores), a task the tiny
# model learns in 20 steps so the report shows the loss falling.
LOCAL_JOB: Mapping[str, Any] = {
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


def parse_block(block: Mapping[str, Any], defaults: Mapping[str, Any]) -> TrainConfig:
    """``defaults`` overridden by ``block``; ConfigError for a driver-set or unknown key, or a wrong type."""
    check_block_keys(block, stack_label, STACK_KEY)
    return TrainConfig.from_dict({**defaults, **block}, label=stack_label)


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


def cluster_job(cfg: StackConfig, run_id: str, steps: int | None = None, num_workers: int | None = None) -> TrainConfig:
    """The job `train` submits to the stack's cluster, validated against the job's and the cluster's rules.

    ``steps`` and ``num_workers`` are the CLI's overrides.
    """
    overrides = {k: v for k, v in (("steps", steps), ("num_workers", num_workers)) if v is not None}
    job = parse_block({**cfg.train, **overrides}, CLUSTER_JOB)
    if "cpus_per_worker" not in cfg.train:
        job = dataclasses.replace(job, cpus_per_worker=float(_cpus_per_worker(cfg, job)))
    job = with_run_paths(job, run_id, f"{CLUSTER_ROOT}/runs/{run_id}")
    validate(job, label=stack_label, local_paths=False)  # the paths are the head pod's, not this machine's
    check_fits_cluster(job, cfg.gpu_nodes.node_count, cfg.gpu_nodes.gpus_per_node)
    return job


def _cpus_per_worker(cfg: StackConfig, job: TrainConfig) -> int:
    workers_per_pod = max(1, int(cfg.ray.worker.num_gpus // max(job.gpus_per_worker, 1)))
    pod_cpus = parse_quantity(RayWorkerConfig.keyname("cpu"), cfg.ray.worker.cpu)
    return max(1, math.floor((pod_cpus - RAY_RESERVED_CPUS) / workers_per_pod))


def check_fits_cluster(job: TrainConfig, nodes: int, gpus_per_node: int) -> None:
    """ConfigError when the workers are not GPU workers or ask for more GPUs than the GPU nodes have."""
    workers, per_worker = stack_label("num_workers"), stack_label("gpus_per_worker")
    if not job.use_gpu:
        raise ConfigError(f"{stack_label('use_gpu')} is false: the cluster's workers are GPU pods; set it to true")
    if job.gpus_per_worker > gpus_per_node:
        raise ConfigError(
            f"{per_worker} {job.gpus_per_worker:g} exceeds the {gpus_per_node} GPUs of one node: "
            f"set it to at most {gpus_per_node}"
        )
    total, wanted = nodes * gpus_per_node, job.num_workers * job.gpus_per_worker
    if wanted > total:
        raise ConfigError(
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
