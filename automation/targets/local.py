"""The local target: a run without AWS, Kubernetes or the pulumi CLI.

It starts a Ray head on 127.0.0.1 with its job server, reads the resources Ray advertises, submits
`python -m workloads.train` to that job server with `workloads/` as the working_dir, says what the
NCCL logs of this machine can prove, and always stops the cluster it started (also on Ctrl-C or
SIGTERM). What the steps do with it is in automation/steps/.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import logging
import math
import os
import re
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from automation.errors import DriverError
from automation.hang import NCCL_TAIL_LINES, HangBound, RankEvidence, bound_of
from automation.job import local_job
from automation.local_ray import INHERITED_ADDRESS, LocalRayCluster, client_env
from automation.pipeline import Advice, PipelineResult, Prior, SubmittedJob, TrainOutcome
from automation.ray_head import (
    RAY_RESOURCES_SNIPPET,
    LocalJobs,
    parse_ray_resources,
    run_to_end,
    workloads_tarball,
)
from automation.storage import MAX_FAILURES, Durability, require_credentials
from automation.ui import Ui
from workloads.config import TrainConfig, TrainConfigError, new_run_id, runs_root

RESUME = "python -m automation run --target local"
NO_ATTACH = (
    "the local target's Ray cluster lives only as long as its `run`: there is no job to attach to "
    "(pass --stack STACK to attach to a cluster's job)"
)
PIPELINE = ("preflight", "start", "verify", "gate", "submit", "follow", "check")
LOCAL_GPU_NOTE = "local GPUs talk within one node: the NCCL check is inconclusive for EFA"
# A local run checkpoints every 10 steps. Measured on the 2-core machine, 2026-12-04: in the default 20-step
# `python -m automation run` (run 20261204-180612-82b4cc) a step took 0.076 s (median) and the step-10
# checkpoint held training up 0.26 s; the whole follow step took 51 s. A report can block up to Ray Train's
# 2 s poll when the previous one is not yet collected (1.4 and 1.8 s in a 20-step run checkpointing every 5).
LOCAL_CHECKPOINT_EVERY = 10


def durable(job: TrainConfig, storage_path: str | None = None) -> TrainConfig:
    """``job`` made durable as the cluster's is (automation/storage.py's Durability): Ray Train's state and
    checkpoints under ``<run-dir>/ray_results`` or ``storage_path`` (a directory or s3://bucket/prefix),
    a checkpoint every LOCAL_CHECKPOINT_EVERY steps, MAX_FAILURES recoveries."""
    where = storage_path or str(Path(job.run_dir) / "ray_results")
    if "://" not in where:  # Ray Train's workers run in directories of their own
        where = str(Path(where).expanduser().absolute())
    return dataclasses.replace(job, **vars(Durability(where, LOCAL_CHECKPOINT_EVERY, MAX_FAILURES)))


@dataclass(frozen=True)
class LocalPlan:
    """The local run's training job (automation/job.py's LOCAL_JOB by default) and where it keeps its state."""

    job: TrainConfig
    storage_path: str | None = None  # None: <run-dir>/ray_results

    # Read from the job, never stored twice.
    num_workers = property(lambda self: self.job.num_workers)
    cpus_per_worker = property(lambda self: self.job.cpus_per_worker)
    use_gpu = property(lambda self: self.job.use_gpu)

    @property
    def cpus_needed(self) -> float:
        return self.num_workers * self.cpus_per_worker

    @property
    def gpus_needed(self) -> float:
        return self.num_workers * self.job.gpus_per_worker if self.use_gpu else 0.0


def ray_resources(gcs_address: str, timeout_s: float = 120) -> dict[str, float]:
    """What the running cluster advertises (ray.cluster_resources()), read in a child process."""
    env = client_env(dict(os.environ), gcs_address)
    proc = subprocess.run(
        [sys.executable, "-c", RAY_RESOURCES_SNIPPET], capture_output=True, text=True, env=env, timeout=timeout_s
    )
    try:
        return parse_ray_resources(proc.stdout)
    except ValueError as e:
        raise DriverError(
            f"cannot read the local Ray cluster's resources (rc {proc.returncode}): {e} {proc.stderr.strip()[-300:]}"
        ) from None


def read_resources(
    gcs_address: str, attempts: int = 3, pause_s: float = 2.0, read: Callable[[str], dict] = ray_resources
) -> dict[str, float]:
    """`ray_resources`, tried `attempts` times: on a loaded machine the raylet of a head that has only just
    started can drop the reader's registration ("Failed to register worker to Raylet: ... End of file")."""
    for _ in range(attempts - 1):
        try:
            return read(gcs_address)
        except DriverError:
            time.sleep(pause_s)
    try:
        return read(gcs_address)
    except DriverError as e:
        raise DriverError(f"{e} (tried {attempts} times, {pause_s:g} s apart)") from None


# Ray's job SDK logs "Uploading package gcs://..." at INFO on every submit (ray 2.58,
# ray/dashboard/modules/dashboard_sdk.py `_upload_package_if_needed`): noise between our own lines.
RAY_SDK_LOGGER = "ray.dashboard.modules.dashboard_sdk"


def quiet_ray_sdk() -> None:
    """Keep the Ray job SDK's INFO lines out of the run's output; its warnings and errors still show."""
    logging.getLogger(RAY_SDK_LOGGER).setLevel(logging.WARNING)


def nccl_files(nccl_dir: Path) -> list[Path]:
    return sorted(nccl_dir.glob("*.log")) if nccl_dir.is_dir() else []


@dataclass
class LocalTarget:
    """The steps' view of one local run around one LocalRayCluster, which `close()` always stops."""

    plan: LocalPlan
    on_line: Callable[[str], None] = lambda s: None
    on_progress: Callable[[str], None] = lambda s: None
    on_note: Callable[[str], None] = lambda s: None
    cluster: LocalRayCluster | None = None
    notes: list[str] = field(default_factory=list)
    name: str = "local"
    stack_name: str | None = None
    poll_s: float = 1.0  # a local job runs about a minute: its end is seen within a second
    job_timeout_s: float = 600  # the local smoke job takes about a minute; --timeout sets another limit
    hang_bound: HangBound | None = HangBound()  # --hang-factor, --hang-floor
    _inherited_address: str | None = None
    _jobs: LocalJobs | None = None
    clock = staticmethod(time.monotonic)  # what the job's follow reads and sleeps on: this machine's own time
    sleep = staticmethod(time.sleep)

    def pipeline(self, command: str, plan: bool) -> tuple[str, ...]:
        return PIPELINE if command == "run" else ("preflight",)

    def _cluster(self) -> LocalRayCluster:
        if self.cluster is None:
            raise DriverError("the local Ray cluster is not running")
        return self.cluster

    def note(self, text: str) -> None:
        """A line for the user now (on_note) and again among the report's notes."""
        self.notes.append(text)
        self.on_note(text)

    def start(self) -> LocalRayCluster:
        """Start the Ray head on 127.0.0.1 that `close()` stops; RAY_ADDRESS is set aside until then."""
        # The job client in this process reads it too (a GCS timeout after 40 s): out until close().
        self._inherited_address = os.environ.pop(INHERITED_ADDRESS, None)
        if self._inherited_address is not None:
            self.note(
                f"{INHERITED_ADDRESS}={self._inherited_address} from the environment is not used: the local target "
                f"starts its own Ray head on 127.0.0.1 and leaves {INHERITED_ADDRESS} out of its processes' environment"
            )
        self.cluster = LocalRayCluster(
            num_cpus=max(1, math.ceil(self.plan.cpus_needed)), num_gpus=int(self.plan.gpus_needed)
        )
        self.cluster.start()
        return self.cluster

    def ray_resources(self) -> dict[str, float]:
        return read_resources(self._cluster().gcs_address)

    def train_job(self) -> TrainConfig:
        """The job, durable as on the cluster: it checkpoints and Ray Train restarts a lost worker from there."""
        job = durable(self.plan.job, self.plan.storage_path)
        self.notes.append(f"checkpoints of run {job.run_id}: {job.storage_path.rstrip('/')}/{job.name or job.run_id}/")
        return job

    # ---- the job: submitted to the local job server, then followed like the cluster's -------------------
    def jobs(self) -> LocalJobs:
        if self._jobs is None:
            from ray.job_submission import JobSubmissionClient

            self._jobs = LocalJobs(JobSubmissionClient(self._cluster().dashboard_url))
            quiet_ray_sdk()
        return self._jobs

    def submit_job(self, job: TrainConfig) -> SubmittedJob:
        workdir = Path(self._cluster().temp_dir) / "src"  # the same workloads/ tarball the AWS path sends
        with tarfile.open(fileobj=io.BytesIO(workloads_tarball()), mode="r:gz") as tar:
            tar.extractall(workdir, filter="data")
        return SubmittedJob(self.jobs().submit(job, workdir, sys.executable), job)

    def find_job(self) -> SubmittedJob:
        raise DriverError(NO_ATTACH, exit_code=2)

    def hang_evidence(self) -> list[RankEvidence]:
        """Each rank's last NCCL lines from its file here; stacks are not read (`ray stack` asks for sudo)."""
        files = nccl_files(Path(self.plan.job.nccl_log_dir))
        why = "not read on the local target (`ray stack` runs py-spy under sudo)"
        tails = {f: tuple(f.read_text(errors="replace").splitlines()[-NCCL_TAIL_LINES:]) for f in files}
        ranks = {f: int(m[1]) if (m := re.search(r"rank(\d+)", f.name)) else None for f in files}
        none = RankEvidence(None, "local", "local", stack_error=why, nccl_error="no NCCL log files (gloo on CPU)")
        return [RankEvidence(ranks[f], "local", "local", stack_error=why, nccl_tail=tails[f]) for f in files] or [none]

    def ask_stop(self, question: str) -> bool | None:
        return True  # the job lives in this run's own Ray cluster, which close() stops

    def attach_command(self, job_id: str) -> str:
        return ""  # nothing outlives a local run

    def start_phases(self, first_step_at: float | None) -> None:
        return None  # the local cluster starts no nodes and pulls no image: no phases to read

    def run_job_to_end(self, job: TrainConfig) -> TrainOutcome:
        return run_to_end(self, job)

    def nccl_expectation(self) -> tuple[str | None, str]:
        """On CPU (gloo) no NCCL at all; local GPUs talk within one node: any transport passes, no EFA proof."""
        return ("any", LOCAL_GPU_NOTE) if self.plan.use_gpu else (None, "")

    def efa_counters(self) -> None:
        return None  # no EFA device here: the counter witness does not apply to a local run

    def host_nodes(self) -> dict[str, str]:
        return {}  # one machine: no pods to place on nodes

    def keep_counters(self, doc: dict) -> None:
        return None  # the local cluster does not outlive its run: nothing to keep for a later `attach`

    def kept_counters(self, job_id: str) -> None:
        return None

    def checked_run_id(self) -> str:
        return self.plan.job.run_id

    def nccl_logs(self, run_id: str, dest: Path) -> list[Path]:
        return nccl_files(Path(self.plan.job.nccl_log_dir))

    def collect_run(self, runs_root: Path) -> Path:
        return Path(self.plan.job.run_dir)

    def advise(self, failed: str, prior: Prior) -> Advice:
        return Advice(
            exists="nothing: the local Ray cluster this run started is stopped when the run ends",
            next_commands=(RESUME,),
        )

    def interrupted(self, advice: Advice | None) -> Advice:
        return Advice("what this run started locally has been stopped", (RESUME,))

    def where(self) -> str:
        return ""

    def cost(self, command: str) -> None:
        return None

    def files(self, result: PipelineResult) -> str:
        return f"{self.plan.job.run_dir} (summary.json, metrics.jsonl, report/, nccl/)"

    def close(self) -> None:
        if self._inherited_address is not None:
            os.environ[INHERITED_ADDRESS] = self._inherited_address
            self._inherited_address = None
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None
            self.notes.append("the local Ray cluster started by this run was stopped")


def from_args(args: argparse.Namespace, ui: Ui) -> LocalTarget:
    """The local target for the CLI's arguments: the `tiny` preset unless flags say otherwise."""
    given = vars(args).get  # each command declares only its own flags: one it lacks was not given
    try:
        job = local_job(
            given("run_id") or new_run_id(), runs_root(), given("steps"), args.num_workers, bool(given("use_gpu"))
        )
    except TrainConfigError as e:
        raise DriverError(str(e), exit_code=2) from None
    require_credentials("--storage-path", given("storage_path"))
    hang = bound_of(given("hang_factor"), given("hang_floor"))
    target = LocalTarget(LocalPlan(job, given("storage_path")), ui.log, ui.progress, ui.note, hang_bound=hang)
    if given("timeout"):
        target.job_timeout_s = float(args.timeout)
    return target
