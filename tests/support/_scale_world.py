"""The GPU node group's scaling as the run and the `scale` command drive it, over moto's EKS (the `eks` fixture of
each file) and the fake cluster: the AWS target, a run through chosen steps, and the `scale` command's arguments."""

from __future__ import annotations

import argparse

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
from _cloud_fakes import ClusterKube, FakeClock, guard_record
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION

from automation import cli
from automation.targets.aws import AwsDeps, AwsRun, AwsTarget


def target_for(
    api, eks=None, clock: FakeClock | None = None, jobs: list | tuple | None = (), yes: bool = True, **kw
) -> AwsTarget:
    """A target of the us-west-2 stack over moto (or ``eks``), the fake cluster ``api`` and a fake clock; its head
    answers the Ray job list ``jobs`` (None: the job API cannot be asked); ``yes``: as --yes, the scale-up asks
    nothing."""
    outputs = {
        "region": MOTO_REGION,
        "cluster_name": MOTO_CLUSTER,
        "nodegroup_name": MOTO_NODEGROUP,
        "kubeconfig": api.kubeconfig(),
    }
    deps = AwsDeps(
        client=lambda name: eks if name == "eks" and eks is not None else boto3.client(name, region_name=MOTO_REGION),
        stack=lambda: helpers.FakeStack("us-west-2", outputs=outputs),
        kube=lambda kubeconfig: ClusterKube(kubeconfig, None if jobs is None else list(jobs)),
        clock=(clock or FakeClock()).clock(),
        public_ip=helpers.deployer_ip,
    )
    return AwsTarget(AwsRun(helpers.stack_config(), "r1", yes=yes, **kw), deps)


def run_with_steps(
    monkeypatch, argv: list[str], failing: dict | None = None, real: dict | None = None, objects=None, **target_kw
) -> int:
    """`cli.main(argv)` with every pipeline step standing in (each passes, or raises what `failing` names for
    it, or runs what `real` gives for it) over a target on the fake cluster (``objects``; ``target_kw`` as
    `target_for` takes them): what is real is the end of the run, against moto."""
    from automation import steps
    from automation.pipeline import StepResult
    from automation.targets import aws

    def step(name: str, target, prior) -> StepResult:
        if failing and name in failing:
            raise failing[name]
        if real and name in real:
            return real[name](target, prior)
        return StepResult(name, "pass", "ok")

    with helpers.FakeKubeApi(objects) as api:
        made = target_for(api, **target_kw)
        monkeypatch.setattr(aws, "open_stack", lambda stack, **options: made)
        monkeypatch.setattr(
            aws.AwsTarget, "price", lambda self, gpu_nodes=None: aws.CostEstimate(None, (), "not priced")
        )
        for name in aws.PIPELINE:
            monkeypatch.setitem(steps.STEPS, name, lambda t, p, name=name: step(name, t, p))
        return cli.main(argv)


def scale_args(n: int, force: bool = False, **kw) -> argparse.Namespace:
    return argparse.Namespace(
        stack="us-west-2", gpu_nodes=n, wait=False, force=force, json=True, project_dir=helpers.REPO, **kw
    )


# ---- the lease and the idle guard, over a 53-minute start ---------------------------------------------------
def cluster_with_record() -> dict:
    objects = helpers.load_k8s()
    objects["configmaps"] = {"kind": "ConfigMapList", "apiVersion": "v1", "items": [guard_record()]}
    return objects
