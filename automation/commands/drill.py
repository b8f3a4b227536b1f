"""`python -m automation drill`: kill one training worker mid-run and prove the run recovers.

    python -m automation drill --json                        # on this machine (the local target)
    python -m automation drill --steps 60 --storage-path s3://bucket/prefix
    python -m automation drill --stack us-west-2 --json      # on the stack's cluster: a worker pod deleted

The drill trains the job once uninterrupted (the reference), then again under a new run id with the same seed and,
once Ray Train has registered a checkpoint, SIGKILLs the Ray Train worker of the highest rank shown (on AWS: deletes
the pod of the highest rank not on rank 0's, under a run controller that scales the GPU nodes up, verifies and gates
them first, and down at the end). Ray Train restarts the worker group from the newest registered checkpoint. From the
killed run's metrics it reports `step_at_kill`, `resumed_from_step`, `steps_lost`, `final_step`, `recovery_seconds`
(kill to the first step after the restart) and `final_loss_matches`. It passes when the run ends at its last step,
resumed from the checkpoint registered at the kill (or a later one), lost no more steps than the checkpoint interval,
and ends at the reference's loss (docs/storage.md, "Fault drill"). Exit 0 pass, 1 fail, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import psutil

from automation.commands import Subparsers, run_steps
from automation.commands.run_steps import add_hang, add_keep_nodes, add_skip_gate, add_storage_path, add_yes
from automation.errors import DriverError
from automation.flags import CLUSTER_PARENT, command_parser, resolve_target, whole_number
from automation.hang import bound_of
from automation.job import CLUSTER_ROOT, local_job, stack_label, with_run_paths
from automation.pipeline import TrainOutcome
from automation.run_controller import RunController
from automation.storage import require_credentials
from automation.targets import aws
from automation.targets.local import LOCAL_CHECKPOINT_EVERY, LocalPlan, LocalTarget, durable
from automation.ui import Ui
from workloads.config import TrainConfig, new_run_id, runs_root
from workloads.metrics import METRICS_FILE, parse_echo, read_metrics
from workloads.nccl_check import run_marker

HELP = "kill one training worker mid-run and check that the run resumes from its last checkpoint"
DRILL_STEPS = 40  # four checkpoints at the local interval (10): room to kill between two of them
# Relative tolerance of "the same final loss": a CPU run resumed from its checkpoint repeats the same
# arithmetic, so it lands on the reference's loss to float32 rounding; a resume one scheduler step
# off (5.9572 against 5.9530, commit b568b05) is 7e-4 away and must fail.
LOSS_RTOL = 1e-5
WORKER_CLASS = "RayTrainWorker"  # the Ray Train V2 actor that runs train_loop_per_worker
# Where Ray Train V2's controller records the checkpoints it has registered (the ones a restart uses):
# ray/train/v2/_internal/execution/checkpoint/checkpoint_manager.py (ray 2.58), `register_checkpoint` ->
# `_save_state_and_delete_old_checkpoints` -> `_write_state_to_storage`; the file name is
# CHECKPOINT_MANAGER_SNAPSHOT_FILENAME in ray/train/v2/_internal/constants.py.
SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"
POLL_S = 0.05
# Ray Train's controller registers a reported checkpoint when it next polls the workers, every 2 s by default
# (ray/train/v2/_internal/constants.py, RAY_TRAIN_HEALTH_CHECK_INTERVAL_S, passed on from the job's driver to
# the controller). A tiny-preset step takes about 0.05 s on 2 cores, so a 2 s poll registers a checkpoint some
# 40 steps late and no kill could land between two registered checkpoints; on the cluster a step takes
# seconds and the default is fine. The drill's own Ray head (and so its jobs) polls every 0.2 s.
HEALTH_CHECK_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
DRILL_HEALTH_CHECK_S = "0.2"


def drill_steps(text: str) -> int:
    """--steps: enough for two checkpoints at the local interval, so a kill can land after the first."""
    steps, least = whole_number(text), 2 * LOCAL_CHECKPOINT_EVERY
    if steps < least:
        raise argparse.ArgumentTypeError(
            f"{steps} steps leave no room to kill a worker between two checkpoints (one every "
            f"{LOCAL_CHECKPOINT_EVERY} steps): pass --steps {least} or more"
        )
    return steps


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = command_parser(sub, "drill", HELP, __doc__, [*parents, CLUSTER_PARENT])
    p.add_argument("--target", choices=("local",), help="drill on this machine (the default without --stack)")
    p.add_argument(
        "--steps", type=drill_steps, help=f"steps of each run (default: {DRILL_STEPS} locally, the stack's on AWS)"
    )
    for add in (add_storage_path, add_hang, add_yes, add_keep_nodes, add_skip_gate):
        add(p)


# ---- the worker to kill ----------------------------------------------------------------------------
def worker_pids(lines: list[str], run_id: str) -> dict[int, int]:
    """{rank: pid} of the run's Ray Train workers, from the marker each prints as its first line
    (workloads/loop.py) behind Ray's `(RayTrainWorker pid=N)` prefix; a restarted rank's newest pid wins."""
    pattern = re.compile(rf"\({WORKER_CLASS} pid=(\d+)\)\s*{re.escape(run_marker(run_id))} rank=(\d+)\s*$")
    return {int(m[2]): int(m[1]) for m in map(pattern.search, lines) if m}


def kill_worker(pid: int) -> None:
    """SIGKILL `pid` after checking it is still a Ray Train worker (a pid may be reused)."""
    try:
        cmdline = " ".join(psutil.Process(pid).cmdline())
    except psutil.NoSuchProcess:
        raise DriverError(f"worker pid {pid} exited before the drill could kill it") from None
    if WORKER_CLASS not in cmdline:
        raise DriverError(f"pid {pid} is no longer a {WORKER_CLASS} ({cmdline[:80]!r}): not killing it")
    os.kill(pid, signal.SIGKILL)


def snapshot_step(snapshot: dict) -> int | None:
    """The step of the newest mid-run checkpoint in Ray Train's checkpoint manager snapshot (the one a
    restart resumes from), or None (none yet, or the final checkpoint, whose metrics are the summary)."""
    latest = snapshot.get("latest_checkpoint_result") or {}
    step = (latest.get("metrics") or {}).get("step")
    return int(step) if isinstance(step, (int, float)) else None


def read_registered(storage_path: str, name: str) -> int | None:
    """`snapshot_step` of run `name` under a storage directory or s3:// URI (read with pyarrow, as Ray Train writes)."""
    import pyarrow.fs as pafs  # about 0.1 s: paid by a drill, not by every command's parser

    fs, path = pafs.FileSystem.from_uri(f"{storage_path.rstrip('/')}/{name}/{SNAPSHOT_FILE}")
    try:
        with fs.open_input_stream(path) as f:
            return snapshot_step(json.loads(f.read()))
    except (OSError, json.JSONDecodeError):  # not written yet, or caught mid-write
        return None


def last_step(metrics_file: Path) -> int:
    """The newest step rank 0 has recorded (0 before the first)."""
    try:
        return max((r["step"] for r in read_metrics(metrics_file)), default=0)
    except (OSError, ValueError):
        return 0


# ---- the arithmetic --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Recovery:
    """What the killed run's metrics say about its recovery."""

    step_at_kill: int  # newest step recorded before the kill
    resumed_from_step: int  # the step the restarted workers started after (their checkpoint's)
    steps_lost: int  # steps done before the kill that the restart did again
    final_step: int
    recovery_seconds: float  # from the kill to the first step done after the restart


def recovery(records: list[dict], kill_time: float) -> Recovery:
    """The recovery of a run killed at Unix time `kill_time`, from its metrics records in file order; ValueError when
    no step was recorded before the kill or none after it (the run did not resume)."""
    before = [r for r in records if r["time"] <= kill_time]
    after = [r for r in records if r["time"] > kill_time]
    if not before:
        raise ValueError("no step was recorded before the kill: the worker was killed before training began")
    if not after:
        raise ValueError("no step was recorded after the kill: Ray Train did not resume the run")
    at_kill, resumed_from, seconds = max(r["step"] for r in before), after[0]["step"] - 1, after[0]["time"] - kill_time
    return Recovery(at_kill, resumed_from, at_kill - resumed_from, records[-1]["step"], round(seconds, 2))


def losses_match(loss: float | None, reference: float | None, rtol: float = LOSS_RTOL) -> bool:
    return loss is not None and reference is not None and math.isclose(loss, reference, rel_tol=rtol)


def failures(
    rec: Recovery, total_steps: int, checkpoint_every: int, registered: int | None, matches: bool
) -> list[str]:
    """Why the drill fails (empty: it passes)."""
    why = []
    if rec.final_step != total_steps:
        why.append(f"final_step {rec.final_step}, expected {total_steps}")
    # A later checkpoint than the one registered at the kill may be registered before the restart; an older one
    # would mean Ray Train lost a checkpoint it had.
    if registered is not None and rec.resumed_from_step < registered:
        why.append(f"resumed_from_step {rec.resumed_from_step}, older than the registered checkpoint {registered}")
    if rec.steps_lost > checkpoint_every:
        why.append(f"steps_lost {rec.steps_lost} exceeds the checkpoint interval {checkpoint_every}")
    if not matches:
        why.append("the final loss differs from the uninterrupted run's")
    return why


# ---- killing between two checkpoints ---------------------------------------------------------------
@dataclass(frozen=True)
class Kill:
    rank: int
    time: float
    registered_step: int  # the checkpoint Ray Train had registered when the worker died
    pid: int | None = None  # local: the process killed
    pod: str | None = None  # AWS: the pod deleted


# Each reads the drill run's log lines so far: the last step done; a kill after the registered step (None while no
# worker is known yet).
LastStep = Callable[[list[str]], int]
KillOnce = Callable[[list[str], int], Kill | None]


# The two targets the drill runs on (a protocol of their on_line/on_progress fields would not do: mypy reads a
# callable class attribute as read-only, and the drill sets on_line).
DrillTarget = LocalTarget | aws.AwsTarget


class PodDeleter(Protocol):
    """The Kubernetes calls of the AWS drill (KubeApi; tests hand in a stand-in)."""

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]: ...
    def delete_pod(self, namespace: str, name: str) -> dict: ...


def run_and_kill(
    target: DrillTarget, job: TrainConfig, reference: TrainConfig, timeout_s: float, how: tuple[LastStep, KillOnce]
) -> dict:
    """The reference run to its end, then the drill run with one kill (``how``: its last step and its kill); the
    drill's document from the metrics rank 0 echoed into both runs' logs."""
    ref_lines: list[str] = []
    target.on_line = ref_lines.append
    target.on_progress(f"reference run {reference.run_id}: {reference.steps} steps, uninterrupted")
    done = target.run_job_to_end(reference)
    if done.status != "SUCCEEDED":
        tail = "\n".join(done.log_tail[-20:])
        raise DriverError(
            f"the reference run {reference.run_id} ended {done.status}; last log lines:\n{tail}", exit_code=1
        )
    lines: list[str] = []
    target.on_line = lines.append
    outcome: list[TrainOutcome] = []
    running = threading.Thread(target=lambda: outcome.append(target.run_job_to_end(job)), daemon=True)
    target.on_progress(f"drill run {job.run_id}: {job.steps} steps, one worker killed after a checkpoint")
    running.start()
    (last_of, kill_once), deadline, kill = how, time.monotonic() + timeout_s, None
    # The kill lands after Ray Train registered a mid-run checkpoint and before the run passes the next, so the restart
    # must resume from the registered one.
    while kill is None and running.is_alive() and time.monotonic() < deadline:
        registered, last = read_registered(job.storage_path, job.name or job.run_id), last_of(list(lines))
        if registered and last < job.steps and last <= registered + job.checkpoint_every:
            kill = kill_once(list(lines), registered)
        if kill is None:
            time.sleep(POLL_S)
    if kill is None:
        raise DriverError(
            f"run {job.run_id} ended (or {timeout_s:g} s passed) before a worker could be killed between two "
            f"checkpoints: pass a larger --steps (now {job.steps}; a checkpoint every {job.checkpoint_every})",
            exit_code=1,
        )
    target.on_progress(
        f"killed rank {kill.rank} ({kill.pod or f'pid {kill.pid}'}) after checkpoint {kill.registered_step}"
    )
    running.join(timeout_s)
    if not outcome or outcome[0].status != "SUCCEEDED":
        status = outcome[0].status if outcome else "still running"
        raise DriverError(f"the killed run {job.run_id} did not recover: its job ended {status}", exit_code=1)
    return document(job, reference, kill, echoed_records(lines), echoed_records(ref_lines))


# ---- the local drill -------------------------------------------------------------------------------
def local_kill_for(job: TrainConfig) -> tuple[LastStep, KillOnce]:
    """The last step from the run's metrics file; SIGKILL of the highest rank's process found in the log."""

    def kill(lines: list[str], registered: int) -> Kill | None:
        pids = worker_pids(lines, job.run_id)
        if not pids:
            return None
        rank = max(pids)
        at = time.time()
        kill_worker(pids[rank])
        return Kill(rank, at, registered, pid=pids[rank])

    return lambda lines: last_step(Path(job.run_dir) / METRICS_FILE), kill


def drill_local(args: argparse.Namespace, ui: Ui) -> dict:
    """Reference run, killed run, their numbers; the local Ray cluster is stopped whatever happens."""
    require_credentials("--storage-path", args.storage_path)
    run_id, runs, steps = new_run_id(), runs_root().absolute(), args.steps or DRILL_STEPS
    job = durable(local_job(run_id, runs, steps=steps), args.storage_path)
    reference = durable(local_job(f"{run_id}-reference", runs, steps=steps), args.storage_path)
    hang = bound_of(args.hang_factor, args.hang_floor)
    target = LocalTarget(LocalPlan(job, args.storage_path), on_progress=ui.milestone, on_note=ui.note, hang_bound=hang)
    before = os.environ.get(HEALTH_CHECK_ENV)
    os.environ[HEALTH_CHECK_ENV] = DRILL_HEALTH_CHECK_S  # the head's environment, inherited by its jobs
    try:
        target.start()
        doc = run_and_kill(target, job, reference, target.job_timeout_s, local_kill_for(job))
    finally:
        target.close()
        os.environ.pop(HEALTH_CHECK_ENV) if before is None else os.environ.update({HEALTH_CHECK_ENV: before})
    return {**doc, "target": "local", "run_dir": job.run_dir}


# ---- the AWS drill ---------------------------------------------------------------------------------
# The TrainController's "Started training worker group" lines, one per worker (ray 2.58, seen in the job log of
# every run): `- (ip=10.30.1.61, pid=212) world_rank=5, local_rank=1, node_rank=1`.
_GROUP_LINE = re.compile(r"- \(ip=([0-9A-Fa-f.:]+), pid=(\d+)\) world_rank=(\d+)")
AWS_JOB_TIMEOUT_S = 3600.0


def worker_ips(lines: list[str]) -> dict[int, str]:
    """{rank: node IP} of the worker group the controller started last (a restart announces a new one)."""
    return {int(m[3]): m[1] for m in map(_GROUP_LINE.search, lines) if m}


def worker_pod_to_delete(pods: list[dict], rank_ips: dict[int, str]) -> tuple[str, int]:
    """(pod, rank): the running worker pod of the highest rank whose pod does not hold rank 0, which writes and
    echoes the metrics the drill reads. DriverError when every known rank shares rank 0's pod."""
    running = {
        p["status"].get("podIP"): p["metadata"]["name"]
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }
    for rank in sorted(rank_ips, reverse=True):
        ip = rank_ips[rank]
        if ip in running and ip != rank_ips.get(0):
            return running[ip], rank
    raise DriverError(
        f"no running worker pod holds a rank other than rank 0's (ranks on {sorted(set(rank_ips.values()))}, "
        f"pods on {sorted(ip for ip in running if ip)}): the drill needs workers on two pods; raise "
        f"{stack_label('num_workers')} so they span both GPU nodes",
        exit_code=2,
    )


def echoed_records(lines: list[str]) -> list[dict]:
    """The metrics records rank 0 echoed into the job log, in order."""
    return [r for r in map(parse_echo, lines) if r is not None]


def aws_kill_for(kube: PodDeleter, namespace: str, selector: str) -> tuple[LastStep, KillOnce]:
    """The last step from the job log's echoed metrics; deletion of a worker pod."""

    def kill(lines: list[str], registered: int) -> Kill | None:
        ips = worker_ips(lines)
        if not ips:
            return None
        pod, rank = worker_pod_to_delete(kube.list_pods(namespace, selector), ips)
        at = time.time()
        kube.delete_pod(namespace, pod)
        return Kill(rank, at, registered, pod=pod)

    return lambda lines: max((r["step"] for r in echoed_records(lines)), default=0), kill


def with_drill_interval(job: TrainConfig) -> TrainConfig:
    """``job`` saving at least every quarter of its steps: the cluster's default interval (automation/storage.py,
    Young/Daly's, about 16 h) outlasts a drill, which must kill between two checkpoints."""
    return dataclasses.replace(job, checkpoint_every=min(job.checkpoint_every, max(1, job.steps // 4)))


def drill_aws(args: argparse.Namespace, target: aws.AwsTarget, owner: RunController) -> dict:
    """The drill on the stack's cluster, the GPU nodes scaled up and verified first: the stack's durable job, a
    worker pod deleted through the Kubernetes API."""
    run_steps.prepare(owner, ("scale-up", "verify", "gate"))
    job = with_drill_interval(target.train_job())
    ref_id = f"{job.run_id}-reference"
    reference = with_run_paths(job, ref_id, f"{CLUSTER_ROOT}/runs/{ref_id}")
    exp = target.expectations()
    selector = f"ray.io/cluster={exp.raycluster},ray.io/node-type=worker"
    doc = run_and_kill(target, job, reference, AWS_JOB_TIMEOUT_S, aws_kill_for(target.kube(), exp.namespace, selector))
    return {**doc, "target": "aws", "stack": args.stack}


def document(
    job: TrainConfig, reference: TrainConfig, kill: Kill, records: list[dict], ref_records: list[dict]
) -> dict:
    """The drill's JSON document from both runs' metrics records."""
    rec = recovery(records, kill.time)
    loss, ref_loss = (r[-1].get("loss") if r else None for r in (records, ref_records))
    matches = losses_match(loss, ref_loss)
    why = failures(rec, job.steps, job.checkpoint_every, kill.registered_step, matches)
    how = {"pid": kill.pid, "signal": "SIGKILL"} if kill.pod is None else {"pod": kill.pod}
    return {
        "ok": not why,
        "failures": why,
        "run_id": job.run_id,
        "reference_run_id": reference.run_id,
        "killed": {"rank": kill.rank, **how},
        "checkpoint_every": job.checkpoint_every,
        "registered_checkpoint_at_kill": kill.registered_step,
        **dataclasses.asdict(rec),
        "total_steps": job.steps,
        "final_loss": loss,
        "reference_final_loss": ref_loss,
        "final_loss_matches": matches,
        "storage_path": job.storage_path,
    }


def run(args: argparse.Namespace, ui: Ui) -> int:
    if resolve_target(args) == "local":
        return show(drill_local(args, ui), ui, None)
    target = run_steps.aws_target(args, ui, on_progress=ui.milestone)
    owner = RunController(target, ui, keep_nodes=args.keep_nodes)
    return owner.run(lambda owner: drill_aws(args, target, owner), lambda doc: show(doc, ui, owner.scale_down_line))


def show(doc: dict, ui: Ui, nodes: str | None) -> int:
    """The drill's document (JSON, or its lines) and ``nodes``, where the GPU nodes were left; 0 when it passed."""
    if ui.json_mode:
        ui.emit_json({**doc, "nodes": nodes} if nodes else doc)
    else:
        for key in (*(f.name for f in dataclasses.fields(Recovery)), "final_loss_matches"):
            ui.note(f"{key}: {doc[key]}")
        for line in doc["failures"]:
            ui.error(line)
        ui.note(f"drill {'passed' if doc['ok'] else 'failed'}: run {doc['run_id']}")
        if nodes:
            ui.note(nodes)
    return 0 if doc["ok"] else 1
