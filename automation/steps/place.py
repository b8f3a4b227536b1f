"""A step whose work differs by place: the AWS target's and the local target's, picked by the target's class."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from automation.targets.aws import AwsTarget

if TYPE_CHECKING:
    from automation.pipeline import Prior, StepResult
    from automation.targets import Target
    from automation.targets.local import LocalTarget


def by_place(
    doc: str,
    aws: Callable[[AwsTarget, Prior], StepResult],
    local: Callable[[LocalTarget, Prior], StepResult],
) -> Callable[[Target, Prior], StepResult]:
    """A step that runs `aws` on an AwsTarget and `local` on a LocalTarget (Target is the union of the two)."""

    def run(target: Target, prior: Prior) -> StepResult:
        return aws(target, prior) if isinstance(target, AwsTarget) else local(target, prior)

    run.__doc__ = doc
    return run
