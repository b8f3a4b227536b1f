"""The pipeline steps, one module each (stack_steps.py: preview, up, destroy, start; scale-up: automation/scaling.py),
each a function `(target, prior) -> StepResult`; `build` binds a target's step names for the run controller."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from automation import scaling
from automation.pipeline import Prior, Step, StepResult
from automation.steps import attach, check, counters, follow, gate, preflight, stack_steps, submit, verify

if TYPE_CHECKING:
    from automation.targets import Target

STEPS: dict[str, Callable[[Any, Prior], StepResult]] = {
    "preflight": preflight.run,
    "preview": stack_steps.run_preview,
    "up": stack_steps.run_up,
    "scale-up": scaling.scale_up,
    "start": stack_steps.run_start,
    "verify": verify.run,
    "gate": gate.run,
    "counters": counters.run,
    "submit": submit.run,
    "attach": attach.run,
    "follow": follow.run,
    "check": check.run,
    "destroy": stack_steps.run_destroy,
}


def build(names: Sequence[str], target: Target) -> list[Step]:
    """The steps `names`, in that order, each bound to `target`."""
    return [Step(name, partial(STEPS[name], target)) for name in names]
