"""The cluster `bench` runs against, in process: the head pod's job server and the workers' NCCL logs behind a
scripted exec (real logs from tests/fixtures/nccl, README there), the run bucket, and the terminal it prints to.
Used by the bench command's tests and by the collectives and EFA-counter tests that run the same legs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
from _pod_requests import PodAction, pod_request
from _ray_jobs import Clock, FakeRayJobs, JobScript
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP

from automation.kube import ExecResult
from automation.ray_head import RESOURCES_MARK
from workloads.metrics import METRICS_FILE, MetricsWriter, StepMetrics

HEAD = "ray-efa-head-9xk2q"
RANK0_POD = "ray-efa-gpu-workers-worker-tz8mb"
NCCL = helpers.REPO / "tests" / "fixtures" / "nccl"
EFA_LOG = NCCL / "efa_unprefixed_ofi1.20.log"  # aws-ofi-nccl 1.20 over EFA, `via NET/Libfabric/0`
SOCKET_LOG = NCCL / "socket_cluster_nccl952.log"  # a multi-node run over `NET/Socket`
TOKENS_PER_S = {"efa": 52000.0, "tcp": 20800.0, "bf16": 46400.0}  # the precision leg: bf16 against float8
BASE = "b1"


def leg_of(run_id: str) -> str:
    return run_id.rsplit("-", 1)[1]


def summary(run_id: str) -> dict:
    tps = TOKENS_PER_S[leg_of(run_id)]
    return {
        "run_id": run_id,
        "backend": "nccl",
        "world_size": 8,
        "steps": 3,
        "precision": "bfloat16" if leg_of(run_id) == "bf16" else "float8 tensorwise",
        "tokens_per_s": tps,
        "mfu": tps * 1.0e10 / (8 * 121e12),
        "step_time_s": 8 * 16384 / tps,
        "loss_first": 4.0,
        "loss_last": 2.0,
    }


def metrics_files(tmp: Path, run_id: str) -> dict[str, bytes]:
    w = MetricsWriter(tmp / "made" / run_id, run_id, echo=False, tensorboard=False)
    for n in (1, 2, 3):
        w.write(StepMetrics(n, 3, 4.0 - n, 1e-4, TOKENS_PER_S[leg_of(run_id)], 1e3, 0.3, 1.2, 0.01, 18.0, 0.9))
    w.close()
    return {METRICS_FILE: (tmp / "made" / run_id / METRICS_FILE).read_bytes(), "run_info.json": b'{"config": {}}'}


class Cluster:
    """Answers what the driver runs in the pods; `logs` maps efa/tcp to the NCCL log that run leaves."""

    def __init__(self, tmp: Path, logs: dict[str, Path], failed: tuple[str, ...] = ()):
        self.tmp, self.logs, self.failed = tmp, logs, failed
        self.collected: list[str] = []  # NCCL directories read by the checks
        self.efa = helpers.FakeEfaNodes.of_fixture()  # the EFA counters, moved only by the EFA run
        # The head pod's job server (tests/support/_ray_jobs.py): each job ends at once, FAILED for a failed leg.
        self.jobs = FakeRayJobs(Clock(), self.job_script)
        self.exec = helpers.ScriptedExec(self.answer)

    def job_script(self, job_id: str) -> JobScript:
        ends = "FAILED" if leg_of(job_id) in self.failed else "SUCCEEDED"
        return JobScript(("[train] step 3/3",), run_s=0, pending_s=0, ends=ends)

    @property
    def submitted(self) -> list[tuple[str, dict]]:
        """(submission id, runtime env) of each job, in the order submitted."""
        return [(job_id, self.jobs.runtime_env(job_id)) for job_id in self.jobs.jobs]

    def answer(self, pod: str, cmd: list[str], stdin: str | None) -> ExecResult:
        request = pod_request(cmd)
        if request is None:
            raise AssertionError(f"unexpected command {cmd} in {pod}")
        found = re.search(r"runs/([^/' ]+)", request.arg)
        run_id = found.group(1) if found else ""  # a file or log request names its run's folder
        if request.job is not None and request.job.action == "submit" and request.job.job_id:
            job = request.job.job_id
            self.efa.job_ran(helpers.predicted_job_bytes(summary(job)["steps"]), over_efa=leg_of(job) != "tcp")
        answer = self.jobs.answer(pod, cmd) or helpers.routine_answer(request, pod, self.efa)
        if answer is not None:
            return answer
        match request.action:
            case PodAction.READ_FILE:
                return ExecResult(0, json.dumps(summary(run_id)), "")
            case PodAction.FI_INFO:
                return helpers.fi_info_answer()
            case PodAction.S3_MARKER:
                return ExecResult(0, "ok\n", "")
            case PodAction.RAY_RESOURCES:
                return ExecResult(0, f"{RESOURCES_MARK}{json.dumps({'GPU': 8.0, 'CPU': 82.0})}\n", "")
            case PodAction.PACK_FILES:  # the report copying a run's files
                return self.pack(pod, run_id, "summary.json" in request.names)
            case PodAction.COLLECT_LOGS:  # the NCCL check collecting one run's logs
                self.collected.append(run_id)
                log = self.logs[leg_of(run_id)].read_bytes()
                files = {f"./nccl.{run_id}.rank0.host.1.log": log}
                return ExecResult(0, helpers.tar_b64(files) if pod == RANK0_POD else "", "")
        raise AssertionError(f"unexpected request {request} in {pod}")

    def pack(self, pod: str, run_id: str, wants_summary: bool) -> ExecResult:
        if wants_summary:
            return ExecResult(
                0, helpers.tar_b64({"summary.json": json.dumps(summary(run_id)).encode()}) if pod == HEAD else "", ""
            )
        return ExecResult(0, helpers.tar_b64(metrics_files(self.tmp, run_id)) if pod == RANK0_POD else "", "")


class RunBucket:
    """The stack's run bucket as far as bench uses it: the counters step keeps its reading there for `attach`."""

    def __init__(self):
        self.objects: dict[tuple[str, str], bytes] = {}

    def put_object(self, Bucket, Key, Body):  # noqa: N803 - boto3's keyword names
        self.objects[(Bucket, Key)] = Body
        return {}


class Ui:
    json_mode = False  # what the report of an interrupt reads; emit_json records a document either way

    def __init__(self):
        self.notes, self.errors, self.doc = [], [], None

    def note(self, text):
        self.notes.append(text)

    def error(self, text):
        self.errors.append(text)

    def emit_json(self, doc):
        self.doc = doc

    def log(self, text):
        pass

    progress = log
    step_started = log
    step_finished = log


def outputs(api) -> dict:
    return {
        "cluster_name": MOTO_CLUSTER,
        "nodegroup_name": MOTO_NODEGROUP,  # moto's, which `scale-up` sizes (_cloud_fakes.gpu_nodegroup)
        "kubeconfig": json.dumps(api.kubeconfig()),
        "raycluster_name": "ray-efa",
        "raycluster_namespace": "ray",
        "storage_uri": "s3://ray-efa-eks-us-west-2-render/us-west-2/runs",
        "pod_role_arn": "arn:aws:iam::123456789012:role/ray-pods",
        "pod_identity_association_id": "a-123",
        "ray_service_account": "ray-train",
    }
