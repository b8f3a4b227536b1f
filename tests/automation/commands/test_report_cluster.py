"""`automation report --stack S RUN` and the end of `automation run` on AWS: the run's files are copied
from the right pods (summary from the head, metrics from rank 0's worker, NCCL logs from every worker)
through a scripted exec against the fake Kubernetes API, and the report judges the run by EFA."""

from __future__ import annotations

import json
from pathlib import Path

import _driver_helpers as helpers
import pytest

from automation.cli import build_parser
from automation.commands import report
from automation.errors import DriverError
from automation.kube import ExecResult, KubeApi
from automation.run_files import fetch_run
from automation.targets.aws import AwsDeps, AwsTarget
from workloads.metrics import METRICS_FILE, MetricsWriter, StepMetrics

HEAD = "ray-efa-head-9xk2q"
WORKERS = ("ray-efa-gpu-workers-worker-4kq7d", "ray-efa-gpu-workers-worker-tz8mb")
RANK0_POD = WORKERS[1]
# A real aws-ofi-nccl 1.20 log over EFA (tests/fixtures/nccl/README.md says where it comes from).
EFA_LOG = helpers.REPO / "tests" / "fixtures" / "nccl" / "efa_unprefixed_ofi1.20.log"


def rank0_files(tmp: Path, run_id: str) -> dict[str, bytes]:
    w = MetricsWriter(tmp / "made", run_id, echo=False, tensorboard=False)
    for n in (1, 2, 3):
        w.write(StepMetrics(n, 3, 4.0 - n, 1e-4, 9e4, 1.1e4, 0.41, 1.2, 0.01, 18.0, 0.9))
    w.close()
    return {METRICS_FILE: (tmp / "made" / METRICS_FILE).read_bytes(), "run_info.json": b'{"config": {}}'}


def scripted(tmp: Path, run_id: str, nccl_log: Path = EFA_LOG) -> helpers.ScriptedExec:
    summary = json.dumps({"run_id": run_id, "backend": "nccl", "world_size": 8}).encode()
    nccl = helpers.tar_b64({f"./nccl.{run_id}.rank0.host.1.log": nccl_log.read_bytes()})

    def answer(pod, cmd, stdin):
        text = " ".join(cmd)
        if "-T -" in text and "summary.json" in text:
            return ExecResult(0, helpers.tar_b64({"summary.json": summary}) if pod == HEAD else "", "")
        if "-T -" in text:
            return ExecResult(0, helpers.tar_b64(rank0_files(tmp, run_id)) if pod == RANK0_POD else "", "")
        if "tar -czf - -C" in text:
            return ExecResult(0, nccl if pod == RANK0_POD else "", "")
        raise AssertionError(f"unexpected command {cmd} in {pod}")

    return helpers.ScriptedExec(answer)


class KubeWithExec(KubeApi):
    def __init__(self, kubeconfig, pod_exec):
        super().__init__(kubeconfig)
        self.exec = pod_exec


class NullUi:
    def note(self, text):
        pass

    def emit_json(self, doc):
        self.doc = doc


def report_from_stack(tmp_path, run_id="r1", **kw):
    pod_exec = scripted(tmp_path, run_id, **kw)
    ui = NullUi()
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", {"kubeconfig": json.dumps(api.kubeconfig())})
        deps = AwsDeps(client=None, stack=lambda: stack, kube=lambda kc: KubeWithExec(kc, pod_exec))
        argv = ["report", run_id, "--stack", "us-west-2", "--runs-root", str(tmp_path / "runs"), "--json"]
        rc = report.run(build_parser().parse_args(argv), ui, deps)
    return rc, ui.doc, pod_exec.calls


def test_stack_report_reads_metrics_from_rank0s_pod_and_summary_from_the_head(tmp_path):
    _, _, calls = report_from_stack(tmp_path)
    packs = [(pod, "summary.json" in " ".join(cmd)) for pod, _, cmd, _ in calls if "-T -" in " ".join(cmd)]
    expected = [(HEAD, True), (WORKERS[0], False), (WORKERS[1], False)]
    assert packs == expected, f"expected summary from the head then metrics from each worker to rank 0's, got {packs}"


def test_stack_report_judges_the_run_by_efa(tmp_path):
    rc, doc, _ = report_from_stack(tmp_path)
    html = Path(doc["report"]).read_text()
    assert rc == 0 and '<b class="pass">pass</b> (require efa)' in html, "expected a passing EFA verdict"


def test_stack_report_shows_the_socket_fallback_as_a_failure(tmp_path):
    socket_log = EFA_LOG.parent / "socket_cluster_nccl952.log"
    _, doc, _ = report_from_stack(tmp_path, nccl_log=socket_log)
    html = Path(doc["report"]).read_text()
    assert '<b class="fail">fail</b> (require efa)' in html, "expected the socket fallback to fail the EFA verdict"


def test_unknown_run_on_the_cluster_is_bad_input(tmp_path):
    pod_exec = helpers.ScriptedExec(lambda pod, cmd, stdin: ExecResult(0, "", ""))
    cluster = FixedPods(KubeWithExec(helpers.kubeconfig_for("http://127.0.0.1:9"), pod_exec))
    with pytest.raises(DriverError, match=r"run nope: no metrics.jsonl under /tmp/ray-efa-eks/runs/nope") as e:
        fetch_run(cluster, "nope", tmp_path / "nope")
    assert e.value.exit_code == 2


class FixedPods:
    """The fixture cluster's pods without an API server, for a test that needs only exec."""

    namespace, stack = "ray", "us-west-2"

    def __init__(self, kube):
        self.kube = kube

    def head_pod(self):
        return HEAD

    def pods(self, node_type):
        return list(WORKERS) if node_type == "worker" else [HEAD]


def test_aws_run_end_copies_the_run_and_writes_its_report(tmp_path):
    pod_exec = scripted(tmp_path, "r1")
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", {"kubeconfig": json.dumps(api.kubeconfig())})
        deps = AwsDeps(client=None, stack=lambda: stack, kube=lambda kc: KubeWithExec(kc, pod_exec))
        target = AwsTarget(cfg=helpers.stack_config(), deps=deps, run_id="r1")
        files = report.run_files(target, tmp_path / "runs", {"target": "aws", "stack": "us-west-2"})
    assert files.get("report") and Path(files["report"]).is_file(), f"expected a report, got {files}"
