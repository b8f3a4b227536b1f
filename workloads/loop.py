"""The per-worker training loop: one function that both launchers (Ray Train, torchrun) run.

`train_loop_per_worker(config)` takes the TrainConfig as a dict, joins (or finds) the process
group, routes NCCL's debug output to a per-run, per-rank file, builds the FSDP2 model, restores the
latest checkpoint if there is one, trains, checkpoints every `checkpoint_every` steps and hands a
summary to the launcher. Ray is imported only when the loop runs under Ray, so torchrun needs none.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import resource
import shutil
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from workloads.config import TrainConfig
from workloads.data import MicroBatches
from workloads.env import NCCL_DEBUG_LEVEL
from workloads.errors import TrainConfigError
from workloads.metrics import DataWait, StepRecorder
from workloads.model import (
    apply_fsdp,
    apply_unsharded,
    build_mesh,
    build_model,
    check_float8_device,
    count_params,
    flops_per_token,
    peak_tflops,
)
from workloads.nccl_check import run_marker
from workloads.optim import MasterAdamW
from workloads.summary import MFU_FORMULA, RunSummary

STATE_FILE = "state.json"
SUMMARY_FILE = "summary.json"


@dataclass(frozen=True)
class WorkerEnv:
    rank: int
    world: int
    local_rank: int
    under_ray: bool

    @staticmethod
    def detect() -> WorkerEnv:
        try:
            import ray.train

            ctx = ray.train.get_context()
            return WorkerEnv(ctx.get_world_rank(), ctx.get_world_size(), ctx.get_local_rank(), True)
        except Exception:  # not inside a Ray Train worker (no Ray, or plain process)
            return WorkerEnv(
                int(os.environ.get("RANK", 0)),
                int(os.environ.get("WORLD_SIZE", 1)),
                int(os.environ.get("LOCAL_RANK", 0)),
                False,
            )


def route_nccl_log(cfg: TrainConfig, rank: int) -> str:
    """Point NCCL_DEBUG_FILE at `<nccl_log_dir>/nccl.<run_id>.rank<R>.%h.%p.log` for this run only.

    The run id in the file name lets the NCCL check scope to this run wherever the directory is.

    NCCL reads it when its first communicator is created, which PyTorch defers to the first
    collective, so setting it here (after the process group exists) is early enough.
    """
    Path(cfg.nccl_log_dir).mkdir(parents=True, exist_ok=True)
    path = str(Path(cfg.nccl_log_dir).absolute() / f"nccl.{cfg.run_id}.rank{rank}.%h.%p.log")
    os.environ["NCCL_DEBUG_FILE"] = path
    os.environ.setdefault("NCCL_DEBUG", NCCL_DEBUG_LEVEL)
    return path


def summary_actor_name(run_id: str) -> str:
    """The Ray actor through which rank 0 hands the run summary to the Ray launcher."""
    return f"ray-efa-eks-summary-{run_id}"


def say(line: str) -> None:
    """Print one line to stdout. Written directly: under Ray Train a plain print() goes through
    Train's print patch, which puts every line into the job log twice."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _device(env: WorkerEnv, use_gpu: bool) -> torch.device:
    if not use_gpu:
        return torch.device("cpu")
    if env.under_ray:
        import ray.train.torch

        return ray.train.torch.get_device()
    return torch.device("cuda", env.local_rank)


def _peak_mem_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # Linux reports KiB


def latest_complete(root: Path) -> Path | None:
    """The newest ``checkpoint_*`` under ``root`` whose save finished, or None.

    Finished means both markers exist: DCP's ``.metadata`` (written by the coordinator only after
    every rank's shards are written) and our ``state.json`` (written by rank 0 after that).
    """
    if not root.is_dir():
        return None
    done = [p for p in root.glob("checkpoint_*") if (p / STATE_FILE).is_file() and (p / ".metadata").is_file()]
    steps = {p: p.name.removeprefix("checkpoint_") for p in done}
    # By step number, not by name: "checkpoint_9" sorts after "checkpoint_10" as text.
    numbered = [p for p in done if steps[p].isdigit()]
    return max(numbered, key=lambda p: int(steps[p])) if numbered else None


def data_position_of(state: dict, rank: int, world: int) -> dict | None:
    """This rank's data position in a restored state (None: synthetic data or no checkpoint).

    Positions are per rank, so a checkpoint resumes only with the world size that wrote it."""
    positions = state.get("data")
    if positions is None:
        return None
    if len(positions) != world:
        raise RuntimeError(
            f"the checkpoint at step {state.get('step')} holds the data positions of {len(positions)} ranks but this "
            f"run has {world}: resume with --num-workers {len(positions)}"
        )
    return positions[rank]


class Checkpointer:
    """Sharded checkpoints with torch.distributed.checkpoint, stored by Ray Train or on a path."""

    def __init__(self, cfg: TrainConfig, env: WorkerEnv):
        self.cfg, self.env = cfg, env
        self.plain_root = Path(cfg.storage_path) / cfg.name if not env.under_ray else None

    # -- restore ---------------------------------------------------------------------------
    def restore(self, model, optimizer) -> dict:
        """Load the latest checkpoint into model and optimizer; return its state (step 0 if none).

        Every rank must call it. Under Ray Train the controller hands every worker the same
        checkpoint; on a plain launch rank 0 chooses and broadcasts it (``agreed_checkpoint``).
        """
        if self.env.under_ray:
            import ray.train

            ckpt = ray.train.get_checkpoint()
            if ckpt is None:
                return {"step": 0, "losses": []}
            # Each rank downloads into a directory of its own. Ray's `as_directory` shares one temporary
            # directory per checkpoint on a node and lets a rank that arrives after another's download
            # finished download it again into that directory, rewriting files the first rank's DCP load
            # is reading ("metadata read failed: Ran out of input"; ray/train/_checkpoint.py, `to_directory`).
            with tempfile.TemporaryDirectory(prefix=f"ckpt-{self.cfg.run_id}-restore-{self.env.rank}-") as d:
                return self._load_dir(Path(ckpt.to_directory(d)), model, optimizer)
        chosen = self.agreed_checkpoint()
        return self._load_dir(chosen, model, optimizer) if chosen else {"step": 0, "losses": []}

    def agreed_checkpoint(self) -> Path | None:
        """The checkpoint every rank of a plain launch resumes from: rank 0's choice, broadcast.

        Ranks may see the storage differently (a save still landing, a stale NFS cache on one
        node); if each chose its own latest, two ranks could load different steps and the run
        would silently diverge or hang in its first collective.
        """
        latest = latest_complete(self.plain_root) if self.env.rank == 0 and self.plain_root else None
        choice = [str(latest) if latest else ""]
        if self.env.world > 1:
            dist.broadcast_object_list(choice, src=0, device=torch.device("cpu"))
        return Path(choice[0]) if choice[0] else None

    def _load_dir(self, d: Path, model, optimizer) -> dict:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        state = json.loads((d / STATE_FILE).read_text())
        if (d / ".metadata").exists():
            msd, osd = get_state_dict(model, optimizer)
            sd = {"model": msd, "optim": osd}
            dcp.load(sd, checkpoint_id=str(d))
            set_state_dict(model, optimizer, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
        return state

    # -- save ------------------------------------------------------------------------------
    def save(
        self,
        state: dict,
        model=None,
        optimizer=None,
        summary: RunSummary | None = None,
        data_position: dict | None = None,
    ) -> str | None:
        """Write this rank's shards (and, on rank 0, the step state) and hand them over.

        Every rank must call it at the same step. ``data_position`` is this rank's place in the
        corpus; the state keeps every rank's, by rank, under "data". Returns the checkpoint's
        location (rank 0, plain launches).
        """
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        if data_position is not None:
            positions: list = [None] * self.env.world
            dist.all_gather_object(positions, data_position)
            state = {**state, "data": positions}

        if self.env.under_ray:
            d = Path(tempfile.mkdtemp(prefix=f"ckpt-{self.cfg.run_id}-"))
        else:
            assert self.plain_root is not None  # set whenever the run is not under Ray
            d = self.plain_root / f"checkpoint_{state['step']:06d}"
            if self.env.rank == 0:
                d.mkdir(parents=True, exist_ok=True)
            dist.barrier()
        if model is not None:
            msd, osd = get_state_dict(model, optimizer)
            dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(d))
        if self.env.rank == 0:
            (d / STATE_FILE).write_text(json.dumps(state))
            if summary is not None:
                (d / SUMMARY_FILE).write_text(json.dumps(summary.to_dict(), indent=2))
        if not self.env.under_ray:
            dist.barrier()
            return str(d)
        import ray.train

        metrics = report_metrics(state, summary)
        try:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(d)))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return None


def report_metrics(state: dict, summary: RunSummary | None = None) -> dict:
    """What Ray Train records beside a checkpoint: the scalar fields (numbers, text, None) of the run's
    summary on the final save, else of the step state. Ray keeps them as the checkpoint's metrics, in
    its checkpoint manager's snapshot too, where `automation drill` reads the registered step from."""
    fields = summary.to_dict() if summary is not None else state
    return {k: v for k, v in fields.items() if isinstance(v, (int, float, str)) or v is None}


def _maybe_fail(cfg: TrainConfig, env: WorkerEnv, step: int) -> None:
    """Fault injection for tests and drills: the last rank dies once, hard, at `fail_at_step`.

    Every rank calls it. Under Ray Train the ranks first wait until the controller has taken their
    reports, so the death cannot race the registration of the last checkpoint."""
    if not cfg.fail_at_step or step != cfg.fail_at_step:
        return
    if env.under_ray:
        _wait_until_reports_taken()
        dist.barrier()
        time.sleep(REPORT_REPLY_S)
    if env.rank != env.world - 1:
        return
    marker = Path(cfg.run_dir) / f".failed-at-{step}"
    if marker.exists():
        return
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(str(os.getpid()))
    say(f"[fault injection] rank {env.rank} exits at step {step}")
    os._exit(17)


# Ray Train V2's controller takes a worker's reports from its result queue (maxsize 1) when it polls
# the workers, every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s by default), and registers a checkpoint
# once every worker's report of it is in, before it polls again (ray 2.58:
# ray/train/v2/_internal/execution/worker_group/worker.py `poll_status`,
# .../checkpoint/report_handler.py `after_worker_group_poll_status`). A worker that dies before its
# report is taken loses that checkpoint, and a loaded machine can delay a poll by several intervals,
# so no fixed sleep is enough (the sleep of 2.5 intervals used before is the likeliest cause of the S3
# kill-and-resume test's one failure in six runs under load).
# Once every rank's queue is empty, a death is seen at the next poll, after the registration; the
# short sleep lets the reply of a poll that has just emptied a queue leave the process.
REPORT_REPLY_S = 0.5
REPORTS_TAKEN_TIMEOUT_S = 300.0


def _wait_until_reports_taken(timeout_s: float = REPORTS_TAKEN_TIMEOUT_S) -> None:
    """Block until Ray Train's controller has taken this worker's reports; RuntimeError past `timeout_s`."""
    from ray.train.v2._internal.execution.context import get_train_context

    queue = get_train_context().get_result_queue()
    deadline = time.monotonic() + timeout_s
    while not queue.empty():
        if time.monotonic() > deadline:
            raise RuntimeError(f"Ray Train's controller took no report of this worker in {timeout_s:.0f} s")
        time.sleep(0.05)


@dataclass
class Training:
    """What one rank trains: the sharded model, its optimizer and the numbers MFU needs."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    n_params: int
    vocab: int
    n_layers: int
    hidden: int


def ranks_per_node(env: WorkerEnv) -> int:
    """Workers on this node: Ray Train's local world size, or torchrun's LOCAL_WORLD_SIZE.

    HSDP's shard groups are runs of this many consecutive ranks, one node each, because both
    launchers number a node's workers consecutively: Ray Train groups workers by node before it
    assigns world ranks (ray 2.58, ray/train/v2/_internal/execution/worker_group/worker_group.py,
    `_sort_workers_by_gpu_id_grouped_by_node`), torchrun gives rank = node rank x nproc-per-node +
    local rank (https://pytorch.org/docs/stable/elastic/run.html)."""
    if env.under_ray:
        import ray.train

        return ray.train.get_context().get_local_world_size()
    return int(os.environ.get("LOCAL_WORLD_SIZE", env.world))


def build_training(cfg: TrainConfig, device: torch.device, world: int, per_node: int | None = None) -> Training:
    """Build the model on `device`, shard it with FSDP2 over `world` ranks (`cfg.mesh`: fsdp, or
    hsdp with shard groups of `cfg.shard_size` or `per_node` ranks), make the optimizer."""
    mesh = build_mesh(cfg, device.type, world, per_node or world)
    model = build_model(cfg, device)
    lm_cfg = model.lm.config
    n_params = count_params(model)
    adamw = {"lr": cfg.lr, "betas": (0.9, 0.95), "weight_decay": cfg.weight_decay, "fused": device.type == "cuda"}
    if cfg.unsharded:
        if world != 1:
            raise TrainConfigError(f"--unsharded trains on one rank and this launch has {world}: drop --unsharded")
        apply_unsharded(model, cfg, device)
        optimizer = MasterAdamW(model, getattr(torch, cfg.param_dtype), **adamw)
    else:
        apply_fsdp(model, cfg, mesh)
        optimizer = torch.optim.AdamW(model.parameters(), **adamw)
    return Training(model, optimizer, n_params, lm_cfg.vocab_size, lm_cfg.num_hidden_layers, lm_cfg.hidden_size)


def float8_line(recipe: str, layers: int) -> str:
    """Rank 0's first line of a float8 run: the recipe, how many layers it converted, which torchao ran."""
    from importlib.metadata import version

    return f"[train] float8 {recipe}: {layers} linear layers in float8 (torchao {version('torchao')})"


def train_step(
    model, optimizer, batches, grad_accum: int, grad_clip: float, device: torch.device, vocab: int, stats=None
) -> torch.Tensor:
    """One optimizer step over `grad_accum` micro-batches; returns this rank's mean loss on the
    device, without synchronising (the caller decides when to read it).

    Each micro-batch's loss is divided by `grad_accum`, so the step's gradient is the mean over
    all its micro-batches, as one batch `grad_accum` times larger would give. Only the last
    micro-batch reduces gradients over the ranks (FSDP2's `set_requires_gradient_sync`, its no_sync:
    https://pytorch.org/docs/stable/distributed.fsdp.fully_shard.html); the others accumulate
    unsharded gradients locally, so the gradient bytes on the network per optimizer step do not
    grow with `grad_accum`.
    A `stats` dict receives the gradient norm before clipping, as `grad_norm` (a tensor, not read back here).
    """
    total = torch.zeros(1, device=device)
    set_sync = getattr(model, "set_requires_gradient_sync", None)  # None: not FSDP2 (the bench's FSDP1 reference)
    for micro in range(grad_accum):
        ids, labels = next(batches)
        if int(ids.max()) >= vocab:
            raise RuntimeError(f"token id {int(ids.max())} >= vocab {vocab}: the tokenizer does not fit the model")
        if set_sync is not None:
            set_sync(micro == grad_accum - 1)
        loss = model(ids.to(device, non_blocking=True), labels.to(device, non_blocking=True)) / grad_accum
        loss.backward()
        total += loss.detach().float()
    # MasterAdamW clips its fp32 copies of the gradients (and folds the clip into its update).
    clip = getattr(optimizer, "clip_grad_norm_", None)
    grad_norm = clip(grad_clip) if clip else torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    if stats is not None:
        stats["grad_norm"] = grad_norm
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    after = getattr(model, "after_optimizer_step", None)  # None: the bench's FSDP1 reference
    if after is not None:
        after()
    return total


def _join(cfg: TrainConfig) -> tuple[WorkerEnv, torch.device]:
    """Route this rank's NCCL log, print its run marker, join the process group, pick its device."""
    env = WorkerEnv.detect()
    route_nccl_log(cfg, env.rank)
    # Lets the NCCL check cut a combined log (Ray job log, kubectl logs) down to this run.
    say(run_marker(cfg.run_id, env.rank))
    if not dist.is_initialized():  # torchrun / plain launcher; Ray Train has already joined
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cfg.use_gpu else "gloo")
    device = _device(env, cfg.use_gpu)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return env, device


def _warmup_schedule(cfg: TrainConfig, optimizer) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``cfg.warmup_steps``. Made before a checkpoint restores the optimizer, so
    its base rates are the config's, not the restored ones; a resumed run then steps it once per step done."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / cfg.warmup_steps) if cfg.warmup_steps else 1.0
    )


def _micro_batches(cfg: TrainConfig, env: WorkerEnv, vocab: int) -> MicroBatches:
    """This rank's micro-batch stream: its share of ``--data`` through Ray Data under Ray Train, else read here."""
    return MicroBatches(cfg, vocab, env.rank, env.world, ray_data=bool(cfg.data) and env.under_ray)


def _say_step(
    cfg: TrainConfig, env: WorkerEnv, step: int, loss: float, dt: float, fpt: float, peak: float | None, device
) -> None:
    """Rank 0's progress line every ``cfg.log_every`` steps and at the last one."""
    if env.rank != 0 or ((step + 1) % cfg.log_every and step + 1 != cfg.steps):
        return
    tps = cfg.tokens_per_step / dt
    mfu = f" mfu {tps * fpt / (env.world * peak * 1e12):.1%}" if peak else ""
    say(
        f"[train] step {step + 1}/{cfg.steps} loss {loss:.4f} step_time {dt * 1e3:.0f} ms "
        f"tokens/s {tps:,.0f}{mfu} peak_mem {_peak_mem_gb(device):.2f} GB"
    )


def _summary(
    cfg: TrainConfig,
    env: WorkerEnv,
    device: torch.device,
    tr: Training,
    start: int,
    losses: list[float],
    step_times: list[float],
    tokens_per_s: float | None,
    fpt: float,
    peak: float | None,
) -> RunSummary:
    """The run's summary (summary.json), as rank 0 reports it."""
    return RunSummary(
        run_id=cfg.run_id,
        preset=cfg.preset,
        world_size=env.world,
        backend="nccl" if device.type == "cuda" else "gloo",
        device=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        steps=cfg.steps,
        resumed_from_step=start or None,
        global_batch_size=cfg.global_batch_size,
        micro_batch=cfg.micro_batch,
        grad_accum=cfg.grad_accum,
        seq_len=cfg.seq_len,
        precision=cfg.precision,
        params=tr.n_params,
        tokens_per_s=tokens_per_s,
        tokens_per_s_per_gpu=tokens_per_s / env.world if tokens_per_s and device.type == "cuda" else None,
        mfu=tokens_per_s * fpt / (env.world * peak * 1e12) if tokens_per_s and peak else None,
        mfu_formula=MFU_FORMULA,
        step_time_s=sorted(step_times)[len(step_times) // 2] if step_times else None,
        loss_first=losses[0] if losses else None,
        loss_last=losses[-1] if losses else None,
        losses=tuple(losses),
        peak_mem_gb=_peak_mem_gb(device),
        nccl_log_dir=str(Path(cfg.nccl_log_dir).absolute()),
        nccl_log_host=socket.gethostname(),
    )


def _hand_over(
    cfg: TrainConfig, env: WorkerEnv, ckpt: Checkpointer, summary: RunSummary, model, optimizer, stream
) -> RunSummary:
    """Save the final checkpoint (its path into the summary returned) and, under Ray, give rank 0's
    summary to the launcher's actor."""
    if cfg.checkpoint_every:
        # None under Ray: the launcher fills in the stored path.
        path = ckpt.save(
            {"step": cfg.steps, "losses": list(summary.losses), "run_id": cfg.run_id},
            model,
            optimizer,
            summary=summary,
            data_position=stream.position(),
        )
        summary = dataclasses.replace(summary, checkpoint=path)
    if env.under_ray and env.rank == 0:
        import ray

        ray.get(ray.get_actor(summary_actor_name(cfg.run_id)).put.remote(summary))
    return summary


# An OOM in the first optimizer steps of a process is a micro-batch too large for this GPU: the first
# step allocates the activations, the second adds the optimizer's state, the third is the steady state.
OOM_FALLBACK_STEPS = 3


class FirstStepsOutOfMemory(Exception):
    """The GPU ran out of memory in one of the first OOM_FALLBACK_STEPS steps (data only: no frames of the
    failed attempt stay alive through it, so its model can be freed)."""

    def __init__(self, step: int, message: str):
        super().__init__(step, message)
        self.step, self.message = step, message


def _maybe_oom(cfg: TrainConfig) -> None:
    """Fault injection for tests and drills: a step whose micro-batch is at least `oom_drill_micro_batch`
    raises torch.OutOfMemoryError, as CUDA's allocator would."""
    if cfg.oom_drill_micro_batch and cfg.micro_batch >= cfg.oom_drill_micro_batch:
        raise torch.OutOfMemoryError(
            f"CUDA out of memory. (fault injection: --oom-drill-micro-batch {cfg.oom_drill_micro_batch}, "
            f"micro-batch {cfg.micro_batch})"
        )


def halved(cfg: TrainConfig, oom: FirstStepsOutOfMemory) -> TrainConfig:
    """`cfg` with the largest micro-batch at most half of today's that divides the per-worker batch, so
    accumulation makes up the rest: the same global batch, the same tokens per optimizer step.
    RuntimeError naming the fix when the micro-batch is already 1."""
    per_worker = cfg.global_batch_size // cfg.num_workers
    if cfg.micro_batch <= 1:
        raise RuntimeError(
            f"out of GPU memory at step {oom.step} with a micro-batch of 1 x {cfg.seq_len} tokens, so nothing is "
            f"left to halve: lower --seq-len, turn on --activation-checkpointing (--ac-policy full keeps least), "
            f"set --reshard-after-forward, shard over every worker with --mesh fsdp, or use GPUs with more memory "
            f"({oom.message})"
        )
    micro = next(m for m in range(cfg.micro_batch // 2, 0, -1) if per_worker % m == 0)
    return dataclasses.replace(cfg, micro_batch_size=micro)


def release_memory(device: torch.device) -> None:
    """Give back what a failed attempt held: its compiled blocks, its tensors, the allocator's cache."""
    torch._dynamo.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def train_loop_per_worker(config: dict) -> RunSummary | None:
    """Train per the config; returns the summary on rank 0 of a plain (non-Ray) launch.

    If the GPU runs out of memory in the first OOM_FALLBACK_STEPS steps, the attempt is dropped, the
    micro-batch halved and the accumulation doubled (`halved`), and training starts again from where
    the attempt started; the log, every later metrics line and the summary say so. Each rank decides
    alone: ranks with the same shapes run out of memory at the same allocation, but a rank that runs
    out alone leaves its peers waiting in a collective until NCCL's timeout ends the run.
    """
    cfg = TrainConfig.from_dict(config)
    env, device = _join(cfg)
    check_float8_device(cfg, device)  # before the model is built: a float8 job never runs as bf16
    fallbacks: list[dict] = []
    while True:
        try:
            return _train(cfg, env, device, fallbacks)
        except FirstStepsOutOfMemory as e:
            oom = e
        smaller = halved(cfg, oom)
        fallbacks.append(
            {
                "step": oom.step,
                "micro_batch": cfg.micro_batch,
                "grad_accum": cfg.grad_accum,
                "to_micro_batch": smaller.micro_batch,
                "to_grad_accum": smaller.grad_accum,
                "error": oom.message,
            }
        )
        say(
            f"[train] rank {env.rank}: out of GPU memory at step {oom.step} with micro-batch {cfg.micro_batch} x "
            f"{cfg.grad_accum} accumulated: starting again with micro-batch {smaller.micro_batch} x "
            f"{smaller.grad_accum} (the same {cfg.global_batch_size} sequences per step); set --micro-batch-size "
            f"{smaller.micro_batch} to start there"
        )
        cfg = smaller
        del oom  # the exception holds the failed attempt's frames and tensors
        release_memory(device)


def _train(cfg: TrainConfig, env: WorkerEnv, device: torch.device, fallbacks: list[dict]) -> RunSummary | None:
    """One attempt at the whole run: build, restore, train, hand over. FirstStepsOutOfMemory when the GPU
    runs out of memory in its first OOM_FALLBACK_STEPS steps."""
    tr = build_training(cfg, device, env.world, ranks_per_node(env))
    model, optimizer, vocab = tr.model, tr.optimizer, tr.vocab
    if env.rank == 0 and cfg.float8 != "off":
        say(float8_line(cfg.float8, model.float8_layers))
    sched = _warmup_schedule(cfg, optimizer)
    ckpt = Checkpointer(cfg, env)
    state = ckpt.restore(model, optimizer)
    start = int(state["step"])
    losses: list[float] = list(state.get("losses", []))
    for _ in range(start):
        sched.step()
    if env.rank == 0 and start:
        say(f"[train] resumed from checkpoint at step {start}")

    stream = _micro_batches(cfg, env, vocab)
    batches = stream.iterate(start, data_position_of(state, env.rank, env.world))

    fpt = flops_per_token(tr.n_params, tr.n_layers, tr.hidden, cfg.seq_len)
    peak = peak_tflops(device)
    batches = DataWait(batches)
    recorder = StepRecorder(cfg, env.rank, env.world, fpt, peak, gpu=device.type == "cuda")
    stats: dict = {}
    warmup = min(2, max(0, cfg.steps - start - 1))  # steps excluded from throughput (compile, allocator)
    timed_steps, timed_s = 0, 0.0
    step_times: list[float] = []

    for step in range(start, cfg.steps):
        _maybe_fail(cfg, env, step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        lr = optimizer.param_groups[0]["lr"]
        loss_buf = _step_or_oom(cfg, step - start, step + 1, tr, batches, device, stats, recorder)
        sched.step()
        dist.all_reduce(loss_buf, op=dist.ReduceOp.SUM)
        loss_val = loss_buf.item() / env.world  # .item() syncs the device too
        dt = time.perf_counter() - t0
        recorder.record(step + 1, loss_val, lr, dt, batches.take(), _peak_mem_gb(device), stats.get("grad_norm"))
        losses.append(loss_val)
        step_times.append(dt)
        if step - start >= warmup:
            timed_steps += 1
            timed_s += dt
        _say_step(cfg, env, step, loss_val, dt, fpt, peak, device)
        done = step + 1
        if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
            ckpt.save(
                {"step": done, "losses": losses, "run_id": cfg.run_id},
                model,
                optimizer,
                data_position=stream.position(),
            )

    recorder.close()
    tokens_per_s = cfg.tokens_per_step * timed_steps / timed_s if timed_s else None
    summary = _summary(cfg, env, device, tr, start, losses, step_times, tokens_per_s, fpt, peak)
    summary = dataclasses.replace(summary, oom_fallbacks=tuple(fallbacks))
    summary = _hand_over(cfg, env, ckpt, summary, model, optimizer, stream)
    dist.barrier()
    return summary if env.rank == 0 else None


def _step_or_oom(cfg: TrainConfig, nth: int, step: int, tr: Training, batches, device, stats, recorder) -> torch.Tensor:
    """`train_step`; an OOM in the attempt's first OOM_FALLBACK_STEPS steps becomes FirstStepsOutOfMemory,
    raised once the OOM's own traceback (which holds the step's tensors) is gone."""
    message = None
    try:
        if nth < OOM_FALLBACK_STEPS:
            _maybe_oom(cfg)
        return train_step(tr.model, tr.optimizer, batches, cfg.grad_accum, cfg.grad_clip, device, tr.vocab, stats)
    except torch.OutOfMemoryError as e:
        if nth >= OOM_FALLBACK_STEPS:
            raise
        message = str(e).splitlines()[0][:300]
    tr.optimizer.zero_grad(set_to_none=True)
    recorder.close()
    raise FirstStepsOutOfMemory(step, message)
