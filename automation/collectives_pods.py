"""`bench --collectives --stack S`: workloads/collectives_bench.py in the cluster's own worker pods.

One torchrun per GPU node, in one Running Ray worker pod per node, all started at once through the pod
exec the driver already uses; static rendezvous on the first pod's IP (node rank 0, whose rank 0
writes the result), `--nproc-per-node` the node's GPUs. `workloads/` is copied into each pod first,
as the training job's submission copies it into the head pod. The GPUs are free while no Ray job
runs: the pods hold them, Ray lends them only to a job's workers.
"""

from __future__ import annotations

import json
import shlex
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from automation.errors import DriverError
from automation.job import CLUSTER_ROOT
from automation.kube import ExecResult, PodExec, RayClusterPods
from automation.ray_head import upload, workloads_tarball

SRC = f"{CLUSTER_ROOT}/src/collectives"
PORT = 29511  # the rendezvous port on the first pod; not one Ray or the job uses (8265, 6379, 10001, 29500)


@dataclass(frozen=True)
class WorkerPod:
    name: str
    ip: str
    node: str


def worker_pods(cluster: RayClusterPods) -> list[WorkerPod]:
    """One Running worker pod per GPU node, by node name; DriverError when fewer than two nodes have one."""
    namespace, raycluster = cluster.namespace, cluster.raycluster
    by_node: dict[str, WorkerPod] = {}
    for p in sorted(cluster.kube.list_pods(namespace, cluster.selector("worker")), key=lambda p: p["metadata"]["name"]):
        if p.get("status", {}).get("phase") == "Running" and p["status"].get("podIP"):
            node = p.get("spec", {}).get("nodeName", "?")
            by_node.setdefault(node, WorkerPod(p["metadata"]["name"], p["status"]["podIP"], node))
    if len(by_node) < 2:
        raise DriverError(
            f"RayCluster {namespace}/{raycluster} has Running workers on {len(by_node)} node(s): the collectives "
            "bench needs two GPU nodes, so that its collectives cross the network",
            exit_code=2,
        )
    return [by_node[n] for n in sorted(by_node)]


def torchrun_command(
    rank: int, pods: list[WorkerPod], gpus: int, env: dict[str, str], sweep: dict, out: str
) -> list[str]:
    """The shell command node `rank` runs: torchrun of the bench under `env` (the TCP run's overrides)."""
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    run = (
        f"python -m torch.distributed.run --nnodes {len(pods)} --node-rank {rank} --nproc-per-node {gpus} "
        f"--master-addr {pods[0].ip} --master-port {PORT} -m workloads.collectives_bench "
        f"--max-mib {sweep['max_mib']} --iters {sweep['iters']} --out {out}"
        + (f" --min-mib {sweep['min_mib']}" if "min_mib" in sweep else "")
    )
    return ["sh", "-c", f"cd {SRC} && {envs + ' ' if envs else ''}{run}"]


def copy_workloads(pod_exec: PodExec, pods: list[WorkerPod], namespace: str) -> None:
    tarball = workloads_tarball()
    for pod in pods:
        upload(pod_exec, pod.name, namespace, SRC, tarball, "workloads/")


def sweep_on(pod_exec: PodExec, pods: list[WorkerPod], namespace: str, gpus: int, env: dict, sweep: dict) -> dict:
    """Run the bench on every node at once and return rank 0's document; DriverError naming the node that failed."""
    out = f"{CLUSTER_ROOT}/collectives-{sweep['label']}.json"

    def one(rank: int, pod: WorkerPod) -> ExecResult | DriverError:
        cmd = torchrun_command(rank, pods, gpus, env, sweep, out)
        try:
            return pod_exec(pod.name, namespace, cmd, timeout_s=sweep.get("timeout_s", 1800))
        except DriverError as e:
            return e

    with ThreadPoolExecutor(len(pods)) as pool:  # every node at once: torchrun's rendezvous waits for all
        results = list(pool.map(one, range(len(pods)), pods))
    for pod, res in zip(pods, results, strict=True):
        if isinstance(res, ExecResult) and res.rc != 0:
            res = DriverError(f"exit {res.rc}: {(res.stdout + res.stderr).strip()[-300:]}")
        if isinstance(res, DriverError):
            raise DriverError(f"the {sweep['label']} sweep failed in {pod.name} on {pod.node}: {res}")
    cat = pod_exec(pods[0].name, namespace, ["cat", out], timeout_s=60)
    try:
        return json.loads(cat.stdout)
    except ValueError:
        raise DriverError(f"{pods[0].name}: {out} is not the bench's JSON (rc {cat.rc}): {cat.stderr[-200:]}") from None
