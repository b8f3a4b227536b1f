"""`python -m automation status`: what exists now (the stack's outputs, its GPU nodes and RayCluster, what runs now
and its cost per hour, the idle guard's last decision, the EFA counter witness of the newest local run);
with `--capture DIR` also the cluster's objects as JSON, in the layout of tests/fixtures/k8s/."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.pretty import Pretty

from automation.capture import capture_cluster
from automation.efa_witness import last_witness
from automation.flags import LOCAL, TARGET_PARENT, add_kubeconfig, not_in, output_folder, resolve_target
from automation.pipeline import SECRET_OUTPUTS
from automation.scaling import guard_record, now_running
from automation.steps.verify_checks import is_ready
from automation.targets import aws
from automation.ui import Ui
from infra.names import GPU_NODE_SELECTOR
from workloads.config import runs_root
from workloads.metrics import local_runs

LOCAL_STATUS = (
    "the local target keeps nothing between runs: `python -m automation run` starts its own Ray head and stops it"
)


def add_parser(sub: Any, parents: list) -> None:
    help = "what exists now"
    p = sub.add_parser("status", help=help, description=help, parents=[*parents, TARGET_PARENT])
    add_kubeconfig(p)
    capture = p.add_argument(
        "--capture",
        type=output_folder,
        metavar="DIR",
        help="aws: also write the cluster's nodes, DaemonSets, Deployments, pods, events and RayCluster as JSON "
        "into DIR (the layout of tests/fixtures/k8s/), AWS account ids redacted",
    )
    not_in(capture, LOCAL, "the local target has no Kubernetes cluster to record")


def run(args: argparse.Namespace, ui: Ui) -> int:
    args.target = resolve_target(args)
    if args.target == "local":
        doc = local_status(runs_root().absolute())
        ui.emit_json(doc) if args.json else ui.note(f"{LOCAL_STATUS}; {doc['runs']}")
        return 0
    target = aws.open_stack(args.stack, project_dir=args.project_dir, ui=ui, kubeconfig=args.kubeconfig)
    doc = aws_status(target, bool(args.kubeconfig))
    if args.capture is not None and isinstance(doc.get("cluster"), dict):
        pods = target.ray_pods()
        paths = capture_cluster(pods.kube, pods.namespace, pods.raycluster, args.capture)
        doc["captured"] = [str(p) for p in paths]
    ui.emit_json(doc) if args.json else ui.console.print(Pretty(doc))
    return 0


def local_status(root: Path) -> dict[str, object]:
    """What the local target leaves: its runs under ``root`` (as ``report`` and ``clean`` see them)."""
    runs = local_runs(root)
    said = f"newest run {runs[0].name} of {len(runs)} under {root}" if runs else f"no run under {root}"
    return {"target": "local", "status": LOCAL_STATUS, "runs": said, "newest_run": runs[0].name if runs else None}


def aws_status(target: aws.AwsTarget, kubeconfig_given: bool) -> dict[str, object]:
    """The stack's outputs and, when the cluster answers, its GPU nodes and the RayCluster's state."""
    outputs = {} if kubeconfig_given else target.outputs()
    doc: dict[str, object] = {
        "stack": target.cfg.stack,
        "region": target.cfg.region,
        "outputs": {k: ("[secret]" if k in SECRET_OUTPUTS else v) for k, v in outputs.items()},
        # The last run's second witness, from the runs `automation run` copied here (./runs)
        "efa_witness": last_witness(Path("runs"), target.cfg.stack),
    }
    if not kubeconfig_given and not outputs:
        doc["cluster"] = "the stack has no outputs: nothing is up"
        return doc
    kube = target.kube()
    exp = target.expectations()
    nodes = kube.list_nodes(GPU_NODE_SELECTOR)
    rc = kube.get_raycluster(exp.namespace, exp.raycluster)
    doc["now"] = now_running(target)
    doc["idle_guard"] = guard_record(kube, exp.namespace)
    doc["cluster"] = {
        "gpu_nodes_ready": sum(is_ready(n) for n in nodes),
        "gpu_nodes": len(nodes),
        "raycluster": f"{exp.namespace}/{exp.raycluster}",
        "raycluster_state": rc.get("status", {}).get("state"),
    }
    return doc
