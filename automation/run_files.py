"""A run's files on this machine, and copying them out of the cluster's pods through the exec API.

On the cluster a run lives under CLUSTER_ROOT/runs/<run id> in the RayCluster's pods: the summary in
the head pod (the job's driver runs there), metrics and run info in rank 0's worker pod, NCCL logs in
every worker pod. Each pod packs what it has as a base64 tar on stdout; nothing is exposed.
"""

from __future__ import annotations

import base64
import io
import json
import shlex
import shutil
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

from automation.errors import DriverError
from automation.job import CLUSTER_ROOT
from automation.kube import PodExec, RayClusterPods
from workloads.metrics import METRICS_FILE, RUN_INFO_FILE, mark_run_dir

DRIVER_FILE = "driver.json"
SUMMARY_FILE = "summary.json"
# Ray's logging directory in a pod: the current session's worker, core-worker and raylet logs (docs.ray.io,
# ray-observability/user-guides/configure-logging, "Logging directory" and "Log files in logging directory").
RAY_LOGS = "/tmp/ray/session_latest/logs"
RAY_LOG_NAMES = ("worker-*", "python-core-worker-*", "raylet.*")
KEPT_LOGS = "logs"  # under <storage_uri>/<run id>/ in the run bucket: the run's files and logs, as a run directory


def _tar_command(directory: str, listing: str) -> list[str]:
    """As a base64 tar, the files the shell command ``listing`` names in ``directory`` (none if it is gone)."""
    return ["sh", "-c", f"cd {shlex.quote(directory)} 2>/dev/null && {listing} | tar -czf - -T - | base64 -w0 || true"]


def collect_command(nccl_dir: str) -> list[str]:
    """The NCCL log files of one pod, as a base64 tar."""
    return _tar_command(nccl_dir, "find . -name '*.log'")


def set_aside_command(nccl_dir: str, attempt: int) -> list[str]:
    """Move a pod's NCCL logs of an ended attempt to `<nccl_dir>-attempt-<attempt>`, so the next attempt's logs
    are alone under `nccl_dir` (a worker makes it again at its start: workloads/loop.py)."""
    q, aside = shlex.quote(nccl_dir), shlex.quote(f"{nccl_dir}-attempt-{attempt}")
    return ["sh", "-c", f"[ -d {q} ] && mv {q} {aside} || true"]


def attempts_command(run_dir: str) -> list[str]:
    """A pod's NCCL logs of every attempt of a run (`nccl/`, `nccl-attempt-<n>/`), as a base64 tar."""
    return _tar_command(run_dir, "ls -d nccl nccl-attempt-* 2>/dev/null")


def ray_logs_command(minutes: int) -> list[str]:
    """A pod's Ray worker and raylet logs written in the last ``minutes``, as a base64 tar."""
    names = " -o ".join(f"-name {shlex.quote(n)}" for n in RAY_LOG_NAMES)
    return _tar_command(RAY_LOGS, f"find . -maxdepth 1 -type f \\( {names} \\) -mmin -{minutes}")


def pack_command(run_dir: str, names: tuple[str, ...]) -> list[str]:
    """The files of ``names`` that exist in ``run_dir``, as a base64 tar."""
    return _tar_command(run_dir, f"ls {' '.join(shlex.quote(n) for n in names)} 2>/dev/null")


def collect_logs(pod_exec: PodExec, pods: Sequence[str], namespace: str, nccl_dir: str, dest: Path) -> list[Path]:
    """Copy every `*.log` under `nccl_dir` of each pod into `dest/<pod>/`; return the files copied."""
    files: list[Path] = []
    for pod in pods:
        if _unpacked(pod_exec, pod, namespace, collect_command(nccl_dir), nccl_dir, dest / pod):
            files += sorted(p for p in (dest / pod).rglob("*.log") if p.is_file())
    return files


def _unpacked(
    pod_exec: PodExec, pod: str, namespace: str, command: list[str], what: str, dest: Path, timeout_s: float = 300
) -> list[str]:
    """Run `command`, which prints a base64 tar (or nothing), in `pod` and unpack it into `dest`: the names."""
    res = pod_exec(pod, namespace, command, timeout_s=timeout_s)
    if res.rc != 0:
        raise DriverError(f"reading {what} in {namespace}/{pod} failed (rc {res.rc}): {res.stderr.strip()[-300:]}")
    if not (blob := res.stdout.strip()):
        return []
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(blob)), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
        return tar.getnames()


def fetch_run(cluster: RayClusterPods, run_id: str, dest: Path) -> Path:
    """Copy a run's files from the cluster's pods (the module docstring says which holds which) into `dest`."""
    run_dir = f"{CLUSTER_ROOT}/runs/{run_id}"
    head, workers = cluster.head_pod(), cluster.pods("worker")
    mark_run_dir(dest, run_id)
    for pod, names in ((head, (SUMMARY_FILE,)), *((p, (METRICS_FILE, RUN_INFO_FILE)) for p in [*workers, head])):
        got = _unpacked(cluster.kube.exec, pod, cluster.namespace, pack_command(run_dir, names), run_dir, dest)
        if METRICS_FILE in got:  # rank 0 runs in one of the worker pods
            break
    else:
        raise DriverError(
            f"run {run_id}: no {METRICS_FILE} under {run_dir} in pods {', '.join([head, *workers])}: check the "
            f"run id (`python -m automation logs --stack {cluster.stack}` follows the newest) or whether it trained",
            exit_code=2,
        )
    collect_logs(cluster.kube.exec, workers, cluster.namespace, f"{run_dir}/nccl", dest / "nccl")
    if not (dest / DRIVER_FILE).exists():  # so the report holds the run to the cluster's standard: EFA
        (dest / DRIVER_FILE).write_text(json.dumps({"target": "aws", "stack": cluster.stack}) + "\n")
    return dest


def archive_run(cluster: RayClusterPods, run_id: str, minutes: int, dest: Path, deadline: Callable[[], bool]) -> None:
    """What a run left in the pods, laid out in ``dest`` as a run directory (as `fetch_run` lays it out): the
    summary, metrics and run info, each worker's NCCL logs of every attempt under `nccl*/<pod>/` and its Ray
    logs of the last ``minutes`` under `ray/<pod>/`. Each exec is bounded; DriverError once ``deadline()``."""
    run_dir, exec_ = f"{CLUSTER_ROOT}/runs/{run_id}", cluster.kube.exec
    head, workers = cluster.head_pod(), cluster.pods("worker")
    mark_run_dir(dest, run_id)
    for pod, names in ((head, (SUMMARY_FILE,)), *((w, (METRICS_FILE, RUN_INFO_FILE)) for w in workers)):
        _unpacked(exec_, pod, cluster.namespace, pack_command(run_dir, names), run_dir, dest, timeout_s=60)
    for pod in workers:
        if deadline():
            raise DriverError(f"out of time before the logs of pod {pod}")
        by_pod = dest / ".pods" / pod
        _unpacked(exec_, pod, cluster.namespace, attempts_command(run_dir), run_dir, by_pod, timeout_s=60)
        _unpacked(exec_, pod, cluster.namespace, ray_logs_command(minutes), RAY_LOGS, by_pod / "ray", timeout_s=60)
        for sub in by_pod.glob("*"):  # <pod>/nccl/x -> nccl/<pod>/x
            (dest / sub.name).mkdir(exist_ok=True)
            sub.rename(dest / sub.name / pod)
    shutil.rmtree(dest / ".pods", ignore_errors=True)
