"""Train Qwen2.5 (or the `tiny` preset) with FSDP2 in bf16, under Ray Train or torchrun.

Local CPU (2 Ray workers, gloo; about a minute on 2 cores):
    python -m workloads.train --preset tiny --num-workers 2 --steps 20 --summary-json out.json

One GPU, no Ray (the same per-worker loop under torchrun):
    torchrun --nproc-per-node 1 -m workloads.train --launcher torchrun --use-gpu \\
        --preset qwen2.5-1.5b --global-batch-size 8 --seq-len 2048 --steps 30

On the cluster (what `python -m automation train` runs inside the Ray head pod; 8 L4 GPUs on two
g6.12xlarge, NCCL over EFA):
    ray job submit --address http://127.0.0.1:8265 --working-dir /tmp/ray-efa-eks/code -- \\
        python -m workloads.train --use-gpu --num-workers 8 --cpus-per-worker 8 \\
        --preset qwen2.5-1.5b --global-batch-size 16 --seq-len 2048 --steps 50 \\
        --run-dir /tmp/ray-efa-eks/runs/RUN_ID --run-id RUN_ID --summary-json summary.json

Each worker writes its NCCL_DEBUG=INFO output to <run-dir>/nccl/nccl.<run-id>.rank<R>.<host>.<pid>.log;
`python -m workloads.nccl_check --require efa <run-dir>/nccl` then proves (or disproves) that the
inter-node collectives went over EFA. Bad input is refused with one line naming the flag and the
fix, before Ray or torchrun starts (exit 2); `--help` lists every flag and the exit codes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

from workloads.config import TrainConfig, TrainConfigError, build_parser, check_gpu_capacity, check_locations, validate
from workloads.env import WORKER_ENV
from workloads.metrics import mark_run_dir
from workloads.summary import RunSummary

__all__ = ["build_parser", "exit_without_finalizing", "main", "parse_config", "run_ray", "run_torchrun"]

# Set once this process has joined a torchrun process group: it then ends with exit_without_finalizing.
_ran_collectives = False


def elastic_run_id(environ: Mapping[str, str]) -> str:
    """torchrun's rendezvous id (TORCHELASTIC_RUN_ID), or "" when it names no particular run.

    It is the same in every worker and across torchrun's restarts of the worker group, so a
    restarted group finds the checkpoints of the run it continues. torchrun sets it to "none" when a
    multi-node launch gives no --rdzv-id, and to a fresh uuid per invocation on one node
    (https://github.com/pytorch/pytorch/blob/main/torch/distributed/run.py).
    """
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    return "" if run_id == "none" else run_id


def parse_config(argv: list[str] | None = None, environ: Mapping[str, str] | None = None) -> TrainConfig:
    """The resolved config of a command line. Under torchrun without --run-id, the run id is
    torchrun's (``elastic_run_id``), so every restart of the worker group resumes the same run."""
    cfg = TrainConfig.from_argv(sys.argv[1:] if argv is None else argv)
    check_locations(cfg)  # before resolved() makes "s3://b/x" an absolute local path
    if cfg.launcher == "torchrun" and not cfg.run_id:
        cfg = dataclasses.replace(cfg, run_id=elastic_run_id(os.environ if environ is None else environ))
    return cfg.resolved()


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def run_ray(cfg: TrainConfig) -> RunSummary:
    """Launch `train_loop_per_worker` on cfg.num_workers Ray Train workers; return the summary."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    # the loop imports torch and transformers: loaded where a run starts, so --help and bad input stay instant
    from workloads.loop import summary_actor_name

    if not ray.is_initialized():
        ray.init(log_to_driver=True)
    check_gpu_capacity(cfg, ray.cluster_resources().get("GPU", 0.0), where="the Ray cluster")
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    if cfg.checkpoint_every and "://" not in cfg.storage_path and nodes > 1:
        raise TrainConfigError(
            f"--checkpoint-every {cfg.checkpoint_every} on {nodes} nodes needs storage every node reaches, "
            f"but --storage-path {cfg.storage_path!r} is local to each node: pass s3://bucket/prefix "
            "(or file:///path of a filesystem every node mounts)"
        )
    # Rank 0 hands the summary to this actor: it reaches the launcher whatever the storage.
    sink = ray.remote(num_cpus=0)(_SummarySink).options(name=summary_actor_name(cfg.run_id)).remote()
    resources = {"CPU": cfg.cpus_per_worker}
    if cfg.use_gpu:
        resources["GPU"] = cfg.gpus_per_worker
    trainer = TorchTrainer(
        worker_entry,
        train_loop_config=cfg.to_dict(),
        scaling_config=ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            name=cfg.name,
            storage_path=cfg.storage_path,
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            # NCCL reads these when its first communicator starts inside each worker.
            worker_runtime_env={"env_vars": dict(WORKER_ENV)},
        ),
        # No `datasets`: each worker reads only its own share of --data through a Ray Data dataset it
        # makes itself, from its checkpoint's cursor on (workloads/data.py and workloads/shards.py say why).
    )
    try:
        result = trainer.fit()
    except Exception as e:  # Ray Train 2.58 raises the workers' failures (WorkerGroupError) from fit()
        found = config_error_in(e)
        if found is None:
            raise
        raise found from None
    if result.error:
        raise config_error_in(result.error) or result.error
    summary = ray.get(sink.get.remote())
    ray.kill(sink)
    if summary is None:
        raise RuntimeError("training finished but rank 0 reported no summary")
    return dataclasses.replace(
        summary, checkpoint=result.checkpoint.path if cfg.checkpoint_every and result.checkpoint else None
    )


def worker_entry(config: dict) -> RunSummary | None:
    """A Ray Train worker: the training loop, and bad input it finds past the launcher's checks (a
    record deep in --data) printed as one line before Ray's traceback of the worker buries it."""
    # the loop imports torch and transformers: loaded where a run starts, so --help and bad input stay instant
    from workloads.loop import train_loop_per_worker

    try:
        return train_loop_per_worker(config)
    except TrainConfigError as e:
        print(f"error: {config_error_in(e)}", file=sys.stderr, flush=True)
        raise


def config_error_in(error: BaseException, depth: int = 0) -> TrainConfigError | None:
    """The TrainConfigError a worker raised, found inside Ray Train's error (its worker failures, causes
    and contexts), or None: the launcher then ends with that one line and exit 2."""
    said = re.search(r"TrainConfigError: ([^\n]+)", str(error))
    if isinstance(error, TrainConfigError):  # Ray's RayTaskError(TrainConfigError) is one too, its text a traceback
        cause = getattr(error, "cause", None)
        if isinstance(cause, TrainConfigError) and cause is not error:
            return config_error_in(cause, depth + 1)
        lines = str(error).splitlines()
        return TrainConfigError(said.group(1) if said else lines[0] if lines else "bad input in a worker")
    if depth > 8:
        return None
    inner = list(getattr(error, "worker_failures", {}).values()) + [error.__cause__, error.__context__]
    inner.append(getattr(error, "cause", None))
    for e in inner:
        if isinstance(e, BaseException) and (found := config_error_in(e, depth + 1)) is not None:
            return found
    # A worker's exception may reach here only as the text of its traceback.
    return TrainConfigError(said.group(1)) if said else None


class _SummarySink:
    """Holds the summary rank 0 puts, until the launcher takes it."""

    def __init__(self) -> None:
        self.summary: RunSummary | None = None

    def put(self, summary: RunSummary) -> None:
        self.summary = summary

    def get(self) -> RunSummary | None:
        return self.summary


def run_torchrun(cfg: TrainConfig) -> RunSummary | None:
    """Run this process as one worker of a torchrun launch (WORLD_SIZE, RANK set by torchrun)."""
    import torch
    import torch.distributed as dist

    # the loop imports torch and transformers: loaded where a run starts, so --help and bad input stay instant
    from workloads.loop import train_loop_per_worker

    global _ran_collectives
    _ran_collectives = True
    # gloo carries the CPU-side agreement below, so NCCL starts only once its log file is routed.
    dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cfg.use_gpu else "gloo")
    try:
        # Every rank must agree on the run id (and so on the run and NCCL log directories).
        shared = [dataclasses.replace(cfg, num_workers=dist.get_world_size()).to_dict()]
        dist.broadcast_object_list(shared, src=0, device=torch.device("cpu"))
        return train_loop_per_worker(shared[0])
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def exit_without_finalizing(code: int) -> NoReturn:
    """End this process with exit status ``code`` at once, its output flushed, without the
    interpreter's finalization (so atexit handlers do not run).

    For a process that ran gloo collectives. PyTorch keeps the gloo process group, and its worker
    threads, alive after destroy_process_group once a functional collective has used it (DTensor's,
    so FSDP2's, are such). A worker thread that drops the last reference to a tensor Python has let
    go of takes the GIL; if the interpreter is finalizing by then, Python 3.11 ends that thread
    inside a C++ destructor and the process aborts with "terminate called without an active
    exception" (the path decref -> gil_scoped_acquire -> take_gil -> PyThread_exit_thread in
    https://github.com/pytorch/pytorch/issues/190489). A loaded machine delays that thread past
    the main thread's exit; no barrier orders the two, as the barrier can run on the other thread.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    ctypes.CDLL(None).fflush(None)  # C streams too: NCCL's debug file
    os._exit(code)


def _check_local_gpus(cfg: TrainConfig) -> None:
    """GPU workers against this machine's GPUs, before Ray or NCCL starts.

    Under torchrun every process of this node needs one; a Ray launch with no RAY_ADDRESS starts
    a Ray head on this machine (inside a Ray job the address is set and Ray's count is checked).
    """
    if not cfg.use_gpu or (cfg.launcher == "ray" and os.environ.get("RAY_ADDRESS")):
        return
    import torch

    if cfg.launcher == "torchrun":  # one GPU per process of this node
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        cfg = dataclasses.replace(cfg, num_workers=local_world, gpus_per_worker=1)
        check_gpu_capacity(cfg, torch.cuda.device_count(), workers_flag="torchrun --nproc-per-node")
    else:
        check_gpu_capacity(cfg, torch.cuda.device_count())


def main(argv: list[str] | None = None) -> int:
    try:
        cfg = parse_config(argv)
    except TrainConfigError as e:
        return _fail(str(e))
    if cfg.launcher == "torchrun":  # torchrun, not the flag, sets the world size
        cfg = dataclasses.replace(cfg, num_workers=int(os.environ.get("WORLD_SIZE", 1)))
    try:
        validate(cfg)
        if cfg.data and int(os.environ.get("RANK", 0)) == 0:
            from workloads.data_check import check_data  # imports torch (about 1 s): only when --data is given

            # a malformed URI, an empty file, a record without text, another encoding: exit 2 before any worker
            check_data(cfg.data, cfg.num_workers)
        _check_local_gpus(cfg)
        if int(os.environ.get("RANK", 0)) == 0:
            mark_run_dir(cfg.run_dir, cfg.run_id)
            print(
                f"[train] starting run {cfg.run_id}: preset {cfg.preset}, {cfg.num_workers} "
                f"{'GPU' if cfg.use_gpu else 'CPU'} worker(s) under {cfg.launcher}, {cfg.steps} steps of "
                f"{cfg.global_batch_size} x {cfg.seq_len} tokens",
                flush=True,
            )
        summary = run_ray(cfg) if cfg.launcher == "ray" else run_torchrun(cfg)
    except TrainConfigError as e:
        return _fail(str(e))
    if summary is None:  # a torchrun worker other than rank 0
        return 0
    if cfg.summary_json:
        Path(cfg.summary_json).write_text(json.dumps(summary.to_dict(), indent=2) + "\n")
    mfu = f", MFU {summary.mfu:.1%}" if summary.mfu else ""
    tps = summary.tokens_per_s
    print(
        f"[train] done: {summary.steps} steps on {summary.world_size} workers ({summary.backend}), "
        f"loss {summary.loss_first:.4f} -> {summary.loss_last:.4f}, "
        f"{tps:,.0f} tokens/s (mean after warm-up){mfu}, run {summary.run_id}"
        if tps
        else f"[train] done: run {summary.run_id}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    code = main()
    if _ran_collectives:
        exit_without_finalizing(code)
    sys.exit(code)
