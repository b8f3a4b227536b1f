"""train: the submitted job followed to its end by asking the job server, its result what the server says.

Each poll is a short call (automation/ray_head.py's `follow_job`), so a dropped connection or an expired token only
delays the output. Ctrl-C leaves the job running unless the user, asked on a terminal, says to stop it (the run then
names `automation attach`). A job with no step line past its hang bound (automation/hang.py) is stopped and fails.
"""

from __future__ import annotations

import dataclasses

from automation import hang
from automation.errors import DriverError
from automation.pipeline import Advice, Prior, StepInterrupted, StepResult, SubmittedJob, TrainOutcome
from automation.ray_head import UNKNOWN, FollowEnd, JobState, follow_job, is_step_line, job_summary, outcome_of
from automation.targets import Target
from workloads.config import runs_root

LOG_TAIL_LINES = 40
STEP = "follow"


def train_result(outcome: TrainOutcome) -> StepResult[TrainOutcome]:
    """Pass only for a SUCCEEDED job that wrote its summary; a failure carries the log tail."""
    if outcome.status != "SUCCEEDED":
        tail = "\n".join(outcome.log_tail[-LOG_TAIL_LINES:])
        said = f"job {outcome.job_id} ended {outcome.status}; last log lines:\n{tail}"
        return StepResult(STEP, "fail", said, data=outcome)
    if outcome.summary is None:
        at = outcome.job.summary_json if outcome.job else "?"
        return StepResult(STEP, "fail", f"job {outcome.job_id} SUCCEEDED but wrote no summary at {at}", data=outcome)
    s = outcome.summary
    loss = f"loss {_num(s.loss_first, '.4f')} -> {_num(s.loss_last, '.4f')}"
    said = f"{s.steps} steps on {s.world_size} workers, {loss}, {_num(s.tokens_per_s, ',.0f')} tokens/s"
    return StepResult(STEP, "pass", f"job {outcome.job_id} SUCCEEDED: {said}", data=outcome)


def _num(v: object, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "n/a"


def left(target: Target, job: SubmittedJob) -> StepInterrupted | None:
    """After Ctrl-C: on a terminal, ask whether to stop the job (default: no); it goes on unless told.
    None where the job server ends with the run (local): the interrupt goes on as any other."""
    attach = target.attach_command(job.job_id)
    if not attach:
        return None
    answer = target.ask_stop(f"stop job {job.job_id} on the cluster?")
    if answer:
        try:
            target.jobs().stop_job(job.job_id)
            end = follow_job(target, job.job_id)  # until the job server says it ended: then the nodes may go
            return StepInterrupted(STEP, Advice(f"job {job.job_id} was stopped: it ended {end.state.status}", ()))
        except DriverError as e:
            asked = f"`ray job stop` got no answer: {e}"
    else:
        asked = "kept (the default)" if answer is False else "not a terminal, so not asked: the job goes on"
    exists = f"job {job.job_id} runs on on the cluster ({asked}); the GPU nodes stay up for it"
    return StepInterrupted(STEP, Advice(exists, (f"follow it again from any machine: {attach}",)), job.job_id)


def run(target: Target, prior: Prior) -> StepResult[TrainOutcome]:
    """train: the submitted job followed to its end; what the job server says it ended as."""
    job = prior.job
    if job is None:
        raise DriverError("`follow` follows a submitted job: run it after `submit` or `attach`")
    first_step: list[float] = []  # when this command saw the job's first step line: the start's last phase

    def line(text: str) -> None:
        if not first_step and is_step_line(text):
            first_step.append(target.clock())
        target.on_line(text)

    try:
        end = follow_job(target, job.job_id, line)
    except KeyboardInterrupt:
        interrupted = left(target, job)
        if interrupted is None:
            raise
        raise interrupted from None
    except DriverError as e:  # the job server stopped answering: its job goes on, the outcome is unknown
        attach = target.attach_command(job.job_id)
        unknown = FollowEnd(JobState(UNKNOWN, str(e)), ())
        outcome = outcome_of(unknown, job.train_cfg, None)
        return StepResult(STEP, "fail", f"{e}; follow it again: {attach}" if attach else str(e), data=outcome)
    summary = job_summary(target.jobs(), job.train_cfg) if end.state.status == "SUCCEEDED" else None
    # Read now, while the pods and GPU nodes still exist (`run` may idle the nodes before the report). A job
    # this command did not submit (`attach`) was seen starting by another: its first step time is not known.
    seen = first_step[0] if first_step and prior.submit is not None else None
    try:  # the start's phases as the target reads them (automation/start_phases.py)
        phases = target.start_phases(seen)
    except DriverError as e:  # the phases are a measurement: a cluster that cannot be read fails no job
        phases = None
        target.note(f"the start's phases were not read: {e}")
    outcome = dataclasses.replace(outcome_of(end, job.train_cfg, summary), start=phases)
    result = train_result(outcome)
    if end.hang is not None:
        kept = hang.write(runs_root() / job.train_cfg.run_id, end.hang)
        said = f"job {job.job_id} hung ({end.hang['late']}) and was stopped; {end.hang['verdict']} (evidence: {kept})"
        return StepResult(STEP, "fail", said, data=result.data)
    if end.stopped_for_timeout:
        said = f"job {job.job_id} was stopped by --timeout {target.job_timeout_s:g} s, its time limit (`ray job stop`)"
        return StepResult(STEP, "fail", f"{said}; {result.summary}", data=result.data)
    return result
