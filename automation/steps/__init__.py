"""The pipeline steps, one module each: preflight, stack (preview, up, destroy), verify, gate, counters, submit,
attach, train (follow.py: the job followed to its end), check; and scale-up, automation/scaling.py's.

Each step is a function `(target, prior) -> StepResult` over the target interface
(automation.targets.Target); `STEPS` names them and `build` turns a target's step names into
pipeline steps, which a run controller runs (automation/run_controller.py).
"""

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
