"""`python -m automation logs --stack S [RUN]`: follow a job's output, as `kubectl logs -f` would.

    python -m automation logs --stack us-west-2                # the newest run's driver output
    python -m automation logs --stack us-west-2 RUN            # one run's driver output
    python -m automation logs --stack us-west-2 RUN --worker 3 # Ray Train rank 3's own log

Both go through the Kubernetes exec API, like `train`: the driver output with `ray job logs --follow`
against the head pod's own job server (127.0.0.1:8265 inside the pod), a worker's log with `tail -F`
of its Ray session log file in the worker pod that holds it. Training workers write their output
there, not to the container's stdout, which is why `kubectl logs` does not show it. Ctrl-C stops
following; the job goes on.
"""

from __future__ import annotations

import argparse
import shlex

from automation.commands import Subparsers
from automation.errors import DriverError
from automation.flags import CLUSTER_PARENT, command_parser, count, need_stack
from automation.kube import KubeApi, RayClusterPods
from automation.ray_head import HEAD_JOB_SERVER, strip_ansi
from automation.run_files import RAY_LOGS
from automation.targets import aws
from automation.ui import Ui
from workloads.nccl_check import run_marker

HELP = "follow a running job's driver output, or one Ray Train worker's log (--worker N)"
FOLLOW_S = 7 * 24 * 3600.0  # follow as long as the job runs; Ctrl-C ends it sooner


def worker_log(cluster: RayClusterPods[KubeApi], run_id: str, rank: int) -> tuple[str, str]:
    """(pod, file) of rank `rank`'s log, the Ray worker log in which it printed its run marker: searched in every
    running worker pod, then the head."""
    marker = shlex.quote(run_marker(run_id, rank))
    find = ["sh", "-c", f"grep -l -F -x -- {marker} {RAY_LOGS}/worker-*.out 2>/dev/null | head -n 1"]
    pods = cluster.pods("worker") + cluster.pods("head")
    for pod in pods:
        res = cluster.kube.exec(pod, cluster.namespace, find, timeout_s=60)
        path = res.stdout.strip()
        if res.rc == 0 and path:
            return pod, path
    raise DriverError(
        f"--worker {rank}: no log of rank {rank} of run {run_id} in {RAY_LOGS} of pods {', '.join(pods) or '(none)'}: "
        "check the rank (0 to num-workers - 1) and the run id, or whether the job has started",
        exit_code=2,
    )


def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = command_parser(sub, "logs", HELP, __doc__, [*parents, CLUSTER_PARENT])
    p.add_argument("run", metavar="RUN", nargs="?", help="the run id (default: the newest run on the cluster)")
    p.add_argument("--worker", type=count, metavar="N", help="follow Ray Train rank N's log instead of the driver's")


def run(args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None = None) -> int:
    """Stream the lines to stdout until the job ends (driver log) or Ctrl-C; the command's exit status."""
    stack = need_stack(args, "logs (the job runs on a stack's cluster)")
    target = aws.open_stack(stack, project_dir=args.project_dir, kubeconfig=args.kubeconfig, deps=deps)
    cluster = target.ray_pods()
    head = cluster.head_pod()
    run_id = args.run or aws.newest_cluster_run(cluster.kube.exec, head, cluster.namespace)
    if args.worker is None:  # `train` submits the job under the run id
        pod, command = head, ["ray", "job", "logs", "--address", HEAD_JOB_SERVER, "--follow", run_id]
    else:
        pod, path = worker_log(cluster, run_id, args.worker)
        command = ["tail", "-n", "+1", "-F", path]
    ui.note(f"following {' '.join(command[:4])} … in {cluster.namespace}/{pod} (Ctrl-C stops)")
    try:
        res = cluster.kube.exec(
            pod, cluster.namespace, command, on_line=lambda s: print(strip_ansi(s)), timeout_s=FOLLOW_S
        )
    except KeyboardInterrupt:
        return 0
    if res.rc != 0:
        raise DriverError(
            f"`{' '.join(command)}` in {cluster.namespace}/{pod} ended with rc {res.rc}: {res.stderr.strip()[-300:]}"
        )
    return 0
