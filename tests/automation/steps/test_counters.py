"""The two witnesses of a cluster run's transport, NCCL's log and the EFA port counters, on the fake
cluster (test_run_steps.py's fakes; the counters are _driver_helpers.FakeEfaNodes, whose sysfs
tree follows the EFA driver's source, and which shows the Ray workers the pod's view of it, without port
counters, and the efa-counter-reader pods the host's, with them: _driver_helpers cites the kernel). Each world
runs the steps that read and judge the counters: `counters` before the job, `train`, `check` after it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import pytest
from _aws_run import (  # noqa: F401 - aws is the moto fixture the tests use
    NCCL,
    aws,
    cluster_exec,
    make_target,
    outputs,
    run,
)
from _pod_requests import PodAction, pod_request

from automation.targets.aws import READER_SYSFS_ROOT
from infra.names import EFA_COUNTER_READER_NAMESPACE
from workloads.nccl_check import witnesses
from workloads.nccl_check.counters import SYSFS_ROOT, parse_reading, read_script

pytestmark = pytest.mark.usefixtures("aws")
EFA_LOG = NCCL / "efa_unprefixed_ofi1.20.log"
SOCKET_LOG = NCCL / "socket_cluster_nccl952.log"
JOB_STEPS = ("counters", "submit", "follow", "check")


def ran(efa: helpers.FakeEfaNodes, log=EFA_LOG, over_efa: bool = True, names=JOB_STEPS, edit=lambda objects: None):
    """The pipeline's result and the pod exec's calls after `names` ran on the fake cluster, its recorded objects
    first changed by `edit`."""
    pod_exec = cluster_exec(log, efa=efa, over_efa=over_efa)
    with helpers.FakeKubeApi() as api:
        edit(api.objects)
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(make_target(api, stack, pod_exec=pod_exec), names)
    return result, pod_exec.calls


def checked(efa: helpers.FakeEfaNodes, log=EFA_LOG, over_efa: bool = True, names=JOB_STEPS):
    """The check step's result and its counter witness after `names` ran on the fake cluster."""
    result, _ = ran(efa, log, over_efa, names)
    check = result.state.check
    assert check is not None, f"expected check to run, the pipeline stopped at {result.failed_step}: {result.reason}"
    return check, check.data.counters["witnesses"]


def test_run_passes_when_the_log_and_the_counters_both_say_efa():
    check, w = checked(helpers.FakeEfaNodes.of_fixture())
    assert (check.status, w["outcome"]) == ("pass", witnesses.PASS), f"got {check.status}: {check.summary}"


def test_a_run_over_efa_passes_reading_every_counter_through_the_reader_pods():
    result, calls = ran(helpers.FakeEfaNodes.of_fixture())
    reads = {
        (pod, ns, pod_request(cmd).arg)
        for pod, ns, cmd, _ in calls
        if pod_request(cmd).action is PodAction.EFA_COUNTERS
    }
    readers = helpers.FakeEfaNodes.of_fixture().readers
    expected = {(pod, EFA_COUNTER_READER_NAMESPACE, READER_SYSFS_ROOT) for pod in readers}
    w = result.state.check.data.counters["witnesses"]
    assert (w["outcome"], reads) == (witnesses.PASS, expected), f"got {w['outcome']}, reads {reads}"


def test_pass_reports_predicted_and_counted_bytes_per_nic_of_each_node():
    _, w = checked(helpers.FakeEfaNodes.of_fixture())
    ratios = sorted((n["node"], round(n["ratio"], 2)) for n in w["nics"])
    nodes = sorted(set(helpers.FakeEfaNodes.of_fixture().pods.values()))
    assert ratios == [(n, helpers.WIRE_OVERHEAD) for n in nodes], f"expected one NIC per GPU node, got {ratios}"


def test_tcp_fallback_fails_on_both_witnesses():
    check, w = checked(helpers.FakeEfaNodes.of_fixture(), log=SOCKET_LOG, over_efa=False)
    assert (check.status, w["outcome"]) == ("fail", witnesses.BOTH_NOT_EFA), f"got {w['outcome']}: {w['message']}"


def test_log_saying_efa_over_flat_counters_fails_with_its_own_message():
    check, w = checked(helpers.FakeEfaNodes.of_fixture(flat=True))
    assert w["outcome"] == witnesses.FLAT and "log says EFA but the EFA counters did not move" in check.summary, (
        f"expected the flat-counters failure, got {w['outcome']}: {check.summary}"
    )


def test_device_gone_after_the_job_is_its_own_outcome():
    check, w = checked(helpers.FakeEfaNodes.of_fixture(missing_after=True))
    assert (check.status, w["outcome"]) == ("fail", "missing"), f"got {check.status} {w['outcome']}: {w['message']}"


def test_counter_reset_during_the_job_is_its_own_outcome():
    check, w = checked(helpers.FakeEfaNodes.of_fixture(reset=True))
    assert (check.status, w["outcome"]) == ("fail", "reset"), f"got {check.status} {w['outcome']}: {w['message']}"


def test_unreadable_counters_on_one_node_are_their_own_outcome():
    node = "ip-10-30-1-204.us-west-2.compute.internal"
    check, w = checked(helpers.FakeEfaNodes.of_fixture(unreadable=node))
    assert (check.status, w["outcome"]) == ("fail", "unreadable") and node in w["message"], (
        f"expected {node} unreadable, got {check.status} {w['outcome']}: {w['message']}"
    )


def test_check_without_a_reading_before_the_job_is_no_pass():
    check, w = checked(helpers.FakeEfaNodes.of_fixture(), names=("submit", "follow", "check"))
    assert (check.status, w["outcome"]) == ("fail", witnesses.NO_BEFORE), f"got {check.status}: {w['message']}"


# ---- where the counters can be read ---------------------------------------------------------------------------
NODE_A, NODE_B = "ip-10-30-1-17.us-west-2.compute.internal", "ip-10-30-1-204.us-west-2.compute.internal"


def sh_read(root: Path) -> str:
    """The driver's read script run by a real shell over a sysfs view laid out under `root`."""
    return subprocess.run(["sh", "-c", read_script(str(root))], capture_output=True, text=True, check=True).stdout


def test_the_old_read_in_a_pods_own_sysfs_finds_no_counters(tmp_path):
    # A Ray worker pod's /sys: the compat copy of the device, ports/1/ without hw_counters.
    view = helpers.write_sysfs(tmp_path, {helpers.EFA_DEVICE: {"tx_bytes": 7}}, full=False)
    out = sh_read(view)
    assert (parse_reading(out).devices, "NO_DEVICES" in out) == ({}, True), f"expected no device read, got {out}"


@pytest.mark.slow
def test_read_script_reads_a_sysfs_tree_laid_out_as_the_efa_driver_does(tmp_path):
    counters = {n: i for i, n in enumerate(helpers.EFA_PORT_COUNTERS)}
    view = helpers.write_sysfs(tmp_path / "host" / "sys", {helpers.EFA_DEVICE: counters}, full=True)
    assert parse_reading(sh_read(view)).devices == {helpers.EFA_DEVICE: counters}, (
        "expected every port counter but lifespan"
    )


@pytest.mark.parametrize(
    "who, root",
    [("reader", READER_SYSFS_ROOT), ("worker", SYSFS_ROOT), ("reader", SYSFS_ROOT)],
    ids=["reader-host-sys", "worker-own-sys", "reader-own-sys"],
)
def test_the_fake_cluster_answers_as_the_real_script_reads_the_same_view(tmp_path, who, root):
    efa = helpers.FakeEfaNodes.of_fixture()
    pod = next(iter(efa.readers if who == "reader" else efa.pods))
    _, devices, full = efa.view(pod, root)
    real = parse_reading(sh_read(helpers.write_sysfs(tmp_path, devices, full=full)))
    fake = parse_reading(efa.answer(pod, root).stdout)
    assert fake == real, f"the fake answered {fake}, the script over the same view read {real}"


def stops_before_submit(efa: helpers.FakeEfaNodes, edit=lambda objects: None):
    result, calls = ran(efa, edit=edit)
    submitted = [cmd for _, _, cmd, _ in calls if (r := pod_request(cmd)) and r.job and r.job.action == "submit"]
    assert (result.failed_step, submitted) == ("counters", []), (
        f"expected counters to stop the run before submit, got {result.failed_step}: {result.reason}; {submitted}"
    )
    return result.reason


def test_counters_fail_before_submit_naming_the_node_whose_reader_sees_no_counters():
    reason = stops_before_submit(helpers.FakeEfaNodes.of_fixture(no_devices=NODE_B))
    assert f"{NODE_B}: 0 EFA device(s)" in reason and NODE_A not in reason, reason


def test_counters_fail_before_submit_when_a_node_shows_fewer_devices_than_it_advertises():
    def two_efa_on_a(objects):
        node = next(n for n in objects["nodes"]["items"] if n["metadata"]["name"] == NODE_A)
        node["status"]["allocatable"]["vpc.amazonaws.com/efa"] = "2"

    reason = stops_before_submit(helpers.FakeEfaNodes.of_fixture(), two_efa_on_a)
    assert f"{NODE_A}: 1 EFA device(s) with readable hw_counters, the node advertises 2" in reason, reason


def test_counters_fail_before_submit_naming_the_node_without_a_reader_pod():
    def no_reader_on_b(objects):
        pods = objects["pods"]["items"]
        objects["pods"]["items"] = [
            p
            for p in pods
            if not (p["metadata"]["name"].startswith("efa-counter-reader") and p["spec"]["nodeName"] == NODE_B)
        ]

    reason = stops_before_submit(helpers.FakeEfaNodes.of_fixture(), no_reader_on_b)
    assert f"{NODE_B}: no Running efa-counter-reader pod" in reason and NODE_A not in reason, reason


def test_passing_cluster_run_keeps_its_counters_and_draws_bytes_per_nic_in_the_report(tmp_path):
    from automation.commands import report
    from workloads.metrics import MetricsWriter, StepMetrics

    check, _ = checked(helpers.FakeEfaNodes.of_fixture())
    writer = MetricsWriter(tmp_path, "r1", echo=False, tensorboard=False)
    for n in (1, 2, 3):  # the run's own step metrics, as rank 0 writes them
        writer.write(StepMetrics(n, 3, 4.0 - n, 1e-4, 9e4, 1.1e4, 0.41, 1.2, 0.01, 18.0, 0.9))
    writer.close()
    files = report.keep_and_report(tmp_path, {"target": "aws", "transport": check.data.to_dict()})
    stored = json.loads((tmp_path / "efa_counters.json").read_text())
    page = Path(files["report"]).read_text()
    assert len(stored["deltas"]) == 2 and 'id="plot-efa"' in page, (
        f"expected two NICs' deltas stored and the EFA plot in the page, got {stored['deltas']}, {files}"
    )


class RecordingUi:
    """The Ui of a `--json` command, recording instead of printing."""

    json_mode = True

    def __init__(self):
        self.doc, self.notes = None, []

    def emit_json(self, doc):
        self.doc = doc

    def note(self, text):
        self.notes.append(text)

    def log(self, text):
        pass

    error = progress = step_started = step_finished = milestone = log


@pytest.mark.slow  # the whole `run --stack` command (preflight to report) takes about 20 s here
def test_run_stack_world_ends_pass_with_both_witnesses_and_the_bytes_plot(tmp_path, monkeypatch, moto_eks):
    from _aws_run import client_factory
    from _bench_world import Cluster
    from _driver_helpers import KubeWithExec
    from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP

    from automation import cli
    from automation.commands import run_steps
    from automation.targets.aws import AwsDeps

    cluster = Cluster(tmp_path, {"efa": EFA_LOG})  # its run ids end in -efa: that run used EFA
    monkeypatch.chdir(tmp_path)
    with helpers.FakeKubeApi() as api:
        # `run` scales the GPU node group back to gpuNodeCount before verify: moto's EKS holds it
        outs = {**outputs(api), "cluster_name": MOTO_CLUSTER, "nodegroup_name": MOTO_NODEGROUP}
        stack = helpers.FakeStack("us-west-2", outputs=outs)
        deps = AwsDeps(
            client=client_factory(),
            stack=lambda: stack,
            kube=lambda kc: KubeWithExec(kc, cluster.exec),
            public_ip=helpers.deployer_ip,
        )
        real = run_steps.open_target
        monkeypatch.setattr(run_steps, "open_target", lambda args, ui: real(args, ui, deps))
        argv = ["run", "--stack", "us-west-2", "--run-id", "w1-efa", "--yes", "--keep-nodes", "--json"]
        ui = RecordingUi()
        rc = run_steps.run(cli.build_parser().parse_args(argv), ui)
    assert ui.doc is not None, f"no JSON document; rc {rc}, notes {ui.notes}"
    assert ui.doc.get("transport"), f"no check: {ui.doc.get('failed_step')}: {ui.doc.get('reason')}"
    witness = ui.doc["transport"]["counters"]["witnesses"]
    page = (tmp_path / "runs" / "w1-efa" / "report" / "report.html").read_text()
    assert (rc, witness["outcome"], 'id="plot-efa"' in page) == (0, witnesses.PASS, True), (
        f"expected exit 0, both witnesses passing and the bytes plot; got {rc}, {witness['message']}, {ui.doc}"
    )
