"""stack: preview, up and destroy through the Pulumi Automation API on the project directory.

The stack object is passed in: the real one comes from `open_stack` (LocalWorkspace,
create-or-select), tests hand in an object with the same methods. Engine events become progress
lines; when `up` fails, the cause the node group's Auto Scaling group reports is added to the error.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from automation.errors import DriverError
from automation.pipeline import StepResult

PULUMI_INSTALL_URL = "https://www.pulumi.com/docs/install/"
PULUMI_MISSING = (
    "the pulumi CLI is not installed (the Automation API runs it): install it from "
    f"{PULUMI_INSTALL_URL} (curl -fsSL https://get.pulumi.com | sh), log in (pulumi login), then run this again; "
    "`python -m automation render --stack NAME` works without it, and `python -m automation run` "
    "(no --stack) runs the same job locally"
)


class StackLike(Protocol):
    """The part of `pulumi.automation.Stack` the driver uses."""

    name: str

    def preview(self, on_event: Callable[[Any], None] | None = None) -> Any: ...
    def up(self, on_event: Callable[[Any], None] | None = None) -> Any: ...
    def destroy(self, on_event: Callable[[Any], None] | None = None) -> Any: ...
    def outputs(self) -> Mapping[str, Any]: ...
    def set_config(self, key: str, value: Any, *, path: bool = False) -> None: ...


def open_stack(stack_name: str, project_dir: Path) -> StackLike:
    """Create or select `stack_name` of the Pulumi project in `project_dir`; DriverError without the CLI."""
    if shutil.which("pulumi") is None:
        raise DriverError(PULUMI_MISSING, exit_code=2)
    from pulumi import automation as auto

    try:
        return auto.create_or_select_stack(stack_name=stack_name, work_dir=str(project_dir))
    except FileNotFoundError:
        raise DriverError(PULUMI_MISSING, exit_code=2) from None
    except auto.CommandError as e:
        raise DriverError(f"pulumi could not create or select stack {stack_name!r}: {_last_lines(str(e))}") from None


@dataclass(frozen=True)
class ChangeSummary:
    """Resource counts by operation (create, update, delete, same, ...) and the stack outputs after it."""

    changes: Mapping[str, int]
    outputs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def costs_money(self) -> bool:
        return any(self.changes.get(op, 0) for op in ("create", "replace", "create-replacement", "update"))

    def line(self) -> str:
        shown = {k: v for k, v in sorted(self.changes.items()) if v}
        return ", ".join(f"{k} {v}" for k, v in shown.items()) or "no changes"

    def to_dict(self) -> dict[str, Any]:
        return {
            "changes": dict(self.changes),
            "outputs": {k: ("[secret]" if k in SECRET_OUTPUTS else v) for k, v in self.outputs.items()},
        }


SECRET_OUTPUTS = frozenset({"kubeconfig"})


def describe_event(event: Any) -> str | None:
    """One progress line for an engine event, or None for events not worth a line."""
    if getattr(event, "resource_pre_event", None):
        m = event.resource_pre_event.metadata
        if str(getattr(m.op, "value", m.op)) == "same":
            return None
        return f"{getattr(m.op, 'value', m.op)} {m.type} {m.urn.rsplit('::', 1)[-1]}"
    if getattr(event, "res_op_failed_event", None):
        m = event.res_op_failed_event.metadata
        return f"failed {m.type} {m.urn.rsplit('::', 1)[-1]}"
    if getattr(event, "diagnostic_event", None) and event.diagnostic_event.severity == "error":
        return f"error: {event.diagnostic_event.message.strip()}"
    return None


def outputs_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Stack outputs as plain values (Automation API OutputValue objects carry `.value`)."""
    return {k: getattr(v, "value", v) for k, v in raw.items()}


def preview(stack: StackLike, on_line: Callable[[str], None] = lambda s: None) -> StepResult:
    summary = _run(stack, "preview", on_line)
    changes = dict(getattr(summary, "change_summary", None) or {})
    cs = ChangeSummary(_ops(changes))
    return StepResult("preview", "pass", f"stack {stack.name}: {cs.line()}", data=cs)


def up(
    stack: StackLike, on_line: Callable[[str], None] = lambda s: None, explain_failure: Callable[[], str] | None = None
) -> StepResult:
    """`stack.up`; on failure the error carries `explain_failure()` (the node group's scaling activity)."""
    try:
        res = _run(stack, "up", on_line)
    except DriverError as e:
        cause = ""
        if explain_failure is not None:
            try:
                cause = explain_failure()
            except Exception as inner:  # noqa: BLE001 - the explanation is best effort, the failure stands
                cause = f"(could not read the node group's cause: {type(inner).__name__}: {inner})"
        raise DriverError(f"{e}" + (f"; {cause}" if cause else "")) from None
    changes = dict(getattr(getattr(res, "summary", None), "resource_changes", None) or {})
    cs = ChangeSummary(_ops(changes), outputs_dict(getattr(res, "outputs", None) or {}))
    return StepResult("up", "pass", f"stack {stack.name}: {cs.line()}", data=cs)


def destroy(stack: StackLike, on_line: Callable[[str], None] = lambda s: None) -> StepResult:
    res = _run(stack, "destroy", on_line)
    changes = dict(getattr(getattr(res, "summary", None), "resource_changes", None) or {})
    cs = ChangeSummary(_ops(changes))
    return StepResult("destroy", "pass", f"stack {stack.name}: {cs.line()}", data=cs)


def _ops(changes: Mapping[str, Any]) -> dict[str, int]:
    return {str(getattr(k, "value", k)): int(v) for k, v in changes.items()}


def _run(stack: StackLike, op: str, on_line: Callable[[str], None]) -> Any:
    def on_event(ev: Any) -> None:
        line = describe_event(ev)
        if line:
            on_line(line)

    from pulumi.automation import CommandError

    try:
        return getattr(stack, op)(on_event=on_event)
    except CommandError as e:
        raise DriverError(f"pulumi {op} of stack {stack.name} failed: {_last_lines(str(e))}") from None
    except FileNotFoundError:
        raise DriverError(PULUMI_MISSING, exit_code=2) from None


def _last_lines(text: str, n: int = 6) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])


# ---- why a node group did not come up ---------------------------------------------------------------
def nodegroup_failure_cause(eks: Any, autoscaling: Any, cluster_name: str) -> str:
    """The health issues of each node group that is not ACTIVE and its ASG's last scaling activity.

    CREATE_FAILED alone does not say why; the Auto Scaling group's last activity does (for example
    "InsufficientInstanceCapacity" or "VcpuLimitExceeded").
    """
    parts = []
    for name in eks.list_nodegroups(clusterName=cluster_name).get("nodegroups", []):
        ng = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=name)["nodegroup"]
        issues = ng.get("health", {}).get("issues", [])
        if ng.get("status") == "ACTIVE" and not issues:
            continue
        text = f"node group {name} is {ng.get('status')}"
        if issues:
            text += ": " + "; ".join(f"{i.get('code')}: {i.get('message')}" for i in issues)
        for asg in ng.get("resources", {}).get("autoScalingGroups", []):
            acts = autoscaling.describe_scaling_activities(AutoScalingGroupName=asg["name"], MaxRecords=1)["Activities"]
            if acts:
                a = acts[0]
                text += (
                    f"; last scaling activity of {asg['name']} ({a.get('StatusCode')}): "
                    f"{a.get('StatusMessage') or a.get('Description')}"
                )
        parts.append(text)
    return " | ".join(parts) or f"no node group of cluster {cluster_name} reports a problem"


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

    def watch_up(self) -> AbstractContextManager:
        """Watches the cloud while `up` runs (a GPU node group stuck for want of capacity: automation/capacity.py)."""
        ...

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
    with target.watch_up():
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
