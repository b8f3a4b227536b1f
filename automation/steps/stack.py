"""preview, up, destroy (the AWS target's stack) and start (the local target's Ray head): the steps that
make or unmake the place the job runs. The Pulumi calls are automation/pulumi_stack.py's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Protocol

from automation.errors import DriverError
from automation.pipeline import ChangeSummary, StepResult
from automation.pulumi_stack import StackLike, destroy, preview, up


# ---- the steps ---------------------------------------------------------------------------------------
class StackTarget(Protocol):
    """What preview, up and destroy need from a target that has a Pulumi stack (the AWS one)."""

    on_progress: Callable[[str], None]

    @property
    def stack_name(self) -> str | None: ...

    def stack(self) -> StackLike: ...

    def before_change(self, prior: Mapping[str, StepResult]) -> None:
        """Settle what the program needs before preview or up (a preflight-chosen AZ)."""
        ...

    def up_question(self, changes: str) -> str:
        """The question asked before `up` makes `changes` that cost money."""
        ...

    def confirm(self, question: str) -> bool:
        """True to go ahead (always with --yes)."""
        ...

    def explain_up_failure(self) -> str: ...

    def stack_changed(self, summary: ChangeSummary) -> None:
        """Called after a successful `up` with its outputs."""
        ...

    def kept_on_destroy(self) -> str | None:
        """What `destroy` will leave behind on purpose (the run bucket), read while the stack still exists."""
        ...


class ClusterTarget(Protocol):
    """A target whose cluster lives only for one run (the local one): `start` is its `up`."""

    def start(self, prior: Mapping[str, StepResult]) -> StepResult: ...


def run_preview(target: StackTarget, prior: Mapping[str, StepResult]) -> StepResult:
    target.before_change(prior)
    return preview(target.stack(), target.on_progress)


def run_up(target: StackTarget, prior: Mapping[str, StepResult]) -> StepResult:
    """`up`, after asking unless preview saw nothing that costs money; DriverError when declined."""
    target.before_change(prior)
    previewed = prior.get("preview")
    summary = previewed.data if previewed is not None else None
    if summary is None or summary.costs_money:
        question = target.up_question(summary.line() if summary is not None else "changes not previewed")
        if not target.confirm(question):
            raise DriverError("not confirmed: nothing was changed (pass --yes to skip the question)")
    result = up(target.stack(), target.on_progress, explain_failure=target.explain_up_failure)
    if result.data is not None:
        target.stack_changed(result.data)
    return result


def run_destroy(target: StackTarget, prior: Mapping[str, StepResult]) -> StepResult:
    if not target.confirm(f"destroy every resource of stack {target.stack_name}?"):
        raise DriverError("not confirmed: nothing was deleted")
    kept = target.kept_on_destroy()  # before: a destroyed stack has no outputs left
    done = destroy(target.stack(), target.on_progress)
    return dataclasses.replace(done, summary=f"{done.summary}; {kept}") if kept else done


def run_start(target: ClusterTarget, prior: Mapping[str, StepResult]) -> StepResult:
    return target.start(prior)
