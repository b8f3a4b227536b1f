"""automation/steps/gate.py's rules, one boundary at a time: how each nvidia-smi field is read (NVIDIA's nvidia-smi(1)
"--query-gpu", `--format=csv,noheader,nounits`: comma-separated, `[N/A]` or `[Not Supported]` where the GPU does not
report a field, `Yes`/`No` for the remapped-rows flags), what a node's row says, and the link's share. The L4 line's
shape is the public capture test_gate.py cites; the ECC and remap columns are set per test."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automation.collectives_pods import WorkerPod
from automation.errors import DriverError
from automation.kube import ExecResult
from automation.pipeline import GateOutcome, RunState
from automation.steps import gate
from automation.steps.gate import (
    GATE_SHARE,
    GATE_SWEEP,
    NOT_REPORTED,
    NVIDIA_SMI_COMMAND,
    SKIP_GATE_HELP,
    Gpu,
    check_link,
    check_node,
    gpu_problems,
    parse_nvidia_smi,
)
from automation.targets.aws import AwsTarget
from automation.targets.local import LocalTarget
from infra.names import GPU_NODE_SELECTOR
from workloads import throughput_model

L4 = "0, NVIDIA L4, GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


def smi(ecc: str = "0", pending: str = "No", failed: str = "No", index: int = 0) -> str:
    return f"{index}, NVIDIA L4, GPU-{index}, {ecc}, {pending}, {failed}\n"


def test_the_query_names_every_field_read_in_csv_without_header_or_units():
    want = [
        "nvidia-smi",
        "--query-gpu=index,name,uuid,ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure",
        "--format=csv,noheader,nounits",
    ]
    assert NVIDIA_SMI_COMMAND == want, f"expected {want}, got {NVIDIA_SMI_COMMAND}"


@pytest.mark.parametrize("word, flag", [("Yes", True), ("No", False), ("1", True), ("0", False), ("NO", False)])
def test_a_remap_flag_reads_yes_or_one_as_set_and_no_or_zero_as_clear(word, flag):
    (gpu,) = parse_nvidia_smi(smi(pending=word, failed=word))
    assert (gpu.remap_pending, gpu.remap_failed) == (flag, flag), f"expected {word!r} as {flag}, got {gpu}"


@pytest.mark.parametrize("word", NOT_REPORTED[:-1])
def test_every_not_reported_spelling_is_neither_pass_nor_fail(word):
    (gpu,) = parse_nvidia_smi(smi(ecc=word, pending=word, failed=word))
    assert (gpu.ecc_uncorrected, gpu.remap_pending, gpu.remap_failed) == (None, None, None), f"{word!r}: {gpu}"


def test_fields_are_read_with_their_spaces_stripped_and_blank_lines_skipped():
    gpus = parse_nvidia_smi(f"\n  {L4},   3 ,  Yes , No  \n\n")
    want = [Gpu("0", "NVIDIA L4", "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c", 3, True, False)]
    assert gpus == want, f"expected {want}, got {gpus}"


def test_a_line_with_an_extra_field_is_refused_quoting_it():
    with pytest.raises(ValueError) as e:
        parse_nvidia_smi(f"{L4}, 0, No, No, extra\n")
    assert str(e.value) == f"expected 6 fields, got '{L4}, 0, No, No, extra'", str(e.value)


def test_each_unhealthy_gpu_is_named_with_its_index_uuid_and_count():
    gpus = parse_nvidia_smi(smi(ecc="2") + smi(index=1) + smi(ecc="[N/A]", pending="Yes", failed="Yes", index=2))
    want = [
        "GPU 0 (GPU-0) has 2 uncorrected ECC error(s)",
        "GPU 2 (GPU-2) has a row remap pending (a GPU reset is needed)",
        "GPU 2 (GPU-2) has a failed row remap",
    ]
    assert gpu_problems(gpus, 3) == want, f"expected {want}, got {gpu_problems(gpus, 3)}"


def test_more_gpus_than_expected_is_a_problem_too():
    got = gpu_problems(parse_nvidia_smi(smi() + smi(index=1)), 1)
    assert got == ["nvidia-smi lists 2 GPUs, expected 1"], got


def test_a_healthy_node_passes_saying_what_was_checked():
    got = check_node("n1", "p1", 0, smi() + smi(index=1), "", 2)
    want = ("pass", "GPUs of n1", "2 GPUs, no uncorrected ECC error, no row remap pending or failed", "")
    assert (got.status, got.check, got.detail, got.fix) == want, f"expected {want}, got {got}"


def test_a_failing_node_joins_every_problem_and_the_agents_condition_and_says_the_fix():
    got = check_node("n1", "p1", 0, smi(ecc="1"), "AcceleratedHardwareReady False (NvidiaXID79Error)", 2)
    want = (
        "fail",
        "nvidia-smi lists 1 GPUs, expected 2; GPU 0 (GPU-0) has 1 uncorrected ECC error(s); "
        "AcceleratedHardwareReady False (NvidiaXID79Error)",
        "cordoned; kubectl describe node n1; nvidia-smi -q in p1; EKS node auto repair replaces a node whose GPU "
        "condition is False",
    )
    assert (got.status, got.detail, got.fix) == want, f"expected {want}, got {got}"


def test_the_agents_condition_alone_fails_a_node_with_healthy_gpus():
    got = check_node("n1", "p1", 0, smi(), "no AcceleratedHardwareReady condition", 1)
    assert (got.status, got.detail) == ("fail", "no AcceleratedHardwareReady condition"), got


def test_nvidia_smi_exiting_non_zero_fails_the_node_without_reading_its_output():
    got = check_node("n1", "p1", 9, "garbage", "", 1)
    assert (got.status, got.detail) == ("fail", "nvidia-smi exited 9"), got


def test_unreadable_nvidia_smi_output_fails_the_node_saying_why():
    got = check_node("n1", "p1", 0, "0, NVIDIA L4\n", "", 1)
    want = "cannot read nvidia-smi's output: expected 6 fields, got '0, NVIDIA L4'"
    assert (got.status, got.detail) == ("fail", want), got


def test_an_ecc_count_that_is_not_a_number_fails_the_node():
    got = check_node("n1", "p1", 0, smi(ecc="lots"), "", 1)
    assert got.status == "fail" and got.detail.startswith("cannot read nvidia-smi's output"), got


def sweep(busbw_gbs: float, nodes: int = 2, backend: str = "nccl") -> dict:
    """A `bench --collectives` document (workloads/collectives_bench.py): the largest all_reduce row is the one read."""
    rows = [
        {"op": "all_reduce", "bytes": 1, "busbw_gbs": 99.0},
        {"op": "all_reduce", "bytes": 2, "busbw_gbs": busbw_gbs},
    ]
    return {"backend": backend, "nodes": nodes, "rows": rows}


def test_the_link_below_its_share_fails_naming_both_nodes_measured_and_required():
    got = check_link(sweep(GATE_SHARE * 40.0 / 8 - 0.01), ["a", "b"], 40.0)
    detail = (
        f"all-reduce of {GATE_SWEEP['max_mib']} MiB between a, b: bus bandwidth 19.9 Gbps, required 20.0 Gbps "
        "(50% of the 40 Gbps the throughput model assumes)"
    )
    fix = "cordoned a, b; `python -m automation bench --collectives --stack S` measures the link"
    want = ("EFA between the GPU nodes", "fail", detail, fix)
    assert (got.check, got.status, got.detail, got.fix) == want, f"expected {want}; got {got}"


def test_a_sweep_that_crossed_no_nic_fails_naming_the_nodes_and_cordoning_nothing():
    got = check_link(sweep(5.0, nodes=1), ["a", "b"], 40.0)
    assert (got.check, got.status, got.fix) == ("EFA between the GPU nodes", "fail", "") and got.detail.endswith(
        "(between a, b)"
    ), got
    assert got.detail.startswith("the gate's all-reduce: backend 'nccl' on 1 node(s)"), got


# ---- the step, in process -----------------------------------------------------------------------------------------
# The target stands in for automation/targets/aws.py's AwsTarget (a subclass, so `by_place` picks run_aws) with only
# what the gate reads; its Kubernetes client records the exec limits and the cordons (automation/kube.py: list_nodes,
# exec, cordon_node); the sweep over the pods (automation/collectives_pods.py) stands in, returning `link`'s document.
PODS = [WorkerPod("w0", "10.0.0.1", "n0"), WorkerPod("w1", "10.0.0.2", "n1")]
GOOD = "".join(smi(index=i) for i in range(4))


def gpu_node(name: str, status: str = "True") -> dict:
    """A GPU node with the agent's GPU condition (core/v1 NodeCondition)."""
    cond = {"type": "AcceleratedHardwareReady", "status": status, "reason": "NvidiaXID79Error"}
    return {"metadata": {"name": name}, "status": {"conditions": [cond]}}


def expect(what: str, got: object, want: object) -> None:
    """A stand-in's check of what the gate passed it."""
    assert got == want, f"{what}: expected {want!r}, got {got!r}"


class Kube:
    def __init__(self, smi_of: dict[str, str], nodes: list[dict]) -> None:
        self.smi_of, self.nodes, self.cordoned, self.limits = smi_of, nodes, list[str](), list[float]()

    def list_nodes(self, selector: str) -> list[dict]:
        expect("the nodes' selector", selector, GPU_NODE_SELECTOR)
        return self.nodes

    def exec(self, pod: str, namespace: str, command: list[str], *, timeout_s: float = 600) -> ExecResult:
        expect("nvidia-smi's namespace and command", (namespace, command), ("ns", NVIDIA_SMI_COMMAND))
        self.limits.append(timeout_s)
        return ExecResult(0, self.smi_of[pod], "")

    def cordon_node(self, node: str) -> None:
        self.cordoned.append(node)


class Target(AwsTarget):
    def __init__(self, kube: Kube, skip_gate: bool = False, lease: bool = True) -> None:  # nothing of AWS opened
        gpu_nodes = SimpleNamespace(gpus_per_node=4)
        self.run = SimpleNamespace(skip_gate=skip_gate, cfg=SimpleNamespace(gpu_nodes=gpu_nodes))  # type: ignore
        self.handles = SimpleNamespace(lease=SimpleNamespace(renew=self.renewed) if lease else None)  # type: ignore
        self._kube, self.said = kube, list[str]()
        self.cluster = SimpleNamespace(namespace="ns", kube=kube)  # automation/kube.py RayClusterPods' fields read
        self.on_progress = self.said.append

    def renewed(self, why: str) -> None:
        self.said.append(f"lease renewed: {why}")

    def kube(self) -> Kube:  # type: ignore[override]
        return self._kube

    def ray_pods(self):
        return self.cluster


def gate_on(monkeypatch, smi_of=None, nodes=None, link: float | Exception = 5.0, **flags) -> tuple[Target, object]:
    kube = Kube(smi_of or {"w0": GOOD, "w1": GOOD}, [gpu_node("n0"), gpu_node("n1")] if nodes is None else nodes)
    target = Target(kube, **flags)

    def worker_pods(cluster):
        expect("the cluster", cluster, target.cluster)
        return PODS

    def copy_workloads(*a):
        expect("the copy's exec, pods and namespace", a, (kube.exec, PODS, "ns"))
        target.said.append("copied")

    def sweep_on(*a):
        expect(
            "the sweep's exec, pods, namespace, GPUs, environment and sweep",
            a,
            (kube.exec, PODS, "ns", 4, {}, GATE_SWEEP),
        )
        if isinstance(link, Exception):
            raise link
        return sweep(link)

    monkeypatch.setattr(gate.collectives_pods, "worker_pods", worker_pods)
    monkeypatch.setattr(gate.collectives_pods, "copy_workloads", copy_workloads)
    monkeypatch.setattr(gate.collectives_pods, "sweep_on", sweep_on)
    return target, gate.run(target, RunState())


def test_healthy_nodes_and_link_pass_cordoning_nothing(monkeypatch):
    target, result = gate_on(monkeypatch)
    said = [
        "the gate: nvidia-smi on 2 GPU nodes",
        f"the gate: a {GATE_SWEEP['max_mib']} MiB all-reduce over EFA between the nodes",
        "lease renewed: gate",
        "copied",
    ]
    got = (result.step, result.status, result.summary, result.data, target.kube().cordoned, target.said)
    want = ("gate", "pass", "2 GPU nodes fit to train", GateOutcome(()), [], said)
    assert got == want, f"expected {want}, got {got}"


def test_without_a_lease_the_link_is_still_checked(monkeypatch):
    target, result = gate_on(monkeypatch, lease=False)
    assert (result.status, "copied" in target.said) == ("pass", True), f"got {result.status}, {target.said}"


def test_a_bad_node_is_cordoned_alone_and_the_link_is_not_swept(monkeypatch):
    target, result = gate_on(monkeypatch, smi_of={"w0": GOOD, "w1": smi(ecc="3") + GOOD})
    got = (result.status, result.data, target.kube().cordoned, "copied" in target.said, result.summary)
    assert got[:4] == ("fail", GateOutcome(("n1",)), ["n1"], False), f"expected only n1 cordoned, got {got}"
    assert result.summary.endswith("; cordoned n1"), f"expected the summary to name the cordon: {result.summary!r}"
    fix = next(f.fix for f in result.findings if f.check == "GPUs of n1")
    assert "nvidia-smi -q in w1;" in fix, f"expected the fix to name n1's pod w1, got {fix!r}"
    assert target.kube().limits == [60, 60], (
        f"expected nvidia-smi bounded by 60 s in each pod, got {target.kube().limits}"
    )


def test_every_bad_node_is_cordoned(monkeypatch):
    bad = smi(ecc="1")
    target, result = gate_on(monkeypatch, smi_of={"w0": bad, "w1": bad})
    assert target.kube().cordoned == ["n0", "n1"], f"expected both cordoned, got {target.kube().cordoned}"


def test_a_node_the_api_does_not_list_fails_for_its_missing_gpu_condition(monkeypatch):
    target, result = gate_on(monkeypatch, nodes=[gpu_node("n0")])
    row = next(f for f in result.findings if f.check == "GPUs of n1")
    got = (row.status, row.detail, target.kube().cordoned)
    assert got == ("fail", "no AcceleratedHardwareReady condition", ["n1"]), f"got {got}"


def test_a_gpu_condition_false_fails_its_node(monkeypatch):
    target, result = gate_on(monkeypatch, nodes=[gpu_node("n0"), gpu_node("n1", "False")])
    assert target.kube().cordoned == ["n1"], f"expected n1 cordoned, got {target.kube().cordoned}"


def test_a_slow_link_cordons_every_node(monkeypatch):
    target, result = gate_on(monkeypatch, link=1.0)
    got = (result.status, result.data, target.kube().cordoned, result.summary.endswith("; cordoned n0, n1"))
    assert got == ("fail", GateOutcome(("n0", "n1")), ["n0", "n1"], True), f"got {got}, {result.summary!r}"


def test_a_sweep_that_cannot_run_fails_the_gate_and_cordons_nothing(monkeypatch):
    target, result = gate_on(monkeypatch, link=DriverError("pod w1: torchrun exited 1"))
    row = result.findings[-1]
    got = (result.status, target.kube().cordoned, row.check, row.detail, row.fix, result.data)
    fix = "kubectl logs and describe the pod named"
    want = ("fail", [], "EFA between the GPU nodes", "pod w1: torchrun exited 1", fix, GateOutcome(()))
    assert got == want, f"expected {want}, got {got}"


def test_a_sweep_that_crossed_no_nic_cordons_nothing(monkeypatch):
    monkeypatch.setattr(gate, "check_link", lambda doc, nodes, gbps: check_link(sweep(5.0, nodes=1), nodes, gbps))
    target, result = gate_on(monkeypatch)
    assert (result.status, target.kube().cordoned) == ("fail", []), f"got {result.status}, {target.kube().cordoned}"


def test_the_link_is_held_to_the_throughput_models_efa_rate(monkeypatch):
    seen: list[float] = []
    monkeypatch.setattr(gate, "check_link", lambda doc, nodes, gbps: seen.append(gbps) or check_link(doc, nodes, gbps))
    gate_on(monkeypatch)
    assert seen == [throughput_model.NIC_GBPS["efa"]], f"expected the model's EFA rate, got {seen}"


def test_skip_gate_runs_and_cordons_nothing(monkeypatch):
    target, result = gate_on(monkeypatch, smi_of={"w0": "", "w1": ""}, skip_gate=True)
    want = f"--skip-gate: {SKIP_GATE_HELP.removeprefix('skip ')}"
    got = (result.step, result.status, result.summary, target.said, target.kube().cordoned)
    assert got == ("gate", "skip", want, [], []), f"expected {want!r}, got {got}"


def test_the_local_target_has_no_gpu_nodes_to_gate(tmp_path):
    result = gate.run(LocalTarget(tmp_path), RunState())
    want = ("gate", "skip", "the local target has no GPU nodes to gate: nothing checked")
    assert (result.step, result.status, result.summary) == want, f"expected {want}, got {result}"


# ---- the property: every node judged, each on its own GPUs (issue 48: "any" where the promise is "every") -----------
FAULTS = ("healthy", "ecc", "pending", "failed", "short", "condition")


def node_smi(fault: str, gpu: int) -> str:
    """Four GPUs as nvidia-smi prints them, GPU `gpu` showing `fault` (`short`: that GPU missing)."""
    lines = []
    for i in range(4):
        bad = i == gpu
        if bad and fault == "short":
            continue
        ecc = "1" if bad and fault == "ecc" else "0"
        lines.append(
            smi(ecc, "Yes" if bad and fault == "pending" else "No", "Yes" if bad and fault == "failed" else "No", i)
        )
    return "".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(FAULTS), st.integers(0, 3)), min_size=2, max_size=5))
def test_exactly_the_nodes_with_a_fault_are_cordoned_whatever_the_layout(monkeypatch, layout):
    pods = [WorkerPod(f"w{i}", f"10.0.0.{i}", f"n{i}") for i in range(len(layout))]
    smi_of = {f"w{i}": node_smi(fault, gpu) for i, (fault, gpu) in enumerate(layout)}
    kube = Kube(smi_of, [gpu_node(f"n{i}", "False" if f == "condition" else "True") for i, (f, _) in enumerate(layout)])
    monkeypatch.setattr(gate.collectives_pods, "worker_pods", lambda cluster: pods)
    monkeypatch.setattr(gate.collectives_pods, "copy_workloads", lambda *a: None)
    monkeypatch.setattr(gate.collectives_pods, "sweep_on", lambda *a: sweep(5.0))
    result = gate.run(Target(kube), RunState())
    want = [f"n{i}" for i, (fault, _) in enumerate(layout) if fault != "healthy"]
    got = (result.status, kube.cordoned)
    assert got == ("fail" if want else "pass", want), f"layout {layout}: expected {want} cordoned, got {got}"
