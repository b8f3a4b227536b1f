"""Where the pipeline runs: `aws` (the Pulumi stack, EKS, KubeRay) or `local` (a Ray head on 127.0.0.1).

`Target` is what every step in automation/steps/ may ask of a target: capabilities (the job, submit it,
ask the job server about it, the NCCL logs of a run, what exists after a failure, close), never a step's
logic. What only one place has (the AWS target's Kubernetes client and stack, the local target's Ray head)
the step that needs it reads from that target's own class.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from automation.cost import CostEstimate
    from automation.hang import HangBound, RankEvidence
    from automation.pipeline import Advice, PipelineResult, Prior, SubmittedJob, TrainOutcome
    from automation.ray_head import JobState, LogChunk
    from workloads.config import TrainConfig
    from workloads.nccl_check.counters import NodeReading
    from workloads.summary import RunSummary


class Target(Protocol):
    """What every step of the pipeline needs from the place it runs (the comments say what each promises)."""

    name: str  # "aws" or "local", as the report names it and the steps pick their place's work by
    notes: list[str]  # lines for the report's notes, in the order they came

    @property
    def on_line(self) -> Callable[[str], None]: ...  # one line of the job's log, shown to the user as it comes

    @property
    def poll_s(self) -> float: ...  # how often the follow step asks the job server

    def note(self, text: str) -> None: ...  # a line for the user now and among the report's notes

    @property
    def stack_name(self) -> str | None: ...

    # The names of the steps `command` runs, in order (automation.steps.STEPS holds each).
    def pipeline(self, command: str, plan: bool) -> tuple[str, ...]: ...

    def train_job(self) -> TrainConfig: ...  # the training job of this run, as submitted

    def run_job_to_end(self, job: TrainConfig) -> TrainOutcome: ...  # submit, follow to its end; what it reported

    # The phases of the cluster's last start in seconds (node join, image pull, pod start, first step;
    # automation/start_phases.py), `first_step_at` when this command saw the first step line; None where
    # there is no cluster start to read (local).
    def start_phases(self, first_step_at: float | None) -> dict | None: ...

    # ---- the job, detached: submitted, then followed by asking the job server (automation/ray_head.py) ----
    def submit_job(self, job: TrainConfig) -> SubmittedJob: ...  # queue the job and return at once

    # The job of a run that was left (`attach`): the one named, else the newest submitted; JobNotFound if none.
    def find_job(self) -> SubmittedJob: ...

    def job_status(self, job_id: str) -> JobState: ...  # one short call to the job server

    def job_logs(self, job_id: str, offset: int, final: bool = False) -> LogChunk: ...  # lines from `offset` on

    def stop_job(self, job_id: str) -> None: ...  # `ray job stop`; the job server then says STOPPED

    def job_summary(self, job: TrainConfig) -> RunSummary | None: ...  # the summary a SUCCEEDED job wrote

    # How the follow step waits (a fake clock in tests), and the user's --timeout (None: no limit).
    def clock(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    @property
    def job_timeout_s(self) -> float | None: ...

    # --hang-factor/--hang-floor (automation/hang.py; None: not watched), and what each worker rank shows while the
    # job hangs (its stack, its last NCCL lines), each call bounded: read before `ray job stop`.
    @property
    def hang_bound(self) -> HangBound | None: ...

    def hang_evidence(self) -> list[RankEvidence]: ...

    # After Ctrl-C while a job runs: whether to stop it (asked on a terminal, default no; None: no terminal),
    # and the command that follows it again from any machine ("" when nothing outlives the run).
    def ask_stop(self, question: str) -> bool | None: ...

    def attach_command(self, job_id: str) -> str: ...

    # What the NCCL logs must show here (check's `require`; None: no NCCL to check), and a note when a
    # pass cannot prove EFA here ("" otherwise).
    def nccl_expectation(self) -> tuple[str | None, str]: ...

    # Every GPU node's EFA port counters now, by node (workloads/nccl_check/counters.py: a node that could
    # not be read carries why); None where there is no EFA to read (local).
    def efa_counters(self) -> dict[str, NodeReading] | None: ...

    # The reading before this run's job, kept where a later command on another machine finds it (`attach`'s
    # check): returns where it went, or None where nothing outlives this command (local); `kept_counters` reads
    # back the one kept for the run of job `job_id` (None: never kept, or unreadable).
    def keep_counters(self, doc: dict) -> str | None: ...

    # The hosts NCCL's logs name (a pod's host name is its pod name) -> the node each runs on, so the check can
    # set a host's channel claims beside its node's counters; {} where names already match (local).
    def host_nodes(self) -> dict[str, str]: ...

    def kept_counters(self, job_id: str) -> dict | None: ...

    def checked_run_id(self) -> str: ...  # the run `check` reads when this command trained none

    # The NCCL log files of run `run_id` on this machine (copied under `dest` when they live elsewhere).
    def nccl_logs(self, run_id: str, dest: Path) -> list[Path]: ...

    # This run's directory on this machine (copied from the cluster into `runs_root` first on AWS).
    def collect_run(self, runs_root: Path) -> Path: ...

    def advise(self, failed: str, prior: Prior) -> Advice: ...  # after `failed` failed: what exists, what next

    # After Ctrl-C or SIGTERM: what exists now and what to run next (`advice`: the step's own, if any).
    def interrupted(self, advice: Advice | None) -> Advice: ...

    def where(self) -> str: ...  # the words after "interrupted ..." naming what was worked on ("" for none)

    def cost(self, command: str) -> CostEstimate | None: ...

    # Where the run's files are (its summary, its NCCL logs), for a run that reached `follow`.
    def files(self, result: PipelineResult) -> str: ...

    def close(self) -> None: ...  # stop what this run started and must not outlive it; idempotent
