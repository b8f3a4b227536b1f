"""Why a followed job failed, told from what the cluster shows, and the bounded wait for its nodes to come back.

INFRASTRUCTURE is a fault of the place the job ran on: a GPU node gone or not Ready, an EKS node monitoring agent
condition False, a worker pod evicted. Anything else is APPLICATION and is not retried (a traceback, CUDA out of
memory, a container OOMKilled at its own limit, or nothing seen: a retry on a guess bills for the same failure again).

Sources: the agent sets one NodeCondition per category (KernelReady, NetworkingReady, StorageReady,
AcceleratedHardwareReady; aws/eks-node-monitoring-agent v1.7.0 README, "Overview"); GPU Xid faults come as
AcceleratedHardwareReady False (its pkg/reasons/reasons.yaml, NvidiaXID%dError). Whether an EFA fault surfaces as
NetworkingReady False (the README names "interface problems") is not stated there: an EFA fault the agent does not
flag is told as APPLICATION (no retry). A pod the kubelet evicts under node pressure is phase Failed with reason
"Evicted" (kubernetes.io docs, "Node-pressure Eviction"). Ray's own wording for a lost node is not relied on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from automation.errors import DriverError

INFRASTRUCTURE, APPLICATION = "infrastructure", "application"
# The agent's conditions whose False means the node cannot train (KernelReady and StorageReady faults stop a job too).
AGENT_CONDITIONS = ("AcceleratedHardwareReady", "NetworkingReady", "KernelReady", "StorageReady")
MAX_RECOVERIES = 2  # attempts after the first: a fault that repeats on every new node stops, not loops
RECOVERY_MINUTES = 45  # the whole recovery's wall time: EKS node repair replaces a node in minutes, not hours
POLL_S = 10.0  # as automation/scaling.py's waits on nodes (it imports the AWS target, which imports this module)
_STEP = re.compile(r"\[train\] step (\d+)/(\d+)")
_APPLICATION = (
    ("CUDA out of memory", re.compile(r"CUDA out of memory|OutOfMemoryError")),
    ("a Python exception", re.compile(r"^Traceback \(most recent call last\)", re.M)),
)


@dataclass(frozen=True)
class Failure:
    """A failed job's class and what showed it: the node, the condition (or cause) and the last step seen."""

    kind: str
    cause: str
    node: str | None = None
    step: int | None = None


@dataclass(frozen=True)
class Recovery:
    """One recovery: the failure, minutes until the nodes were back, the first step the resumed job ran (None: it
    showed none), and the attempt's cost line."""

    failure: Failure
    minutes: float
    resumed_at: int | None
    cost: str

    def line(self) -> str:
        """node X, condition Y at step N, replaced in M min, K steps lost."""
        f = self.failure
        at = f"step {f.step}" if f.step is not None else "an unknown step"
        lost = "steps lost unknown"
        if f.step is not None and self.resumed_at is not None:
            lost = f"{f.step - self.resumed_at + 1} steps lost"
        return f"node {f.node or '?'}, {f.cause} at {at}, replaced in {self.minutes:.0f} min, {lost}"


def last_step(lines: Sequence[str], first: bool = False) -> int | None:
    """The last (or first) `[train] step i/N` of the job's log lines (workloads/loop.py prints them)."""
    steps = [int(m.group(1)) for line in lines if (m := _STEP.search(line))]
    return (steps[0] if first else steps[-1]) if steps else None


def _false(node: dict, types: Sequence[str]) -> str | None:
    """ "condition TYPE STATUS (REASON)" of the first of ``types`` that is not True, else None."""
    for c in node.get("status", {}).get("conditions", []):
        if c.get("type") in types and c.get("status") != "True":
            return f"condition {c['type']} {c.get('status')} ({c.get('reason') or 'no reason'})"
    return None


def _ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions", [])
    )


def classify(nodes: list[dict], workers: list[dict], want_nodes: int, log: Sequence[str]) -> Failure:
    """The class of a failed job from the GPU nodes, the RayCluster's worker pods and the job's log lines."""
    step = last_step(log)
    names = {n["metadata"]["name"] for n in nodes}
    for pod in workers:
        node = pod.get("spec", {}).get("nodeName")
        if node and node not in names:
            return Failure(INFRASTRUCTURE, "node lost", node, step)
    for n in nodes:
        bad = _false(n, ("Ready", *AGENT_CONDITIONS))
        if bad:
            return Failure(INFRASTRUCTURE, bad, n["metadata"]["name"], step)
    if len(nodes) < want_nodes:
        return Failure(INFRASTRUCTURE, f"node lost ({len(nodes)} of {want_nodes} GPU nodes)", None, step)
    for pod in workers:
        status = pod.get("status", {})
        if status.get("reason") == "Evicted":
            return Failure(
                INFRASTRUCTURE, f"pod evicted: {status.get('message', '')}", pod["spec"].get("nodeName"), step
            )
    text = "\n".join(log)
    for cause, pattern in _APPLICATION:
        if pattern.search(text):
            return Failure(APPLICATION, cause, None, step)
    return Failure(APPLICATION, "no fault of the cluster seen", None, step)


def wait_for_nodes(
    read: Callable[[], tuple[list[dict], list[dict]]],
    want_nodes: int,
    want_workers: int,
    deadline: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    progress: Callable[[str], None],
) -> float:
    """Seconds until ``want_nodes`` GPU nodes are Ready with no agent condition False and ``want_workers`` worker
    pods Running (``read``: the GPU nodes and the worker pods); DriverError at ``deadline`` (clock time)."""
    start = clock()
    while True:
        nodes, workers = read()
        healthy = sum(_ready(n) and _false(n, AGENT_CONDITIONS) is None for n in nodes)
        running = sum(p.get("status", {}).get("phase") == "Running" for p in workers)
        if healthy >= want_nodes and running >= want_workers:
            return clock() - start
        said = f"{healthy} of {want_nodes} GPU nodes healthy, {running} of {want_workers} worker pods Running"
        if clock() >= deadline:
            raise DriverError(f"{said} after {clock() - start:.0f} s: the recovery's time ran out")
        progress(f"waiting for the replaced node: {said} after {clock() - start:.0f} s")
        sleep(POLL_S)
