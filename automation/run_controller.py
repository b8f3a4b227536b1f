"""The run controller: the one owner of a run on a target, from its scale-up to its close.

Every command that starts work on the GPU nodes (`run`, `attach`, `train`, `bench` and its two legs, `bench
--collectives --stack`, `drill --stack`) hands its work to a ``RunController``. On AWS the work begins with the
`scale-up` step (automation/scaling.py); whatever way it ends (done, a failed or raised step, Ctrl-C), one ``finally``
keeps the run's logs in the run bucket (the pods that hold them go with the nodes), decides the scale-down (never
under a job the job server has not said ended, nor one it cannot be asked about), reports and closes the target.

Anchored on SkyPilot's managed-jobs controller (skypilot-org/skypilot, sky/jobs/controller.py: ``JobController``
"controls the lifecycle of a single managed job" and its cleanup is its own method, run however the job ended)
and on Ray Train v2's ``TrainController`` (ray-project/ray, python/ray/train/v2/_internal/execution/controller/
controller.py: one object drives the run through its states to the end).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

from automation import steps
from automation.errors import DriverError
from automation.pipeline import PipelineResult, RunState, StepInterrupted, run_pipeline
from automation.ray_head import TERMINAL
from automation.recovery import APPLICATION, Failure, Recovery, last_step
from automation.scaling import after_run
from automation.targets import Target, aws
from automation.ui import Ui

R = TypeVar("R")
# The steps that may leave GPU nodes up for this run: `up` makes the node group, `scale-up` grows it, `follow`
# follows a job on it (`attach`). From the start of any of them on, the end of the run decides the scale-down.
NODE_STEPS = ("up", "scale-up", "follow")
_NOT_DONE = object()
# A resumed attempt: the gate again (the replaced node has not been checked), counters before it, its own logs.
RESUMED_STEPS = ("gate", "counters", "submit", "follow", "check")


class RunController:
    """One run on ``target`` (with ``ui`` for its lines): ``steps`` runs pipeline steps, ``run`` owns the end."""

    def __init__(self, target: Target, ui: Ui, keep_nodes: bool = False) -> None:
        self.target, self.ui, self.keep_nodes = target, ui, keep_nodes
        self.begun: list[str] = []
        self.results: list[PipelineResult] = []
        self.scale_down_line: str | None = None
        self.recoveries: list[Recovery] = []
        self.failure: Failure | None = None  # the failed job's, once told and not recovered from
        self.began = target.clock()  # the Ray logs written since then are the run's

    def steps(self, names: Sequence[str], target: Target | None = None) -> PipelineResult:
        """The steps ``names`` in order on ``target`` (default: the run's own), the first failure stopping them."""
        on = target or self.target

        def started(name: str) -> None:
            self.begun.append(name)
            self.ui.step_started(name)

        result = run_pipeline(steps.build(names, on), on.advise, started, self.ui.step_finished)
        self.results.append(result)
        return result

    def recovering(self, result: PipelineResult) -> PipelineResult:
        """After an infrastructure failure (automation/recovery.py): wait for the replaced node, then resume from the
        last checkpoint as a new job, within --max-recoveries and --recovery-minutes; an application failure stops."""
        target = self.target
        if not isinstance(target, aws.AwsTarget):
            return result
        deadline = target.clock() + target.run.recovery_minutes * 60
        while result.failed_step == "follow" and result.state.follow and result.state.follow.data:
            failed = result.state.follow.data
            if failed.status not in TERMINAL:  # the job server stopped answering: the job may go on
                return result
            if failed.stopped_for_timeout:  # the limit the user set: no failure of the cluster or the application
                target.note(f"job {failed.job_id} stopped at --timeout {target.job_timeout_s:g} s: not retried")
                return result
            began = target.clock()
            self.failure = failure = target.failure_of(failed)
            said = f"job {failed.job_id} ended {failed.status}: {failure.kind} failure, {failure.cause}"
            if failure.kind == APPLICATION:
                target.note(f"{said}; not retried (an application failure repeats on any node)")
                return result
            if len(self.recoveries) >= target.run.max_recoveries:
                target.note(f"{said}; stopped after {self.spent()} (--max-recoveries {target.run.max_recoveries})")
                return result
            target.note(f"{said} on node {failure.node or '?'}: waiting for its replacement, then resuming")
            try:
                waited = target.wait_for_replacement(deadline)
            except DriverError as e:
                target.note(f"{e}; stopped after {self.spent()} (--recovery-minutes {target.run.recovery_minutes:g})")
                return result
            target.set_aside_nccl_logs(len(self.recoveries) + 1)
            target.run = dataclasses.replace(target.run, resume=True)
            resumed, first = self.resume()
            hours = (target.clock() - began) / 3600
            self.recoveries.append(Recovery(failure, waited / 60, first, attempt_cost(target, hours)))
            self.failure = None
            target.note(f"recovered: {self.recoveries[-1].line()} ({self.recoveries[-1].cost})")
            result = joined(result, resumed)
        return result

    def resume(self) -> tuple[PipelineResult, int | None]:
        """The resumed attempt's steps and the first step its job showed (the log tail holds only its last)."""
        target, first = self.target, list[int]()
        shown = target.on_line

        def line(text: str) -> None:
            if not first and (step := last_step([text])) is not None:
                first.append(step)
            shown(text)

        target.on_line = line
        try:
            return self.steps(RESUMED_STEPS), first[0] if first else None
        finally:
            target.on_line = shown

    def spent(self) -> str:
        """What the recoveries so far spent: attempts, minutes waiting for nodes, and each attempt's cost."""
        minutes = sum(r.minutes for r in self.recoveries)
        costs = "; ".join(r.cost for r in self.recoveries) or "no cost"
        return f"{len(self.recoveries)} recovery attempt(s), {minutes:.0f} min waiting for nodes ({costs})"

    def run(self, work: Callable[[RunController], R], report: Callable[[R], int]) -> int:
        """``work`` on the run, then ``report`` of what it returned (its exit status); 130 after Ctrl-C, with what
        exists and the commands to resume. A step that raises goes through the same end, then propagates."""
        done: object = _NOT_DONE
        stopped: KeyboardInterrupt | None = None
        try:
            try:
                done = work(self)
            except KeyboardInterrupt as e:
                stopped = e
        finally:
            reporting = done is not _NOT_DONE
            logs = self.keep_logs(stopped)  # before the scale-down: the pods that hold the logs go with their nodes
            self.scale_down_line = self.scale_down(stopped)
            for line in (logs, self.scale_down_line):
                if line:  # in the report's notes when a report follows, else now
                    (self.target.notes.append if reporting else self.ui.note)(line)
            try:
                if reporting:
                    rc = report(done)  # type: ignore[arg-type]  # `done` is what `work` returned
                elif stopped is not None:
                    report_interrupt(stopped, self.target, self.ui)
                    rc = 130
            finally:
                self.target.close()
        return rc

    def keep_logs(self, stopped: KeyboardInterrupt | None) -> str | None:
        """On AWS, once a job was submitted or attached, before any scale-down: its logs to the run bucket
        (``AwsTarget.keep_logs``) and the line saying where; a copy that fails is one line, never the run's error."""
        target = self.target
        if not isinstance(target, aws.AwsTarget):
            return None
        jobs = [r.state.job.job_id for r in self.results if r.state.job is not None]
        if isinstance(stopped, StepInterrupted) and stopped.job_id:
            jobs.append(stopped.job_id)
        elif not jobs and {"submit", "follow"} & set(self.begun):  # interrupted in its first job: the run's id
            jobs.append(target.run_id)
        if not jobs:
            return None
        try:
            return target.keep_logs(list(dict.fromkeys(jobs)), self.began)
        except KeyboardInterrupt:
            return "logs not kept in the run bucket: interrupted while copying them"
        except Exception as e:  # noqa: BLE001 - the logs' copy must never replace the run's own outcome
            return f"logs not kept in the run bucket: {type(e).__name__}: {e}"

    def scale_down(self, stopped: KeyboardInterrupt | None) -> str | None:
        """On AWS, once a step of NODE_STEPS began: the GPU nodes to gpuIdleNodes (automation/scaling.py
        ``after_run``) and the line saying so, or kept with the line saying why; None when nothing was started."""
        target = self.target
        if not isinstance(target, aws.AwsTarget) or not set(NODE_STEPS) & set(self.begun):
            return None
        # A job of this run the job server has not said ended (--detach, a server that stopped answering) may run on.
        left = [
            s.job.job_id
            for s in (r.state for r in self.results)
            if s.job is not None and (s.follow is None or s.follow.data is None or s.follow.data.status not in TERMINAL)
        ]
        running = (stopped.job_id if isinstance(stopped, StepInterrupted) else None) or next(iter(left), None)
        if running is not None:
            return (
                f"GPU nodes kept: job {running} may still run on them; `{target.attach_command(running)}` follows it "
                "and scales them down when it ends"
            )
        return after_run(target, self.keep_nodes)


def attempt_cost(target: aws.AwsTarget, hours: float) -> str:
    """An attempt's wall time and what the cluster cost over it (automation/cost.py)."""
    per_hour = target.price().usd_per_hour
    cost = f"${per_hour * hours:.2f} at {per_hour:.2f} USD/h" if per_hour is not None else "cost unknown"
    return f"{hours * 60:.0f} min, {cost}"


def joined(first: PipelineResult, then: PipelineResult) -> PipelineResult:
    """One run of two pipelines: every step, the later's verdict, its state over the earlier's."""
    state = RunState(
        **{f.name: getattr(then.state, f.name) or getattr(first.state, f.name) for f in dataclasses.fields(RunState)}
    )
    return dataclasses.replace(then, steps=first.steps + then.steps, state=state)


def report_interrupt(e: KeyboardInterrupt, target: Target, ui: Ui) -> None:
    """Which step was interrupted, what exists now, and the commands to resume or tear down."""
    step = e.step if isinstance(e, StepInterrupted) else None
    advice = target.interrupted(e.advice if isinstance(e, StepInterrupted) else None)
    where = f"during step {step}" if step else "outside any step"
    ui.error(f"interrupted {where}{target.where()}: {advice.exists}")
    for cmd in advice.next_commands:
        ui.note(f"  {cmd}")
    if ui.json_mode:
        doc = {"ok": False, "error": f"interrupted {where}", "interrupted_step": step, "exists": advice.exists}
        ui.emit_json({**doc, "next": list(advice.next_commands)})
