"""The run controller: the one owner of a run on a target, from its scale-up to its close.

Every command that starts work on the GPU nodes (`run`, `attach`, `train`, `bench` and its two legs, `bench
--collectives --stack`, `drill --stack`) hands its work to a ``RunController``. On AWS the work begins with the
`scale-up` step (the idle guard's lease taken, the price asked about, the GPU node group at gpuNodeCount:
automation/scaling.py), then the command's steps; whatever way it ends (done, a failed or raised step, Ctrl-C),
one ``finally`` then, in order: decides the scale-down (never under a job the job server has not said ended, nor
under one it cannot be asked about; --keep-nodes keeps them), writes the run's files and report, and closes the
target.

Anchored on SkyPilot's managed-jobs controller (skypilot-org/skypilot, sky/jobs/controller.py: ``JobController``
"controls the lifecycle of a single managed job" and its cleanup is its own method, run however the job ended)
and on Ray Train v2's ``TrainController`` (ray-project/ray, python/ray/train/v2/_internal/execution/controller/
controller.py: one object drives the run through its states to the end).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from automation import steps
from automation.pipeline import JobLeftRunning, PipelineResult, StepInterrupted, run_pipeline
from automation.ray_head import TERMINAL
from automation.scaling import after_run
from automation.targets import Target, aws
from automation.ui import Output, Ui

R = TypeVar("R")
# The steps that may leave GPU nodes up for this run: `up` makes the node group, `scale-up` grows it, `follow`
# follows a job on it (`attach`). From the start of any of them on, the end of the run decides the scale-down.
NODE_STEPS = ("up", "scale-up", "follow")
_NOT_DONE = object()


class RunController:
    """One run on ``target`` (with ``ui`` for its lines): ``steps`` runs pipeline steps, ``run`` owns the end."""

    def __init__(self, target: Target, ui: Ui, keep_nodes: bool = False) -> None:
        self.target, self.ui, self.keep_nodes = target, ui, keep_nodes
        self.begun: list[str] = []
        self.results: list[PipelineResult] = []
        self.scale_down_line: str | None = None

    def steps(self, names: Sequence[str], target: Target | None = None) -> PipelineResult:
        """The steps ``names`` in order on ``target`` (default: the run's own), the first failure stopping them."""
        on = target or self.target

        def started(name: str) -> None:
            self.begun.append(name)
            self.ui.step_started(name)

        result = run_pipeline(steps.build(names, on), on.advise, started, self.ui.step_finished)
        self.results.append(result)
        return result

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
            self.scale_down_line = self.scale_down(stopped)
            if self.scale_down_line:  # in the report's notes when a report follows, else now
                (self.target.notes.append if reporting else self.ui.note)(self.scale_down_line)
            try:
                if reporting:
                    rc = report(done)  # type: ignore[arg-type]  # `done` is what `work` returned
                elif stopped is not None:
                    report_interrupt(stopped, self.target, self.ui)
                    rc = 130
            finally:
                self.target.close()
        return rc

    def scale_down(self, stopped: KeyboardInterrupt | None) -> str | None:
        """On AWS, once a step of NODE_STEPS began: the GPU nodes to gpuIdleNodes (automation/scaling.py
        ``after_run``) and the line saying so, or kept with the line saying why; None when nothing was started."""
        target = self.target
        if not isinstance(target, aws.AwsTarget) or not set(NODE_STEPS) & set(self.begun):
            return None
        running = stopped.job_id if isinstance(stopped, JobLeftRunning) else self.job_left_running()
        if running is not None:
            return (
                f"GPU nodes kept: job {running} may still run on them; `{target.attach_command(running)}` follows it "
                "and scales them down when it ends"
            )
        return after_run(target, self.keep_nodes)

    def job_left_running(self) -> str | None:
        """The job this run submitted or attached to, when the job server has not said it ended (--detach, a job
        server that stopped answering); None when it ended or none was submitted."""
        for state in (result.state for result in self.results):
            followed = state.follow.data if state.follow is not None else None
            if state.job is not None and (followed is None or followed.status not in TERMINAL):
                return state.job.job_id
        return None


def report_interrupt(e: KeyboardInterrupt, target: Target, ui: Output) -> None:
    """Which step was interrupted, what exists now, and the commands to resume or tear down."""
    step = e.step if isinstance(e, StepInterrupted) else None
    advice = target.interrupted(e.advice if isinstance(e, StepInterrupted) else None)
    where = f"during step {step}" if step else "outside any step"
    ui.error(f"interrupted {where}{target.where()}: {advice.exists}")
    for cmd in advice.next_commands:
        ui.note(f"  {cmd}")
    if ui.json_mode:
        ui.emit_json(
            {
                "ok": False,
                "error": f"interrupted {where}",
                "interrupted_step": step,
                "exists": advice.exists,
                "next": list(advice.next_commands),
            }
        )
