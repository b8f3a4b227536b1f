"""train: the run's training job, submitted to the cluster's own Ray job server and followed to the end.

The target says which job (`train_args`: the stack's or the local preset, made durable) and submits it
(`submit`: through the head pod on AWS, to the job server on 127.0.0.1 locally; automation/ray_head.py);
this step passes only a job that SUCCEEDED and wrote its summary.
"""

from __future__ import annotations

from typing import Any

from automation.pipeline import Prior, StepResult, TrainOutcome
from automation.targets import Target

LOG_TAIL_LINES = 40


def train_result(outcome: TrainOutcome) -> StepResult:
    """Pass only for a SUCCEEDED job that wrote its summary; a failure carries the log tail."""
    if outcome.status != "SUCCEEDED":
        tail = "\n".join(outcome.log_tail[-LOG_TAIL_LINES:])
        return StepResult(
            "train", "fail", f"job {outcome.job_id} ended {outcome.status}; last log lines:\n{tail}", data=outcome
        )
    if outcome.summary is None:
        return StepResult(
            "train",
            "fail",
            f"job {outcome.job_id} SUCCEEDED but wrote no summary at "
            f"{outcome.args.summary_json if outcome.args else '?'}",
            data=outcome,
        )
    s = outcome.summary
    return StepResult(
        "train",
        "pass",
        f"job {outcome.job_id} SUCCEEDED: {s.get('steps')} steps on {s.get('world_size')} workers, "
        f"loss {_num(s.get('loss_first'), '.4f')} -> {_num(s.get('loss_last'), '.4f')}, "
        f"{_num(s.get('tokens_per_s'), ',.0f')} tokens/s",
        data=outcome,
    )


def _num(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "n/a"


def run(target: Target, prior: Prior) -> StepResult:
    """train: the target's training job, submitted to its job server and followed to the end."""
    return train_result(target.submit(target.train_args()))
