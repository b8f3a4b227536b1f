"""The pipeline steps, one module each: preflight, stack (preview, up, destroy), verify, counters, submit,
attach, train (follow.py: the job followed to its end), check; and scale-up, automation/scaling.py's.

Each step is a function `(target, prior) -> StepResult` over the target interface
(automation.targets.Target); `STEPS` names them, `build` turns a target's step names into
pipeline steps and `run` runs them, always closing the target.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from automation import scaling
from automation.pipeline import PipelineResult, Prior, Step, StepResult, Timed, run_pipeline
from automation.steps import attach, check, counters, follow, preflight, stack, submit, verify

if TYPE_CHECKING:
    from automation.targets import Target

STEPS: dict[str, Callable[[Any, Prior], StepResult]] = {
    "preflight": preflight.run,
    "preview": stack.run_preview,
    "up": stack.run_up,
    "scale-up": scaling.scale_up,
    "start": stack.run_start,
    "verify": verify.run,
    "counters": counters.run,
    "submit": submit.run,
    "attach": attach.run,
    "train": follow.run,
    "check": check.run,
    "destroy": stack.run_destroy,
}


def build(names: Sequence[str], target: Target) -> list[Step]:
    """The steps `names`, in that order, each bound to `target`."""
    return [Step(name, partial(STEPS[name], target)) for name in names]


def run(
    names: Sequence[str],
    target: Target,
    on_start: Callable[[str], None] = lambda name: None,
    on_finish: Callable[[Timed], None] = lambda timed: None,
) -> PipelineResult:
    """Run the steps `names` on `target` and close it, also when a step raises or the run is interrupted."""
    try:
        return run_pipeline(build(names, target), target.advise, on_start, on_finish)
    finally:
        target.close()
