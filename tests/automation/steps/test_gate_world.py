"""The gate before training (automation/steps/gate.py) in the fake world of tests/support/_aws_run.py:
the recorded cluster (tests/fixtures/k8s/), moto's EKS node group, a scripted exec whose pods answer nvidia-smi and the
all-reduce. A bad node at the gate is named and cordoned, nothing is submitted and the run controller's finally
leaves the GPU node group at its idle size (gpuIdleNodes, 0)."""

from __future__ import annotations

import dataclasses

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import _worlds as worlds
import boto3
import pytest
from _aws_run import cluster_exec, make_target, outputs
from _bench_world import Ui
from _pod_requests import PodAction, pod_request
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION

from automation.run_controller import RunController
from automation.scaling import NodeGroupRef, set_desired, sizes

REF = NodeGroupRef(MOTO_CLUSTER, MOTO_NODEGROUP)
BAD = worlds.GPU_NODE
ECC_SMI = helpers.HEALTHY_SMI.replace(
    f"1, NVIDIA L4, {helpers.L4_UUIDS[1]}, 0,", f"1, NVIDIA L4, {helpers.L4_UUIDS[1]}, 2,"
)
THREE_GPUS_SMI = "".join(helpers.HEALTHY_SMI.splitlines(keepends=True)[:3])


@pytest.fixture(autouse=True)
def aws(moto_eks, monkeypatch):  # as tests/support/_aws_run.py's: moto's EKS holds the GPU node group, AWS CLI v2
    monkeypatch.setattr(
        "automation.steps.preflight.aws_cli_version", lambda path: "aws-cli/2.22.0 Python/3.12.6 Linux/6.1.0"
    )


def gated_run(steps, smi_on_bad=helpers.HEALTHY_SMI, link_s=helpers.HEALTHY_LINK_S, objects=None, **flags):
    """`steps` under a run controller in the world; the bad node's pods print `smi_on_bad`, the all-reduce takes
    `link_s` a call. Returns (the pipeline result, the fake API, the jobs submitted, the node group's desired size)."""
    eks = boto3.client("eks", region_name=MOTO_REGION)
    set_desired(eks, REF, 0)  # the last run left the GPU nodes at gpuIdleNodes
    objects = objects or helpers.load_k8s()
    node_of = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in objects["pods"]["items"]}
    base = cluster_exec()

    def answer(pod, cmd, stdin):
        request = pod_request(cmd)
        if request is not None and request.action in (PodAction.NVIDIA_SMI, PodAction.READ_FILE):
            smi = smi_on_bad if node_of.get(pod) == BAD else helpers.HEALTHY_SMI
            if (gate := helpers.gate_answer(request, smi, link_s)) is not None:
                return gate
        return base.answer(pod, cmd, stdin)

    pod_exec = helpers.ScriptedExec(answer)
    with helpers.FakeKubeApi(objects) as api:
        target = make_target(api, helpers.FakeStack("us-west-2", outputs=outputs(api)), pod_exec=pod_exec)
        target.run = dataclasses.replace(target.run, **flags)
        results = []
        owner = RunController(target, Ui())
        owner.run(lambda owner: results.append(owner.steps(steps)) or results[0], lambda result: 0)
    return results[0], api, list(base.jobs.jobs), sizes(eks, REF)["desiredSize"]


def gate_row(result, check):
    return next(f for f in result.state.gate.findings if f.check == check)


def cordoned(api) -> list[str]:
    return [p.split("/")[-1] for p in api.requests if p.startswith("PATCH /api/v1/nodes/")]


def test_a_healthy_world_passes_the_gate_and_trains():
    result, api, submitted, _ = gated_run(("scale-up", "verify", "gate", "submit", "follow"))
    assert (result.ok, result.state.gate.status, cordoned(api), len(submitted)) == (True, "pass", [], 1), (
        f"expected the gate to pass and one job submitted, got {result.reason!r}, {cordoned(api)}, {submitted}"
    )


def test_a_node_with_three_gpus_is_named_cordoned_and_nothing_trains():
    result, api, submitted, idle = gated_run(("scale-up", "gate", "submit", "follow"), smi_on_bad=THREE_GPUS_SMI)
    row = gate_row(result, f"GPUs of {BAD}")
    assert (result.failed_step, "lists 3 GPUs, expected 4" in row.detail, cordoned(api), submitted, idle) == (
        "gate",
        True,
        [BAD],
        [],
        0,
    ), f"got {result.failed_step}, {row.detail!r}, cordoned {cordoned(api)}, submitted {submitted}, desired {idle}"


def test_a_node_with_an_uncorrected_ecc_error_is_named_cordoned_and_nothing_trains():
    result, api, submitted, idle = gated_run(("scale-up", "gate", "submit", "follow"), smi_on_bad=ECC_SMI)
    row = gate_row(result, f"GPUs of {BAD}")
    assert ("GPU 1" in row.detail and "2 uncorrected ECC" in row.detail, cordoned(api), submitted, idle) == (
        True,
        [BAD],
        [],
        0,
    ), f"got {row.detail!r}, cordoned {cordoned(api)}, submitted {submitted}, desired {idle}"


def test_a_node_whose_gpu_condition_is_false_is_named_cordoned_and_nothing_trains():
    objects = helpers.load_k8s()
    worlds.gpu_fallen_off_the_bus(objects)  # verify would stop here first; the gate checks it again itself
    result, api, submitted, idle = gated_run(("scale-up", "gate", "submit", "follow"), objects=objects)
    row = gate_row(result, f"GPUs of {BAD}")
    assert ("AcceleratedHardwareReady False (NvidiaXID79Error)" in row.detail, cordoned(api), submitted, idle) == (
        True,
        [BAD],
        [],
        0,
    ), f"got {row.detail!r}, cordoned {cordoned(api)}, submitted {submitted}, desired {idle}"


def test_a_slow_link_names_both_nodes_with_measured_and_required_bandwidth():
    result, api, submitted, idle = gated_run(("scale-up", "gate", "submit", "follow"), link_s=helpers.SLOW_LINK_S)
    row = gate_row(result, "EFA between the GPU nodes")
    both = sorted([worlds.GPU_NODE, worlds.OTHER_GPU_NODE])
    shown = "bus bandwidth 18.8 Gbps, required 20.0 Gbps" in row.detail
    assert (row.status, shown, sorted(cordoned(api)), submitted, idle) == ("fail", True, both, [], 0), (
        f"got {row.status} {row.detail!r}, cordoned {cordoned(api)}, submitted {submitted}, desired {idle}"
    )


def test_skip_gate_skips_with_its_line_and_cordons_nothing():
    result, api, _, _ = gated_run(("scale-up", "gate"), smi_on_bad=THREE_GPUS_SMI, skip_gate=True)
    gate = result.state.gate
    assert (gate.status, gate.summary.startswith("--skip-gate: the gate before training"), cordoned(api)) == (
        "skip",
        True,
        [],
    ), f"got {gate.status} {gate.summary!r}, cordoned {cordoned(api)}"
