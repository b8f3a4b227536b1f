"""`bench --collectives --stack S` against the fake Kubernetes API: workloads/collectives_bench.py started
at once in one worker pod per GPU node (a scripted exec records the torchrun lines), over EFA and again
with the TCP run's overrides, and rank 0's document read back from the first node's pod."""

from __future__ import annotations

import json

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
from _bench_world import Cluster, Ui, outputs
from _cloud_fakes import gpu_nodegroup
from _driver_helpers import KubeWithExec

from automation import cli
from automation.commands import bench
from automation.kube import ExecResult
from automation.targets.aws import AwsDeps
from workloads.collectives_bench import row

# pods.json: the two worker pods, by their nodes' names (ip-10-30-1-17 sorts first) and their IPs
FIRST = ("ray-efa-gpu-workers-worker-4kq7d", "10.30.1.51")
SECOND = "ray-efa-gpu-workers-worker-tz8mb"
# Rank 0's document as the bench writes it; the numbers are test values, not a measurement.
DOC = {"backend": "nccl", "world": 8, "nodes": 2, "nccl_tests": None, "rows": [row("all_reduce", 1 << 30, 8, 0.5)]}


def run_sweep(tmp_path):
    launched: list[tuple[str, str]] = []
    cluster = Cluster(tmp_path, {})  # bench's cluster answers what `verify` runs in the pods first

    def answer(pod, cmd, stdin):
        text = " ".join(cmd)
        if "base64 -d | tar" in text and "collectives" in text:
            return ExecResult(0, "", "")
        if "workloads.collectives_bench" in text:
            launched.append((pod, cmd[2]))
            return ExecResult(0, "table\n", "")
        if cmd[0] == "cat" and pod == FIRST[0]:
            return ExecResult(0, json.dumps(DOC), "")
        return cluster.answer(pod, cmd, stdin)

    ui = Ui()
    argv = ["bench", "--collectives", "--stack", "us-west-2", "--runs-root", str(tmp_path), "--json"]
    with helpers.FakeKubeApi() as api, gpu_nodegroup() as eks:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        deps = AwsDeps({"eks": eks}.get, lambda: stack, lambda kc: KubeWithExec(kc, helpers.ScriptedExec(answer)))
        rc = bench.run(cli.build_parser().parse_args(argv), ui, deps, node_wait_s=0, pod_wait_s=0)
    return rc, ui, launched


def test_each_leg_starts_one_torchrun_per_node_on_the_first_pods_address(tmp_path):
    _, _, launched = run_sweep(tmp_path)
    ranks = [(pod, f"--node-rank {line.split('--node-rank ')[1].split()[0]}") for pod, line in launched]
    expected = [(FIRST[0], "--node-rank 0"), (SECOND, "--node-rank 1")]
    assert sorted(ranks) == sorted(expected * 2) and all(f"--master-addr {FIRST[1]}" in c for _, c in launched), (
        f"expected node ranks 0 and 1 on {FIRST[1]} for each leg, got {launched}"
    )


def test_tcp_leg_runs_with_the_socket_overrides_and_the_efa_leg_without(tmp_path):
    _, _, launched = run_sweep(tmp_path)
    forced = ["NCCL_NET=Socket NCCL_NET_PLUGIN=none" in c for _, c in launched]
    assert forced == [False, False, True, True], f"expected the overrides on the TCP leg only, got {launched}"


def test_each_leg_keeps_rank_0s_document_in_its_own_file(tmp_path):
    rc, ui, _ = run_sweep(tmp_path)
    files = sorted(p.name.rsplit("-", 1)[1] for p in tmp_path.glob("collectives-*.json"))
    assert (rc, files, ui.doc["efa"]["rows"]) == (0, ["efa.json", "tcp.json"], DOC["rows"]), f"got {rc}, {files}"
