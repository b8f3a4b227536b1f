"""attach: the job of a run that was left (`run --detach`, a closed laptop, Ctrl-C), found on the job server;
`follow` then follows it and `check` reads its NCCL logs, as if `run` had stayed."""

from __future__ import annotations

from automation.pipeline import Prior, StepResult, SubmittedJob
from automation.targets import Target


def run(target: Target, prior: Prior) -> StepResult[SubmittedJob]:
    """attach: the job the command names (else the newest submitted), and what the job server says of it."""
    job = target.find_job()
    state = target.jobs().job_status(job.job_id)
    said = f": {state.message}" if state.message else ""
    return StepResult(
        "attach", "pass", f"job {job.job_id} of run {job.train_cfg.run_id} is {state.status}{said}", data=job
    )
