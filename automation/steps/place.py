"""A step whose work differs by place: the AWS target's and the local target's, picked by the target's class."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from automation.targets.aws import AwsTarget
from automation.targets.local import LocalTarget

if TYPE_CHECKING:
    from automation.pipeline import Prior, StepResult
    from automation.targets import Target


def by_place(
    name: str,
    doc: str,
    aws: Callable[[AwsTarget, Prior], StepResult],
    local: Callable[[LocalTarget, Prior], StepResult],
) -> Callable[[Target, Prior], StepResult]:
    """The step `name`: `aws` on an AwsTarget, `local` on a LocalTarget, a TypeError on any other target."""

    def run(target: Target, prior: Prior) -> StepResult:
        if isinstance(target, AwsTarget):
            return aws(target, prior)
        if isinstance(target, LocalTarget):
            return local(target, prior)
        raise TypeError(f"no {name} for a target of type {type(target).__name__}")

    run.__name__ = run.__qualname__ = "run"
    run.__doc__ = doc
    return run
