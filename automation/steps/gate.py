"""gate: the GPU nodes are fit to train, checked right before any job is submitted.

On each GPU node, in one Ray worker pod there: its GPUs as `nvidia-smi` reports them (as many as the stack promises,
no uncorrected ECC error since the driver loaded, no row remap pending or failed) and the node monitoring agent's GPU
condition. Between the nodes: one short all-reduce over EFA (automation/collectives_pods.py, about 20 s) whose bus
bandwidth must reach GATE_SHARE of the link rate workloads/throughput_model.py assumes. A failing node is cordoned and
named; the step fails, so no job is submitted and the run controller scales the GPU nodes down. verify asks "is the
cluster what the stack promised?"; the gate "are these nodes healthy enough to spend money training on?", a separate
step so `--skip-gate` (SKIP_GATE_HELP) skips it alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from automation import collectives_pods
from automation.errors import DriverError
from automation.pipeline import Finding, GateOutcome, Prior, StepResult, verdict
from automation.steps.place import by_place
from automation.steps.verify_checks import gpu_health, name_of
from automation.targets.aws import AwsTarget
from infra.names import GPU_NODE_SELECTOR
from workloads import throughput_model

SKIP_GATE_HELP = (
    "skip the gate before training (nvidia-smi's GPU count, ECC and row-remap state and the node monitoring "
    "agent's GPU condition on each GPU node, and the short all-reduce over EFA between them); nothing is cordoned"
)
# The fields read, one per Gpu field, as `nvidia-smi --help-query-gpu` names them (NVIDIA's nvidia-smi(1),
# "--query-gpu"; their meaning is NVML's: ECC counts since the driver loaded, and nvmlRemappedRowsInfo's bPending ("a
# reset is needed") and bFailureOccurred, https://docs.nvidia.com/deploy/nvml-api/api/structnvmlRemappedRowsInfo__v2__t.html).
NVIDIA_SMI_COMMAND = [
    "nvidia-smi",
    "--query-gpu=index,name,uuid,ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure",
    "--format=csv,noheader,nounits",
]
# What nvidia-smi prints for a field the GPU does not support (nvidia-smi(1): "Any unsupported data is indicated by
# a N/A"; in CSV as `[N/A]`, or `[Not Supported]`). Row remapping is an HBM feature of Ampere and later: the L4's
# GDDR6 may leave it unreported, which is neither a pass nor a fail of that row.
NOT_REPORTED = ("[N/A]", "N/A", "[Not Supported]", "Not Supported", "")
# The share of the throughput model's EFA rate the all-reduce's bus bandwidth must reach. Half: nccl-tests' busbw on
# a healthy link lands well above it at 256 MiB (the default training job was chosen to hide the network at the
# full rate with margin, workloads/throughput_model.py's choose_default), while a link that falls back to fewer EFA
# paths, a misconfigured NIC or a sick peer shows as a fraction of it.
GATE_SHARE = 0.5
# One size, few calls: about 20 s with torchrun's and NCCL's start; the label names the result file in the pod.
GATE_SWEEP = {"label": "gate", "min_mib": 256, "max_mib": 256, "iters": 5, "timeout_s": 300}


@dataclass(frozen=True)
class Gpu:
    """One line of NVIDIA_SMI_COMMAND's output; None where nvidia-smi did not report the field."""

    index: str
    name: str
    uuid: str
    ecc_uncorrected: int | None
    remap_pending: bool | None
    remap_failed: bool | None


def _flag(value: str) -> bool | None:
    return None if value in NOT_REPORTED else value.lower() not in ("no", "0")


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """The GPUs of NVIDIA_SMI_COMMAND's output; ValueError on a line with another number of fields."""
    gpus, fields = [], len(dataclasses.fields(Gpu))
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != fields:
            raise ValueError(f"expected {fields} fields, got {line!r}")
        index, name, uuid, ecc, pending, failed = cells
        gpus.append(Gpu(index, name, uuid, None if ecc in NOT_REPORTED else int(ecc), _flag(pending), _flag(failed)))
    return gpus


def gpu_problems(gpus: Sequence[Gpu], expected: int) -> list[str]:
    """What is wrong with a node's GPUs: the count, then each GPU's uncorrected ECC errors and row remaps."""
    problems = [f"nvidia-smi lists {len(gpus)} GPUs, expected {expected}"] if len(gpus) != expected else []
    for g in gpus:
        if g.ecc_uncorrected:
            problems.append(f"GPU {g.index} ({g.uuid}) has {g.ecc_uncorrected} uncorrected ECC error(s)")
        if g.remap_pending:
            problems.append(f"GPU {g.index} ({g.uuid}) has a row remap pending (a GPU reset is needed)")
        if g.remap_failed:
            problems.append(f"GPU {g.index} ({g.uuid}) has a failed row remap")
    return problems


def check_node(node: str, pod: str, rc: int, output: str, agent: str, expected: int) -> Finding:
    """One GPU node's row: nvidia-smi in `pod` (exit `rc`, `output`) and the agent's condition (`agent`, '' if True)."""
    try:
        problems = gpu_problems(parse_nvidia_smi(output), expected) if rc == 0 else [f"nvidia-smi exited {rc}"]
    except ValueError as e:
        problems = [f"cannot read nvidia-smi's output: {e}"]
    problems += [agent] if agent else []
    return Finding.judged(
        f"GPUs of {node}",
        not problems,
        "; ".join(problems) or f"{expected} GPUs, no uncorrected ECC error, no row remap pending or failed",
        f"cordoned; kubectl describe node {node}; nvidia-smi -q in {pod}; EKS node auto repair replaces a node whose "
        "GPU condition is False",
    )


def check_link(doc: Mapping, nodes: Sequence[str], link_gbps: float) -> Finding:
    """The sweep's all-reduce bus bandwidth against GATE_SHARE of `link_gbps`; both nodes named when below, as one
    collective's time cannot tell which end is slow."""
    need = GATE_SHARE * link_gbps
    try:
        got = throughput_model.measured_nic_gbps(dict(doc), "the gate's all-reduce")
    except SystemExit as e:
        return Finding("EFA between the GPU nodes", "fail", f"{e} (between {', '.join(nodes)})", "")
    return Finding.judged(
        "EFA between the GPU nodes",
        got >= need,
        f"all-reduce of {GATE_SWEEP['max_mib']} MiB between {', '.join(nodes)}: bus bandwidth {got:.1f} Gbps, "
        f"required {need:.1f} Gbps ({GATE_SHARE:.0%} of the {link_gbps:g} Gbps the throughput model assumes)",
        f"cordoned {', '.join(nodes)}; `python -m automation bench --collectives --stack S` measures the link",
    )


def run_aws(target: AwsTarget, prior: Prior) -> StepResult[GateOutcome]:
    """Each node (nvidia-smi in its worker pod, the agent's condition), then (all healthy) the link: GATE_SWEEP in
    the pods, judged by `check_link`; every node a failing row names cordoned (none when the sweep cannot run)."""
    if target.run.skip_gate:
        return StepResult("gate", "skip", f"--skip-gate: {SKIP_GATE_HELP.removeprefix('skip ')}")
    cluster, gpus = target.ray_pods(), target.cfg.gpu_nodes.gpus_per_node
    pods = collectives_pods.worker_pods(cluster)
    target.on_progress(f"the gate: nvidia-smi on {len(pods)} GPU nodes")
    nodes = {name_of(n): n for n in cluster.kube.list_nodes(GPU_NODE_SELECTOR)}
    rows = []
    for pod in pods:
        res = cluster.kube.exec(pod.name, cluster.namespace, NVIDIA_SMI_COMMAND, timeout_s=60)
        agent = gpu_health(nodes.get(pod.node, {}))
        rows.append(check_node(pod.node, pod.name, res.rc, res.stdout + res.stderr, agent, gpus))
    bad = [pod.node for pod, row in zip(pods, rows, strict=True) if row.status == "fail"]
    if not bad:
        target.on_progress(f"the gate: a {GATE_SWEEP['max_mib']} MiB all-reduce over EFA between the nodes")
        if target.handles.lease is not None:  # no Ray job runs: the lease alone keeps the idle guard off
            target.handles.lease.renew("gate")
        try:
            collectives_pods.copy_workloads(cluster.kube.exec, pods, cluster.namespace)
            doc = collectives_pods.sweep_on(cluster.kube.exec, pods, cluster.namespace, gpus, {}, GATE_SWEEP)
            rows.append(check_link(doc, [p.node for p in pods], throughput_model.NIC_GBPS["efa"]))
        except DriverError as e:
            rows.append(Finding("EFA between the GPU nodes", "fail", str(e), "kubectl logs and describe the pod named"))
        bad = [p.node for p in pods] if rows[-1].status == "fail" and rows[-1].fix.startswith("cordoned") else []
    for node in bad:
        cluster.kube.cordon_node(node)
    result = verdict("gate", rows, GateOutcome(tuple(bad)), ok_summary=f"{len(pods)} GPU nodes fit to train")
    return dataclasses.replace(result, summary=f"{result.summary}; cordoned {', '.join(bad)}") if bad else result


run = by_place(
    "gate: the GPU nodes are fit to train (nvidia-smi, the agent's GPU condition, EFA bandwidth); a bad one cordoned.",
    run_aws,
    lambda target, prior: StepResult("gate", "skip", "the local target has no GPU nodes to gate: nothing checked"),
)
