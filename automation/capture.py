"""Record what a real cluster holds, in the layout of tests/fixtures/k8s/, so captures can replace
the constructed fixtures: `python -m automation status --stack S --capture DIR`.

Each file is the API's list JSON (`kubectl get nodes,ds,deploy,pods -A -o json` split by kind, the
RayCluster's events, the RayCluster itself), read through the Kubernetes client. AWS account ids
(twelve digits: in ARNs, ECR image URIs, provider ids) become REDACTED_ACCOUNT, and
`metadata.managedFields` (server bookkeeping, large and of no use to a test) is dropped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from automation.kube import KubeApi

ACCOUNT_ID = re.compile(r"(?<![0-9])[0-9]{12}(?![0-9])")
REDACTED_ACCOUNT = "111122223333"  # the placeholder account id of AWS's own documentation


def redact(obj: object) -> object:
    """`obj` with every 12-digit number inside a string replaced and managedFields dropped."""
    if isinstance(obj, str):
        return ACCOUNT_ID.sub(REDACTED_ACCOUNT, obj)
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, dict):
        return {k: redact(v) for k, v in obj.items() if k != "managedFields"}
    return obj


def _listed(kind: str, api_version: str, items: list[dict]) -> dict:
    return {"kind": kind, "apiVersion": api_version, "metadata": {}, "items": items}


def capture_cluster(kube: KubeApi, namespace: str, raycluster: str, directory: Path) -> list[Path]:
    """Write nodes, daemonsets, deployments, pods, events and raycluster JSON into `directory`; their paths."""
    docs = {
        "nodes": _listed("NodeList", "v1", kube.list_nodes()),
        "daemonsets": _listed("DaemonSetList", "apps/v1", kube.list_daemonsets()),
        "deployments": _listed("DeploymentList", "apps/v1", kube.list_deployments()),
        "pods": _listed("PodList", "v1", kube.list_all_pods()),
        "events": _listed("EventList", "v1", kube.list_events(namespace)),
        "raycluster": kube.get_raycluster(namespace, raycluster),
    }
    directory.mkdir(parents=True, exist_ok=True)
    for stem, doc in docs.items():
        (directory / f"{stem}.json").write_text(json.dumps(redact(doc), indent=1) + "\n")
    return [directory / f"{stem}.json" for stem in docs]
