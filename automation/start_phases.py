"""How long a start took, phase by phase, derived after the fact from what the Kubernetes API already holds.

A cold start of the GPU workers is four phases, one after the other, and each has a record the API keeps:

- node join: the GPU node's ``metadata.creationTimestamp`` (the kubelet registered it) to its ``Ready`` condition's
  ``lastTransitionTime``;
- image pull: the kubelet's ``Pulled`` event for the Ray container, whose message states the pull's duration and,
  since Kubernetes 1.30, the image size (``pkg/kubelet/images/image_manager.go``, ``EnsureImageExists``:
  ``Successfully pulled image %q in %v (%v including waiting). Image size: %v bytes.``; a cached image gives
  ``Container image %q already present on machine`` instead, a pull of 0 s);
- pod start: that ``Pulled`` event's time to the container's ``state.running.startedAt`` (create and start);
- first step: the last Ray container's ``startedAt`` to the first ``[train] step`` line the driver saw.

The slowest pod sets each phase (the job waits for all of them). Nothing here calls an API: the caller hands in the
listed nodes, pods and events, so tests feed recorded-shape objects. Its times (RFC 3339, ``Z``) are read by
``datetime.fromisoformat``, which takes the ``Z`` and MicroTime's fractions since Python 3.11.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from automation.kube import KubeApi
from automation.pipeline import Plain
from infra.names import GPU_NODE_SELECTOR

_T = TypeVar("_T", int, float, datetime)
PHASES = ("node_join_s", "image_pull_s", "pod_start_s", "first_step_s")

# Go's time.Duration.String(): "1h2m3.5s", "12.345s", "850ms", "0s" (the kubelet truncates to milliseconds).
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_PULLED = re.compile(
    r"^Successfully pulled image \"[^\"]*\" in (\S+) \((\S+) including waiting\)(?:\. Image size: (\d+) bytes)?"
)
_PRESENT = re.compile(r"^Container image \"[^\"]*\" already present on machine")


def go_duration_s(text: str) -> float:
    """Seconds of a Go duration string (``1m2.345s`` -> 62.345); ValueError when it is not one."""
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


@dataclass(frozen=True)
class Pull:
    """What one ``Pulled`` event says: the pull's seconds (0 for an image already present) and bytes, if stated."""

    seconds: float
    image_bytes: int | None
    at: datetime | None


def parse_pulled(event: Mapping[str, Any]) -> Pull | None:
    """The pull stated by a kubelet ``Pulled`` event, or None for any other event."""
    if event.get("reason") != "Pulled":
        return None
    message = event.get("message", "")
    stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
    at = datetime.fromisoformat(stamp) if stamp else None
    if _PRESENT.match(message):
        return Pull(0.0, None, at)
    m = _PULLED.match(message)
    return Pull(go_duration_s(m.group(1)), int(m.group(3)) if m.group(3) else None, at) if m else None


def ready_condition(node: Mapping[str, Any]) -> dict | None:
    """The Kubernetes Node's Ready=True condition, if it has one."""
    conditions = node.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c.get("type") == "Ready" and c.get("status") == "True"), None)


def _started_at(pod: Mapping[str, Any]) -> datetime | None:
    runs = (s.get("state", {}).get("running") or {} for s in pod.get("status", {}).get("containerStatuses", []))
    return next((datetime.fromisoformat(r["startedAt"]) for r in runs if r.get("startedAt")), None)


@dataclass(frozen=True)
class StartPhases(Plain):
    """Seconds of each phase of a start (None where the API held no record), and the image bytes pulled."""

    node_join_s: float | None = None
    image_pull_s: float | None = None
    pod_start_s: float | None = None
    first_step_s: float | None = None
    image_bytes: int | None = None

    def text(self) -> str:
        parts = [f"{p[:-2].replace('_', ' ')} {v:.0f} s" for p in PHASES if (v := getattr(self, p)) is not None]
        return ", ".join(parts) or "n/a"  # node_join_s 50.0: "node join 50 s"


def _max(values: Iterable[_T | None]) -> _T | None:
    return max((v for v in values if v is not None), default=None)


def start_phases(
    nodes: list[dict], pods: list[dict], events: list[dict], first_step_at: datetime | None
) -> StartPhases:
    """The phases of the start of ``pods`` (the Ray pods) on ``nodes`` (the GPU nodes), from the namespace's
    ``events`` and the time the driver saw the first ``[train] step`` line."""
    joins = [
        (
            datetime.fromisoformat(c["lastTransitionTime"]) - datetime.fromisoformat(n["metadata"]["creationTimestamp"])
        ).total_seconds()
        for n in nodes
        if (c := ready_condition(n)) is not None
    ]
    # A pod has a Pulled event per container (KubeRay's wait-gcs-ready init container pulls the Ray image, then the
    # Ray container finds it "already present"), in no promised order: its pull is the longest, its time the last.
    names = {pod["metadata"]["name"] for pod in pods}
    pulls: dict[str, Pull] = {}
    for e in events:
        pull, name = parse_pulled(e), e.get("involvedObject", {}).get("name")
        if pull is not None and name in names and e["involvedObject"].get("kind") == "Pod":
            seen = pulls.setdefault(name, pull)
            size = _max((seen.image_bytes, pull.image_bytes))
            pulls[name] = Pull(max(seen.seconds, pull.seconds), size, _max((seen.at, pull.at)))
    started = {pod["metadata"]["name"]: s for pod in pods if (s := _started_at(pod))}
    pod_starts = [max(0.0, (s - p.at).total_seconds()) for n, s in started.items() if (p := pulls.get(n)) and p.at]
    last_start = _max(started.values())
    first_step = (first_step_at - last_start).total_seconds() if first_step_at and last_start else None
    return StartPhases(
        node_join_s=_max(joins),
        image_pull_s=_max(p.seconds for p in pulls.values()),
        pod_start_s=_max(pod_starts),
        first_step_s=first_step,
        image_bytes=_max(p.image_bytes for p in pulls.values()),
    )


def observe(kube: KubeApi, namespace: str, raycluster: str, first_step_at: datetime | None) -> StartPhases:
    """The phases of the RayCluster's last start, read through ``kube`` (automation.kube.KubeApi or a stand-in)
    while its pods and GPU nodes still exist: call it when the job ends, before the nodes go idle."""
    pods = kube.list_pods(namespace, f"ray.io/cluster={raycluster}")
    return start_phases(kube.list_nodes(GPU_NODE_SELECTOR), pods, kube.list_events(namespace), first_step_at)
