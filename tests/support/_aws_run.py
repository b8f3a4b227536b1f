"""The AWS run in process, as the driver tests drive it: moto's AWS clients (the `aws` fixture), the fake
Kubernetes API with a scripted exec on the head pod, and the target built over them (the stand-ins are in
_driver_helpers.py, _ray_jobs.py and _pod_requests.py, each with its source)."""

from __future__ import annotations

import json
from pathlib import Path

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
import pytest
from _cloud_fakes import FakeClock
from _driver_helpers import KubeWithExec
from _pod_requests import PodAction, pod_request
from _ray_jobs import Clock, FakeRayJobs, JobScript
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION
from botocore.stub import Stubber

from automation import steps
from automation.kube import ExecResult
from automation.pipeline import run_pipeline
from automation.ray_head import RESOURCES_MARK
from automation.targets.aws import API_CIDRS_KEY, DRIVER_CIDR_KEY, AwsDeps, AwsRun, AwsTarget

REGION = MOTO_REGION
DEPLOYER_IP = helpers.DEPLOYER_IP


# The shipped stacks leave the API allow-list to the driver, which writes the entry and names it as its own.
SET_CIDRS = [f"set_config {API_CIDRS_KEY}[0]", f"set_config {DRIVER_CIDR_KEY}"]


NCCL = helpers.REPO / "tests" / "fixtures" / "nccl"
RAY_RESOURCES = {"GPU": 8.0, "CPU": 82.0}  # two g6.12xlarge workers as Ray advertises them
S3_PROBE_OK = "PYARROW 21.0.0 CREDENTIALS pod-identity\nFILESYSTEM S3FileSystem\nok\n"  # version illustrative
SUMMARY = {
    "run_id": "r1",
    "world_size": 8,
    "steps": 100,
    "tokens_per_s": 52000.0,
    "tokens_per_s_per_gpu": 6500.0,
    "mfu": 0.31,
    "loss_first": 12.1,
    "loss_last": 7.9,
    "peak_mem_gb": 17.5,
    "nccl_log_dir": "/tmp/ray-efa-eks/runs/r1/nccl",
    "checkpoint": None,
}


def cluster_exec(
    nccl_log: Path = NCCL / "efa_unprefixed_ofi1.20.log",
    ends: str = "SUCCEEDED",
    efa: helpers.FakeEfaNodes | None = None,
    over_efa: bool = True,
):
    """Answers every command the driver runs in a pod, like the real head and worker pods would; the job
    server (tests/support/_ray_jobs.py) has each job end `ends` at once (its clock never moves);
    `efa` holds the GPU nodes' EFA counters, which the job advances by the model's bytes as it is
    submitted (over EFA unless `over_efa` is False, where sockets carry them)."""
    script = JobScript(("[train] step 100/100 loss 7.9",), run_s=0, pending_s=0, ends=ends)
    jobs = FakeRayJobs(Clock(), lambda job_id: script)
    efa = efa or helpers.FakeEfaNodes.of_fixture()

    def answer(pod, cmd, stdin):
        request = pod_request(cmd)
        if request is None:
            raise AssertionError(f"unexpected command {cmd}")
        if request.action is PodAction.EFA_COUNTERS:  # the counter witness, before and after the job
            return efa.answer(pod, request.arg)
        if request.job is not None and request.job.action == "submit":
            efa.job_ran(helpers.predicted_job_bytes(SUMMARY["steps"]), over_efa)
        if (job_answer := jobs.answer(pod, cmd)) is not None:
            return job_answer
        if (gate := helpers.gate_answer(request)) is not None:  # the gate's nvidia-smi and all-reduce, healthy
            return gate
        return {
            PodAction.FI_INFO: helpers.fi_info_answer,
            PodAction.UPLOAD: lambda: ExecResult(0, "", ""),
            PodAction.READ_FILE: lambda: ExecResult(0, json.dumps(SUMMARY), ""),
            PodAction.S3_MARKER: lambda: ExecResult(0, S3_PROBE_OK, ""),
            PodAction.RAY_RESOURCES: lambda: ExecResult(0, f"{RESOURCES_MARK}{json.dumps(RAY_RESOURCES)}\n", ""),
            PodAction.COLLECT_LOGS: nccl_tar,
            PodAction.PACK_FILES: nccl_tar,
        }[request.action]()

    def nccl_tar():
        return ExecResult(0, helpers.tar_b64({f"nccl.rank0.{nccl_log.stem}.1.log": nccl_log.read_bytes()}), "")

    scripted = helpers.ScriptedExec(answer, jobs=jobs)
    return scripted


@pytest.fixture
def aws(moto_eks, monkeypatch):  # moto's EKS holds the stack's GPU node group, which `scale-up` sizes
    # The machine's own `aws` may be v1 (preflight fails it): these tests stand in v2's `aws --version`
    # line (AWS CLI user guide's example) so that the pipeline, not this machine, decides the result.
    monkeypatch.setattr(
        "automation.steps.preflight.aws_cli_version", lambda path: "aws-cli/2.22.0 Python/3.12.6 Linux/6.1.0"
    )


def client_factory(quota: float = 1000, extra: dict | None = None):
    def make(name):
        if extra and name in extra:
            return extra[name]
        client = boto3.client(name, region_name=REGION)
        if name == "service-quotas":
            stub = Stubber(client)
            # The GPU family's quota, then the Standard one of the system node (preflight reads both).
            for code in ("L-DB2E81BA", "L-1216C47A"):
                stub.add_response(
                    "get_service_quota",
                    {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": quota}},
                    {"ServiceCode": "ec2", "QuotaCode": code},
                )
            stub.activate()
        return client

    return make


def make_target(api, stack, pod_exec=None, confirm=lambda q: True, yes=True, clients=None):
    deps = AwsDeps(
        client=clients or client_factory(),
        stack=lambda: stack,
        kube=lambda kc: KubeWithExec(kc, pod_exec or cluster_exec()),
        confirm=confirm,
        public_ip=helpers.deployer_ip,
        clock=FakeClock().clock(),
    )
    return AwsTarget(AwsRun(helpers.stack_config(), "r1", yes=yes, node_wait_s=0, pod_wait_s=0), deps)


def outputs(api):
    return {
        "region": REGION,
        "gpu_az": "us-west-2a",
        "cluster_name": MOTO_CLUSTER,
        "nodegroup_name": MOTO_NODEGROUP,
        "kubeconfig": json.dumps(api.kubeconfig()),
        "raycluster_name": "ray-efa",
        "raycluster_namespace": "ray",
        "storage_uri": "s3://ray-efa-eks-us-west-2-render/us-west-2/runs",
        "pod_role_arn": "arn:aws:iam::123456789012:role/ray-pods",
        "pod_identity_association_id": "a-123",
        "ray_service_account": "ray-train",
    }


def run(target, names):
    return run_pipeline(steps.build(names, target), target.advise)


def step_names(result):
    return [t.result.step for t in result.steps]
