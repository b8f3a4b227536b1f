"""Logs that outlive the cluster (issue 46 item 5, world 7(d)), and `attach` recovering as `run` does (item 3).

The world is tests/support/_recovery_world.py's (moto's EKS node group and S3 run bucket in process, the
recorded cluster behind the fake Kubernetes API, the head pod's job server on a fake clock), with the pods also
answering what the run's end copies: each worker's NCCL logs of every attempt (`nccl/`, and `nccl-attempt-1/` once
the recovery set them aside), its Ray session logs (named as Ray names them: docs.ray.io, ray-observability/
user-guides/configure-logging, "Log files in logging directory"), and the run's summary and metrics. "The pods are
gone": after the scale-down to 0 the worker pods are no longer listed (their nodes went; the head pod stays on
the system node).
"""

from __future__ import annotations

import json

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
import pytest
from _attach_world import EFA_LOG, RUN_BUCKET
from _aws_run import SUMMARY
from _pod_requests import PodAction, pod_request
from _recovery_world import LostNodeWorld, run_on
from _shared_env import MOTO_REGION
from _worlds import workers as workers_of

from automation.kube import ExecResult
from automation.targets.aws import RESUMED
from workloads.metrics import METRICS_FILE, MetricsWriter, StepMetrics

PREFIX = "us-west-2/runs/r1/logs/"  # outputs()'s storage_uri, the run id, logs/
RAY_LOG = "worker-5f2a-01000000-4242.out"  # worker-[worker_id]-[job_id]-[pid].out
OPTIONS = ("yes", "detach", "attach_job", "max_recoveries", "recovery_minutes", "run_id_given")


def metrics_files(tmp, run_id: str) -> dict[str, bytes]:
    """What rank 0's pod holds of a run of 3 steps (workloads/metrics.py writes it)."""
    w = MetricsWriter(tmp / "made" / run_id, run_id, echo=False, tensorboard=False)
    for n in (1, 2, 3):
        w.write(StepMetrics(n, 3, 4.0 - n, 1e-4, 52000.0, 1e3, 0.3, 1.2, 0.01, 18.0, 0.9))
    w.close()
    return {METRICS_FILE: (tmp / "made" / run_id / METRICS_FILE).read_bytes(), "run_info.json": b'{"config": {}}'}


class KeptWorld(LostNodeWorld):
    """LostNodeWorld whose pods also answer the logs' copy; ``copied_at`` holds the scale-downs done by then."""

    def __init__(self, eks, tmp, **kw) -> None:
        super().__init__(eks, **kw)
        self.tmp, self.copied_at = tmp, list[int]()

    def exec(self, pod, namespace, command, **kw) -> ExecResult:
        request = pod_request(list(command))
        action = request.action if request is not None else None
        if action is PodAction.ATTEMPT_LOGS:
            files = {"nccl/nccl.rank0.efa.1.log": EFA_LOG.read_bytes()}
            if any(p == pod for p, _ in self.set_aside):
                files["nccl-attempt-1/nccl.rank0.efa.1.log"] = EFA_LOG.read_bytes()
            return ExecResult(0, helpers.tar_b64(files), "")
        if action is PodAction.RAY_LOGS:
            self.copied_at.append(len(self.scaled))
            return ExecResult(0, helpers.tar_b64({f"./{RAY_LOG}": b"(RayTrainWorker pid=4242) step\n"}), "")
        if action is PodAction.PACK_FILES and request is not None:
            first = min((p["metadata"]["name"] for p in workers_of(self.objects)), default=None)
            if "summary.json" in request.names:
                files = {"summary.json": json.dumps(SUMMARY).encode()} if "head" in pod else {}
            else:
                files = metrics_files(self.tmp, "r1") if pod == first else {}
            return ExecResult(0, helpers.tar_b64(files) if files else "", "")
        return super().exec(pod, namespace, command, **kw)

    def pods_gone(self) -> None:
        """The scale-down took the GPU nodes: their worker pods are listed no more."""
        pods = self.objects["pods"]["items"]
        self.objects["pods"]["items"] = [p for p in pods if p not in workers_of(self.objects)]


def cli_on(world: KeptWorld, monkeypatch, capsys, argv: list[str]) -> tuple[int, dict]:
    """`python -m automation ARGV --json` on ``world``: the exit code and the JSON document."""
    rc = run_on(world, monkeypatch, argv, OPTIONS)
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else {}


def kept_keys() -> set[str]:
    s3 = boto3.client("s3", region_name=MOTO_REGION)
    listed = s3.list_objects_v2(Bucket=RUN_BUCKET, Prefix=PREFIX).get("Contents", [])
    return {o["Key"][len(PREFIX) :] for o in listed}


def run_world(moto_eks, tmp_path, monkeypatch, capsys, end: str) -> KeptWorld:
    """One `run --stack` that ends as ``end`` says: pass, fail (an application error), ctrl-c, lost-node."""
    world = KeptWorld(moto_eks, tmp_path, losses=1 if end == "lost-node" else 0, app_error=end == "fail")
    if end == "ctrl-c":
        world.interrupt_at = 3600.0
    cli_on(world, monkeypatch, capsys, ["run", "--stack", "us-west-2", "--yes"])
    return world


@pytest.mark.parametrize("end", ["pass", "fail", "ctrl-c", "lost-node"])
def test_the_job_log_nccl_and_ray_logs_are_in_the_bucket_however_the_run_ends(
    moto_eks, tmp_path, monkeypatch, capsys, end
):
    world = run_world(moto_eks, tmp_path, monkeypatch, capsys, end)
    workers = sorted(p["metadata"]["name"] for p in workers_of(world.objects))
    want = {"job/r1.log", *(f"{d}/{w}/{f}" for w in workers for d, f in (("nccl", "nccl.rank0.efa.1.log"),))}
    want |= {f"ray/{w}/{RAY_LOG}" for w in workers}
    missing = want - kept_keys()
    assert not missing, f"after a run that ended {end}: expected {sorted(missing)} under s3://{RUN_BUCKET}/{PREFIX}"


def test_a_lost_nodes_run_keeps_both_attempts_nccl_logs_and_both_job_logs(moto_eks, tmp_path, monkeypatch, capsys):
    world = run_world(moto_eks, tmp_path, monkeypatch, capsys, "lost-node")
    resumed = next(j for j in world.jobs.jobs if RESUMED in j)
    keys = kept_keys()
    attempt = {k for k in keys if k.startswith("nccl-attempt-1/")}
    assert f"job/{resumed}.log" in keys and len(attempt) == 2, f"expected the resumed job's log and 2 set aside: {keys}"


def test_the_logs_are_copied_before_the_scale_down_and_the_run_says_where(moto_eks, tmp_path, monkeypatch, capsys):
    world = run_world(moto_eks, tmp_path, monkeypatch, capsys, "pass")
    said = [n for n in world.reports[-1]["notes"] if "kept in the run bucket" in n]
    assert world.copied_at and set(world.copied_at) == {0}, f"copied after {world.copied_at} scale-downs"
    assert said and f"s3://{RUN_BUCKET}/{PREFIX}" in said[0], world.reports[-1]["notes"][-4:]


def test_report_reads_the_run_from_the_bucket_once_the_pods_are_gone(moto_eks, tmp_path, monkeypatch, capsys):
    world = run_world(moto_eks, tmp_path, monkeypatch, capsys, "pass")
    world.pods_gone()
    root = tmp_path / "copies"
    rc, doc = cli_on(world, monkeypatch, capsys, ["report", "--stack", "us-west-2", "r1", "--runs-root", str(root)])
    said = [n for n in world.notes if "from what its end kept in the run bucket" in n]
    assert (rc, doc.get("ok"), len(said)) == (0, True, 1), f"expected a report read from the bucket: {rc} {doc}"


def test_check_reads_the_kept_nccl_logs_once_the_pods_are_gone(moto_eks, tmp_path, monkeypatch, capsys):
    world = run_world(moto_eks, tmp_path, monkeypatch, capsys, "pass")
    world.pods_gone()
    cli_on(world, monkeypatch, capsys, ["check", "--stack", "us-west-2", "--run-id", "r1"])
    said = [n for n in world.notes if "NCCL log files kept in the run bucket instead" in n]
    assert said and "read the 2 NCCL log files" in said[0], world.notes[-3:]


def test_attach_resumes_a_followed_job_that_then_loses_a_node(moto_eks, tmp_path, monkeypatch, capsys):
    world = KeptWorld(moto_eks, tmp_path, losses=1)
    cli_on(world, monkeypatch, capsys, ["run", "--stack", "us-west-2", "--yes", "--detach"])
    rc, _ = cli_on(world, monkeypatch, capsys, ["attach", "--stack", "us-west-2", "r1", "--max-recoveries", "1"])
    resumed = [j for j in world.jobs.jobs if RESUMED in j]
    assert (rc, len(resumed)) == (0, 1), f"expected attach to pass after one resumed job: {rc}, {list(world.jobs.jobs)}"
