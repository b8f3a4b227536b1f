"""submit: the run's training job, queued on the cluster's own Ray job server; the step returns at once.

The target says which job (`train_job`: the stack's or the local preset, made durable) and queues it
(`submit_job`: `ray job submit --no-wait` in the head pod on AWS, the job server on 127.0.0.1 locally;
automation/ray_head.py). The job server owns the job from then on; `follow` (steps/follow.py) follows it.
"""

from __future__ import annotations

from automation.pipeline import Prior, StepResult, SubmittedJob
from automation.targets import Target


def run(target: Target, prior: Prior) -> StepResult[SubmittedJob]:
    """submit: the target's training job, queued on its job server."""
    job = target.submit_job(target.train_job())
    attach = target.attach_command(job.job_id)
    follow = f"; it runs on without this terminal, follow it from any machine: {attach}" if attach else ""
    return StepResult("submit", "pass", f"job {job.job_id} submitted{follow}", data=job)
