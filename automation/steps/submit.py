"""submit: the run's training job (the target's `train_job`), queued on the cluster's own Ray job server (`submit_job`,
automation/ray_head.py); the step returns at once: the job server owns the job, `follow` follows it."""

from __future__ import annotations

from automation.pipeline import Prior, StepResult, SubmittedJob
from automation.targets import Target


def run(target: Target, prior: Prior) -> StepResult[SubmittedJob]:
    """submit: the target's training job, queued on its job server."""
    job = target.submit_job(target.train_job())
    attach = target.attach_command(job.job_id)
    follow = f"; it runs on without this terminal, follow it from any machine: {attach}" if attach else ""
    return StepResult("submit", "pass", f"job {job.job_id} submitted{follow}", data=job)
