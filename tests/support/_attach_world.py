"""The world of a followed job (tests/automation/commands/test_attach.py and the hang and recovery worlds): moto's
EKS node group, the recorded cluster behind the fake Kubernetes API (tests/fixtures/k8s/), and the head pod's job
server of tests/support/_ray_jobs.py on the same fake clock the driver waits on; `cli_on` runs the CLI on it with
the steps before `submit` stood in."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
from _aws_run import NCCL, SUMMARY, KubeWithExec
from _pod_requests import PodAction, pod_request
from _ray_jobs import Clock, FakeRayJobs, Fault, JobScript, train_lines
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION

from automation import cli, scaling, steps
from automation.aws_clients import Eks
from automation.commands import run_steps
from automation.kube import ExecResult
from automation.pipeline import StepResult
from automation.scaling import NodeGroupRef
from automation.targets import aws

HOURS = 3
STEPS = 540  # a step every 20 s of the 3 hours: 1,080 log lines
STOOD_IN = ("preflight", "preview", "up", "verify")
REF = NodeGroupRef(MOTO_CLUSTER, MOTO_NODEGROUP)
EFA_LOG = NCCL / "efa_unprefixed_ofi1.20.log"
RUN_BUCKET = "ray-efa-eks-us-west-2-render"


@dataclass
class World:
    """One cluster with its job server on a fake clock; what the driver showed and when it scaled."""

    eks: Eks  # the moto-backed boto3 EKS client
    faults: list[Fault] = field(default_factory=list)
    interrupt_at: float | None = None  # Ctrl-C at the first wait at or after this fake time
    clock: Clock = field(default_factory=Clock)
    shown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    scaled: list[tuple[float, int, tuple[str, ...]]] = field(default_factory=list)  # (time, size, job states)
    reports: list[dict] = field(default_factory=list)
    # The GPU nodes' EFA counters (the `counters` step reads them before the job, `check` after it); the job
    # moves the model's bytes for the summary's steps as it is submitted.
    efa: helpers.FakeEfaNodes = field(default_factory=helpers.FakeEfaNodes.of_fixture)

    def __post_init__(self) -> None:
        # The run bucket of outputs()'s storage_uri: the counters step keeps its reading there for `attach`.
        s3 = boto3.client("s3", region_name=MOTO_REGION)
        if RUN_BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=RUN_BUCKET, CreateBucketConfiguration={"LocationConstraint": MOTO_REGION})
        script = JobScript(train_lines(STEPS), run_s=HOURS * 3600)
        self.jobs = FakeRayJobs(self.clock, lambda job_id: script, faults=list(self.faults))

    def sleep(self, seconds: float) -> None:
        if self.interrupt_at is not None and self.clock() >= self.interrupt_at:
            self.interrupt_at = None
            raise KeyboardInterrupt
        self.clock.sleep(seconds)

    def exec(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600) -> ExecResult:
        """The pods: the EFA counters, the head's job server, the workloads upload, the summary, each worker's
        NCCL logs."""
        request = pod_request(list(command))
        if request is None:
            raise AssertionError(f"unexpected command {command}")
        if request.job is not None and request.job.action == "submit":
            self.efa.job_ran(helpers.predicted_job_bytes(int(str(SUMMARY["steps"]))))
        answer = self.jobs.answer(pod, command, on_line) or helpers.routine_answer(request, pod, self.efa)
        if answer is not None:
            return answer
        if request.action is PodAction.READ_FILE:
            return ExecResult(0, json.dumps(SUMMARY), "")
        if request.action is PodAction.COLLECT_LOGS:
            return ExecResult(0, helpers.tar_b64({f"nccl.rank0.{EFA_LOG.stem}.1.log": EFA_LOG.read_bytes()}), "")
        raise AssertionError(f"unexpected request {request}")

    def client(self, name: str):
        return RecordingEks(self) if name == "eks" else boto3.client(name, region_name=MOTO_REGION)

    def job_states(self) -> tuple[str, ...]:
        return tuple(job.status(self.clock()) for job in self.jobs.jobs.values())


class RecordingEks:
    """moto's EKS client; each UpdateNodegroupConfig is recorded with the fake time and the jobs' states."""

    def __init__(self, world: World):
        self.world = world

    def update_nodegroup_config(self, **kwargs):
        w = self.world
        w.scaled.append((w.clock(), kwargs["scalingConfig"]["desiredSize"], w.job_states()))
        return w.eks.update_nodegroup_config(**kwargs)

    def __getattr__(self, name):
        return getattr(self.world.eks, name)


def outputs(api) -> dict:
    return {
        "region": MOTO_REGION,
        "cluster_name": MOTO_CLUSTER,
        "nodegroup_name": MOTO_NODEGROUP,
        "kubeconfig": json.dumps(api.kubeconfig()),
        "raycluster_name": "ray-efa",
        "raycluster_namespace": "ray",
        "storage_uri": f"s3://{RUN_BUCKET}/us-west-2/runs",
    }


def cli_on(world: World, monkeypatch, argv: list[str], interactive: bool = False, answer: bool = False) -> dict:
    """`python -m automation ARGV` in this process, its target on `world`; the JSON document and exit code."""
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))

        def open_stack(name, *, run_id=None, **options):
            deps = aws.AwsDeps(
                client=world.client,
                stack=lambda: stack,
                kube=lambda kc: KubeWithExec(kc, world.exec),
                confirm=lambda question: answer,
                clock=scaling.Clock(now=world.clock, sleep=world.sleep),
                interactive=lambda: interactive,
            )
            known = {k: options[k] for k in ("yes", "detach", "job_timeout_s", "attach_job") if k in options}
            run = aws.AwsRun(helpers.stack_config(), run_id or "r1", **known)
            return aws.AwsTarget(run, deps, on_line=world.shown.append, on_note=world.notes.append)

        monkeypatch.setattr(aws, "open_stack", open_stack)
        for name in STOOD_IN:
            monkeypatch.setitem(steps.STEPS, name, lambda t, p, name=name: StepResult(name, "pass", "stood in"))

        def run_files(target: object, root: object, doc: dict) -> dict:
            world.reports.append(doc)
            return {}

        monkeypatch.setattr(run_steps, "run_files", run_files)
        return {"rc": cli.main([*argv, "--json"])}


def doc_of(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def step(doc: dict, name: str) -> dict:
    return next(s for s in doc["steps"] if s["step"] == name)
