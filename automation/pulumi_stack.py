"""The Pulumi stack through the Automation API on the project directory: preview, up, destroy, outputs.

The stack object is passed in: the real one comes from `select_stack` (LocalWorkspace,
create-or-select), tests hand in an object with the same methods. Engine events become progress
lines; when `up` fails, the cause the node group's Auto Scaling group reports is added to the error.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from pulumi import automation as auto

from automation.aws_clients import AutoScaling, ClientFactory, Eks
from automation.errors import DriverError
from automation.pipeline import ChangeSummary, StepResult

PULUMI_MISSING = (
    "the pulumi CLI is not installed (the Automation API runs it): install it from https://www.pulumi.com/docs/install/"
    " (curl -fsSL https://get.pulumi.com | sh), log in (pulumi login), then run this again; "
    "`python -m automation render --stack NAME` works without it, and `python -m automation run` "
    "(no --stack) runs the same job locally"
)


OnEvent = Callable[[auto.EngineEvent], None]


class StackLike(Protocol):
    """The part of `pulumi.automation.Stack` the driver uses."""

    name: str

    def preview(self, *, on_event: OnEvent | None = None) -> auto.PreviewResult: ...
    def up(self, *, on_event: OnEvent | None = None) -> auto.UpResult: ...
    def destroy(self, *, on_event: OnEvent | None = None) -> auto.DestroyResult: ...
    def outputs(self) -> Mapping[str, object]: ...
    def set_config(self, key: str, value: auto.ConfigValue, *, path: bool = False) -> None: ...
    def remove_config(self, key: str, *, path: bool = False) -> None: ...


def select_stack(stack_name: str, project_dir: Path) -> StackLike:
    """Create or select `stack_name` of the Pulumi project in `project_dir`; DriverError without the CLI."""
    if shutil.which("pulumi") is None:
        raise DriverError(PULUMI_MISSING, exit_code=2)
    try:
        return auto.create_or_select_stack(stack_name=stack_name, work_dir=str(project_dir))
    except FileNotFoundError:
        raise DriverError(PULUMI_MISSING, exit_code=2) from None
    except auto.CommandError as e:
        raise DriverError(f"pulumi could not create or select stack {stack_name!r}: {_last_lines(str(e))}") from None


def describe_event(event: auto.EngineEvent) -> str | None:
    """One progress line for an engine event, or None for events not worth a line."""
    if event.resource_pre_event:
        m = event.resource_pre_event.metadata
        op = str(getattr(m.op, "value", m.op))
        return None if op == "same" else f"{op} {m.type} {m.urn.rsplit('::', 1)[-1]}"
    if event.res_op_failed_event:
        m = event.res_op_failed_event.metadata
        return f"failed {m.type} {m.urn.rsplit('::', 1)[-1]}"
    if event.diagnostic_event and event.diagnostic_event.severity == "error":
        return f"error: {event.diagnostic_event.message.strip()}"
    return None


def outputs_dict(raw: Mapping[str, object]) -> dict[str, object]:
    """Stack outputs as plain values (Automation API OutputValue objects carry `.value`)."""
    return {k: getattr(v, "value", v) for k, v in raw.items()}


def up(stack: StackLike, on_line: Callable[[str], None], client: ClientFactory, cluster_name: str) -> StepResult:
    """`stack.up`; on failure the error carries the node groups' cause (``nodegroup_failure_cause``)."""
    try:
        return run_op(stack, "up", on_line)
    except DriverError as e:
        try:
            cause = nodegroup_failure_cause(client("eks"), client("autoscaling"), cluster_name)
        except Exception as inner:  # noqa: BLE001 - the explanation is best effort, the failure stands
            cause = f"(could not read the node group's cause: {type(inner).__name__}: {inner})"
        raise DriverError(f"{e}; {cause}") from None


def run_op(stack: StackLike, op: str, on_line: Callable[[str], None]) -> StepResult:
    """`pulumi <op>` (preview, up, destroy), each engine event worth it said; the step's row from the engine's
    resource counts by operation (enum keys) and, after `up`, the outputs."""

    def on_event(ev: auto.EngineEvent) -> None:
        if line := describe_event(ev):
            on_line(line)

    try:
        res = getattr(stack, op)(on_event=on_event)
    except auto.CommandError as e:
        raise DriverError(f"pulumi {op} of stack {stack.name} failed: {_last_lines(str(e))}") from None
    except FileNotFoundError:
        raise DriverError(PULUMI_MISSING, exit_code=2) from None
    summary = getattr(res, "summary", None)
    changes = getattr(res, "change_summary", None) if op == "preview" else getattr(summary, "resource_changes", None)
    counts = {str(getattr(k, "value", k)): int(v) for k, v in (changes or {}).items()}
    cs = ChangeSummary(counts, outputs_dict(getattr(res, "outputs", None) or {}))
    return StepResult(op, "pass", f"stack {stack.name}: {cs.line()}", data=cs)


def _last_lines(text: str, n: int = 6) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])


# ---- why a node group did not come up ---------------------------------------------------------------
def nodegroup_failure_cause(eks: Eks, autoscaling: AutoScaling, cluster_name: str) -> str:
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
            for a in acts[:1]:
                text += (
                    f"; last scaling activity of {asg['name']} ({a.get('StatusCode')}): "
                    f"{a.get('StatusMessage') or a.get('Description')}"
                )
        parts.append(text)
    return " | ".join(parts) or f"no node group of cluster {cluster_name} reports a problem"
