"""Train Qwen2.5 (or the `tiny` preset) with FSDP2 in bf16, under Ray Train or torchrun.

Local CPU (2 Ray workers, gloo; about a minute on 2 cores):
    python -m workloads.train --preset tiny --num-workers 2 --steps 20 --summary-json out.json

One GPU, no Ray (the same per-worker loop under torchrun):
    torchrun --nproc-per-node 1 -m workloads.train --launcher torchrun --use-gpu \\
        --preset qwen2.5-1.5b --batch-size 8 --seq-len 2048 --steps 30

On the cluster (what `python -m automation train` runs inside the Ray head pod; 8 L4 GPUs on two
g6.12xlarge, NCCL over EFA):
    ray job submit --address http://127.0.0.1:8265 --working-dir /tmp/ray-efa-eks/code -- \\
        python -m workloads.train --use-gpu --num-workers 8 --cpus-per-worker 8 \\
        --preset qwen2.5-1.5b --batch-size 16 --seq-len 2048 --steps 50 \\
        --run-dir /tmp/ray-efa-eks/runs/RUN_ID --run-id RUN_ID --summary-json summary.json

Each worker writes its NCCL_DEBUG=INFO output to <run-dir>/nccl/nccl.<run-id>.rank<R>.<host>.<pid>.log;
`python -m workloads.nccl_check --require efa <run-dir>/nccl` then proves (or disproves) that the
inter-node collectives went over EFA. Bad input is refused with one line naming the flag and the
fix, before any worker starts (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from workloads.config import LOSSES, PRESETS, TASKS, ConfigError, TrainConfig, check_gpu_capacity, validate

_HELP = {
    "preset": f"model architecture shipped in workloads/configs ({', '.join(PRESETS)})",
    "pretrained": "load weights with from_pretrained from a hub id or a local directory (offline) instead of random init",
    "launcher": "ray: start a Ray Train TorchTrainer from this process; torchrun: this process is one worker of a torchrun launch",
    "num_workers": "Ray Train workers (one process each; ignored under torchrun, which sets WORLD_SIZE)",
    "use_gpu": "train on GPUs with NCCL (default: CPU with gloo)",
    "gpus_per_worker": "GPUs each Ray worker requests",
    "cpus_per_worker": "CPUs each Ray worker requests",
    "steps": "optimizer steps",
    "batch_size": "global batch in sequences per optimizer step (over all workers)",
    "micro_batch_size": "sequences per worker per forward pass (0: batch-size / num-workers, no accumulation)",
    "seq_len": "tokens per sequence",
    "lr": "AdamW learning rate",
    "weight_decay": "AdamW weight decay",
    "warmup_steps": "linear learning-rate warm-up steps",
    "grad_clip": "gradient-norm clip",
    "seed": "seed of the initial weights and of synthetic data",
    "task": f"synthetic data when --data is not given ({', '.join(TASKS)}; learnable: a next-token permutation a model can learn)",
    "data": "real data: .txt (a document a line), .jsonl (field text) or .parquet (column text): file, dir or s3://b/prefix/",
    "tokenizer": "tokenizer for --data: 'bytes' (built in), a local directory or a hub id (default: --pretrained, or bytes for tiny, else Qwen/Qwen2.5-1.5B)",
    "run_id": "id of this run, naming its directory (default: TORCHELASTIC_RUN_ID under torchrun, else UTC time + hex)",
    "run_dir": "this run's directory (default runs/<run-id>)",
    "nccl_log_dir": "where each worker writes its NCCL debug log (default <run-dir>/nccl)",
    "storage_path": "Ray Train storage: a local directory or s3://bucket/prefix (default <run-dir>/ray_results)",
    "name": "Ray Train run name under the storage path (default: the run id)",
    "checkpoint_every": "save a sharded checkpoint every K steps (0: only a final summary)",
    "max_failures": "how many worker-group failures Ray Train recovers from (resuming from the latest checkpoint)",
    "summary_json": "write the run summary (throughput, MFU, losses, NCCL log dir) to this file",
    "log_every": "rank 0 prints a progress line every K steps",
    "activation_checkpointing": "recompute each decoder block's activations in backward (saves memory, costs ~1/3 more compute)",
    "compile": "torch.compile each decoder block (GPU only: on CPU the flag is ignored)",
    "loss": f"loss head ({', '.join(LOSSES)}; chunked never materialises the full fp32 logits)",
    "loss_chunk_size": "tokens per chunk of the chunked loss",
    "reshard_after_forward": "FSDP2: free gathered block parameters after forward (saves memory, re-gathers in backward)",
    "reduce_dtype": "FSDP2: dtype of the gradient reduce-scatter (bfloat16 halves the bytes on the network, float32 sums exactly)",
    "param_dtype": "FSDP2: dtype the blocks compute in (bfloat16; float32 is a slow full-precision reference for numerics)",
    "fail_at_step": "fault drill: the last worker dies once at this step (0: off)",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m workloads.train",
        description=__doc__.split("\n\n")[0],
        epilog="Exit status: 0 trained, 2 bad input, 1 training failed.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = getattr(defaults, f.name)
        if isinstance(default, bool):
            p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=_HELP[f.name])
        else:
            kind = {int: int, float: float}.get(type(default), str)
            p.add_argument(flag, type=kind, default=default, help=_HELP[f.name])
    return p


def elastic_run_id(environ: dict[str, str]) -> str:
    """torchrun's rendezvous id (TORCHELASTIC_RUN_ID), or "" when it names no particular run.

    It is the same in every worker and across torchrun's restarts of the worker group, so a
    restarted group finds the checkpoints of the run it continues. torchrun sets it to "none" when a
    multi-node launch gives no --rdzv-id, and to a fresh uuid per invocation on one node
    (https://github.com/pytorch/pytorch/blob/main/torch/distributed/run.py).
    """
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    return "" if run_id == "none" else run_id


def parse_config(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> TrainConfig:
    """The resolved config of a command line. Under torchrun without --run-id, the run id is
    torchrun's (``elastic_run_id``), so every restart of the worker group resumes the same run."""
    cfg = TrainConfig(**vars(build_parser().parse_args(argv)))
    if cfg.launcher == "torchrun" and not cfg.run_id:
        cfg = dataclasses.replace(cfg, run_id=elastic_run_id(os.environ if environ is None else environ))
    return cfg.resolved()


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


def run_ray(cfg: TrainConfig) -> dict:
    """Launch `train_loop_per_worker` on cfg.num_workers Ray Train workers; return the summary."""
    import ray
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from workloads.loop import summary_actor_name, train_loop_per_worker

    if not ray.is_initialized():
        ray.init(log_to_driver=True)
    check_gpu_capacity(cfg, ray.cluster_resources().get("GPU", 0.0))
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    if cfg.checkpoint_every and "://" not in cfg.storage_path and nodes > 1:
        raise ConfigError(
            f"--checkpoint-every {cfg.checkpoint_every} on {nodes} nodes needs storage every node reaches, "
            f"but --storage-path {cfg.storage_path!r} is local to each node: pass s3://bucket/prefix "
            "(or file:///path of a filesystem every node mounts)"
        )
    # Rank 0 hands the summary to this actor: it reaches the launcher whatever the storage.
    sink = ray.remote(num_cpus=0)(_SummarySink).options(name=summary_actor_name(cfg.run_id)).remote()
    resources = {"CPU": cfg.cpus_per_worker}
    if cfg.use_gpu:
        resources["GPU"] = cfg.gpus_per_worker
    datasets = {}
    if cfg.data:
        from workloads.data import ray_dataset

        datasets["train"] = ray_dataset(cfg.data)  # lists the files first: a bad --data fails here, exit 2
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config=cfg.to_dict(),
        scaling_config=ScalingConfig(num_workers=cfg.num_workers, use_gpu=cfg.use_gpu, resources_per_worker=resources),
        run_config=RunConfig(
            name=cfg.name,
            storage_path=cfg.storage_path,
            failure_config=FailureConfig(max_failures=cfg.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            # NCCL reads these when its first communicator starts inside each worker.
            worker_runtime_env={"env_vars": {"NCCL_DEBUG": "INFO", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}},
        ),
        datasets=datasets or None,
        # Every worker sees every document and keeps its own share (workloads/data.py says why).
        dataset_config=DataConfig(datasets_to_split=[]),
    )
    result = trainer.fit()
    if result.error:
        raise result.error
    summary = ray.get(sink.get.remote())
    ray.kill(sink)
    if summary is None:
        raise RuntimeError("training finished but rank 0 reported no summary")
    summary["checkpoint"] = result.checkpoint.path if cfg.checkpoint_every and result.checkpoint else None
    return summary


class _SummarySink:
    """Holds the summary rank 0 puts, until the launcher takes it."""

    def __init__(self):
        self.summary = None

    def put(self, summary: dict) -> None:
        self.summary = summary

    def get(self) -> dict | None:
        return self.summary


def run_torchrun(cfg: TrainConfig) -> dict | None:
    """Run this process as one worker of a torchrun launch (WORLD_SIZE, RANK set by torchrun)."""
    import torch
    import torch.distributed as dist

    from workloads.loop import train_loop_per_worker

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


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    if cfg.launcher == "torchrun":  # torchrun, not the flag, sets the world size
        cfg = dataclasses.replace(cfg, num_workers=int(os.environ.get("WORLD_SIZE", 1)))
    try:
        validate(cfg)
        if cfg.data:
            from workloads.data import list_data

            list_data(cfg.data)  # a malformed URI, an empty prefix, an unknown format: exit 2 before any worker
        if cfg.launcher == "torchrun" and cfg.use_gpu:
            import torch

            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
            check_gpu_capacity(
                dataclasses.replace(cfg, num_workers=local_world, gpus_per_worker=1), torch.cuda.device_count()
            )
        summary = run_ray(cfg) if cfg.launcher == "ray" else run_torchrun(cfg)
    except ConfigError as e:
        return _fail(str(e))
    if summary is None:  # a torchrun worker other than rank 0
        return 0
    text = json.dumps(summary, indent=2)
    if cfg.summary_json:
        Path(cfg.summary_json).write_text(text + "\n")
    mfu = f", MFU {summary['mfu']:.1%}" if summary.get("mfu") else ""
    tps = summary["tokens_per_s"]
    print(
        f"[train] done: {summary['steps']} steps on {summary['world_size']} workers ({summary['backend']}), "
        f"loss {summary['loss_first']:.4f} -> {summary['loss_last']:.4f}, "
        f"{tps:,.0f} tokens/s{mfu}, run {summary['run_id']}"
        if tps
        else f"[train] done: run {summary['run_id']}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
