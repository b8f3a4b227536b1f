"""`python -m automation scale --stack S --gpu-nodes N`: the GPU node group's size by hand.

    python -m automation scale --stack us-west-2 --gpu-nodes 0        # stop paying for GPU nodes, keep the cluster
    python -m automation scale --stack us-west-2 --gpu-nodes 2 --wait # bring them back and wait until Ready
    python -m automation scale --stack us-west-2 --gpu-nodes 0 --force   # even if a Ray job may be running

A scale-down first asks the Ray job API on the head (automation/scaling.py ``job_keeps_nodes``): a PENDING or
RUNNING job, or a head that cannot be asked, refuses it (exit 1) unless --force.

Each command that works on the GPU nodes does the same on its own (automation/run_controller.py): back to
gpuNodeCount in its `scale-up` step, to gpuIdleNodes when it ends. N is 0 to gpuNodeCount (the node group's
maximum); the Ray head lives on the system node, so the RayCluster's workers come back as the nodes do.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from typing import Any

from automation.errors import DriverError
from automation.flags import STACK_PARENT, Mode, count, need_stack, not_in
from automation.scaling import job_keeps_nodes, nodegroup_ref, running_line, set_desired, sizes, wait_ready
from automation.targets.aws import AwsDeps, load_config, open_stack
from automation.ui import Ui
from infra.config import GpuNodesConfig
from infra.names import GPU_NODE_SELECTOR

NODE_COUNT = GpuNodesConfig.keyname("node_count")

HELP = "set the number of GPU nodes (0 stops paying for them; the cluster stays)"


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("scale", parents=[*parents, STACK_PARENT], help=HELP, description=HELP)
    p.add_argument("--gpu-nodes", type=count, required=True, metavar="N", help=f"GPU nodes, 0 to {NODE_COUNT}")
    wait = p.add_argument("--wait", action="store_true", help="wait until N GPU nodes are Ready (scaling up)")
    to_zero = Mode("--gpu-nodes 0", lambda args: args.gpu_nodes == 0)
    not_in(wait, to_zero, "no GPU node will become Ready; `status` shows the node group scaling down")
    p.add_argument(
        "--force", action="store_true", help="scale down even if a Ray job runs or the job API cannot be asked"
    )


def run(args: argparse.Namespace, ui: Ui, deps: AwsDeps | None = None) -> int:
    cfg = load_config(need_stack(args, "scale"), args.project_dir)
    if args.gpu_nodes > cfg.gpu_nodes.node_count:
        raise DriverError(
            f"--gpu-nodes {args.gpu_nodes} is more than stack {args.stack}'s {NODE_COUNT} "
            f"{cfg.gpu_nodes.node_count} (the node group's maximum): pass 0..{cfg.gpu_nodes.node_count}, or raise "
            f"{NODE_COUNT} and run `up`",
            exit_code=2,
        )
    target = open_stack(args.stack, project_dir=args.project_dir, pulumi="always", deps=deps, on_progress=ui.progress)
    ref = nodegroup_ref(target.outputs(), args.stack)
    eks = target.deps.client("eks")
    now = sizes(eks, ref)["desiredSize"]
    if args.gpu_nodes < now and not args.force and (why := job_keeps_nodes(target)):
        raise DriverError(
            f"not scaled: node group {ref.nodegroup} stays at {now} because {why}; wait for the job to end "
            f"(`python -m automation status --stack {args.stack}`) or pass --force to scale down under it"
        )
    scaled = set_desired(eks, ref, args.gpu_nodes, ui.progress, target.deps.clock)
    if args.wait:  # never with --gpu-nodes 0: add_parser refuses it
        nodes = functools.partial(target.kube().list_nodes, GPU_NODE_SELECTOR)
        seconds = wait_ready(nodes, args.gpu_nodes, on_progress=ui.progress, clock=target.deps.clock)
        scaled = dataclasses.replace(scaled, seconds=round(seconds, 1))
    running = running_line(target, args.gpu_nodes)
    if args.json:
        ui.emit_json({"ok": True, **scaled.to_dict(), "running": running})
    else:
        ui.note(scaled.text())
        ui.note(running)
    return 0
