"""`python -m automation report` on run directories made with the real metrics writer (no Ray):
bad input is refused with one line, the verdict and the cost come from what the run left."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import _driver_helpers as helpers
import pytest
from _driver_helpers import KubeWithExec
from _pod_requests import PodAction, asks, pod_request
from rich.console import Console

from automation.cli import build_parser, main
from automation.commands import report
from automation.commands.report import cost_rows, find_run_dir, keep_and_report, load_run, micro_batches
from automation.errors import DriverError
from automation.kube import ExecResult
from automation.pipeline import PipelineResult
from automation.run_files import fetch_run
from automation.run_outcome import RunReport, show
from automation.targets.aws import AwsDeps, AwsRun, AwsTarget
from workloads.metrics import METRICS_FILE, RUN_MARKER_FILE, MetricsWriter, StepMetrics
from workloads.summary import RunSummary


def make_run(root: Path, run_id: str, backend: str = "gloo", steps: int = 4) -> Path:
    run_dir = root / run_id
    w = MetricsWriter(run_dir, run_id, echo=False, tensorboard=False)
    for n in range(1, steps + 1):
        w.write(StepMetrics(n, steps, 5.0 - n, 1e-3, 1000.0 * n, None, None, 2.0, 0.01, 1.0, 0.5))
    w.close()
    (run_dir / "summary.json").write_text(json.dumps({"run_id": run_id, "backend": backend, "world_size": 2}))
    return run_dir


def test_unknown_run_is_bad_input_naming_it(tmp_path):
    with pytest.raises(DriverError, match=r"run 'nope' not found") as e:
        find_run_dir("nope", tmp_path / "runs")
    assert e.value.exit_code == 2, f"expected exit 2 (bad input), got {e.value.exit_code}"


def test_run_id_resolves_under_the_runs_root(tmp_path):
    run_dir = make_run(tmp_path / "runs", "r1")
    assert find_run_dir("r1", tmp_path / "runs") == run_dir.resolve()


def test_empty_metrics_is_bad_input(tmp_path):
    run_dir = tmp_path / "r-empty"
    run_dir.mkdir()
    (run_dir / METRICS_FILE).write_text("")
    with pytest.raises(DriverError, match=r"metrics.jsonl holds no step"):
        load_run(run_dir)


def test_missing_metrics_file_is_bad_input(tmp_path):
    (tmp_path / "r-none").mkdir()
    with pytest.raises(DriverError, match=r"metrics.jsonl does not exist"):
        load_run(tmp_path / "r-none")


def test_nccl_run_without_nccl_logs_is_bad_input_naming_the_way_out(tmp_path):
    run_dir = make_run(tmp_path, "r-gpu", backend="nccl")
    with pytest.raises(DriverError, match=r"used NCCL but .*nccl holds no NCCL log.*--no-verdict"):
        load_run(run_dir)


def test_no_verdict_reports_a_nccl_run_without_logs(tmp_path):
    run = load_run(make_run(tmp_path, "r-gpu", backend="nccl"), require_verdict=False)
    assert run.verdict["verdict"] == "not-checked", f"expected not-checked, got {run.verdict}"


def test_gloo_run_has_no_nccl_verdict_to_make(tmp_path):
    run = load_run(make_run(tmp_path, "r-cpu"))
    assert run.verdict["verdict"] == "not-applicable", f"expected not-applicable, got {run.verdict}"


def test_cost_estimate_is_price_times_training_wall_time(tmp_path):
    run_dir = make_run(tmp_path, "r-aws")
    driver = {"target": "aws", "stack": "us-west-2", "cost": {"usd_per_hour": 36.0, "items": []}}
    (run_dir / "driver.json").write_text(json.dumps(driver))
    run = load_run(run_dir)
    wall = run.metrics[-1]["time"] - run.metrics[0]["time"] + run.metrics[0]["step_time_s"]
    expected = f"${36.0 * wall / 3600:,.2f} for the training steps"
    assert cost_rows(run)["cost estimate"] == expected


def test_report_command_writes_the_page_and_prints_its_path(tmp_path, capsys):
    run_dir = make_run(tmp_path, "r1")
    rc = main(["report", str(run_dir), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and Path(doc["report"]).is_file(), f"expected exit 0 and a report file, got rc {rc}, {doc}"


def test_report_command_refuses_an_unknown_run_with_exit_2(tmp_path, capsys):
    rc = main(["report", "no-such-run", "--runs-root", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "no-such-run" in err, f"expected exit 2 naming the run, got rc {rc}, stderr {err!r}"


def test_after_run_without_metrics_says_why_instead_of_raising(tmp_path):
    files = keep_and_report(tmp_path, {"target": "local"})
    assert files["report"] is None and METRICS_FILE in files["report_error"], f"got {files}"


def test_report_help_documents_compare(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert "--compare RUN2" in out and "report.html" in out, f"expected --compare and report.html in help: {out}"


def test_run_end_names_the_report(tmp_path):
    run_dir = make_run(tmp_path, "r1")
    files = keep_and_report(run_dir, {"target": "local"})
    notes = []
    ui = type(
        "Ui", (), {"json_mode": False, "console": Console(file=io.StringIO()), "note": lambda s, t: notes.append(t)}
    )
    show(RunReport("local", None, PipelineResult(steps=())), ui(), files)
    assert notes == [f"report: {run_dir}/report/report.html  (metrics: {run_dir}/{METRICS_FILE})"], f"got {notes}"


def test_missing_matplotlib_is_named_with_its_install_command(tmp_path, monkeypatch, capsys):
    run_dir = make_run(tmp_path, "r1")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    rc = main(["report", str(run_dir)])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install -e '.[observe]'" in err, f"expected exit 2 naming the extra, got {rc}: {err!r}"


def test_report_without_a_run_reports_the_newest_one(tmp_path, capsys):
    import os

    old, new = make_run(tmp_path, "r-old"), make_run(tmp_path, "r-new")
    os.utime(old / RUN_MARKER_FILE, (1_000_000, 1_000_000))  # r-old started long before r-new
    rc = main(["report", "--runs-root", str(tmp_path), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and Path(doc["report"]).is_relative_to(new), f"expected the report of r-new, got rc {rc}: {doc}"


def test_report_without_a_run_and_no_runs_says_what_to_run(tmp_path, capsys):
    rc = main(["report", "--runs-root", str(tmp_path / "runs")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and "python -m automation run" in err, f"expected exit 2 naming the command, got {rc}: {err}"


def test_report_says_where_the_checkpoints_are(tmp_path):
    from automation.commands.report import headline
    from workloads.metrics import write_run_info

    run_dir = make_run(tmp_path, "r1")
    write_run_info(run_dir, {"checkpoint_every": 5, "storage_path": "/store/", "name": "r1"})
    got = headline(load_run(run_dir, require_verdict=False))["checkpoints"]
    assert got == "/store/r1/", f"expected the storage path and run name, got {got!r}"


def test_memory_plot_axis_starts_at_zero_and_names_the_step_time(tmp_path):
    from automation.commands import report

    fig, ax = report._figure("memory")
    report.plot_memory(ax, [load_run(make_run(tmp_path, "r1"), require_verdict=False)])
    ylim, labels = ax.get_ylim(), [t.get_text() for t in ax.get_legend().get_texts()]
    assert ylim[0] == 0, f"expected the memory axis from 0 (noise looked like a cliff), got {ylim}"
    assert any("step time" in t for t in labels), f"expected a legend entry for step time, got {labels}"


def test_report_names_an_out_of_memory_halving_of_the_micro_batch(tmp_path):
    run_dir = tmp_path / "r-oom"
    w = MetricsWriter(run_dir, "r-oom", echo=False, tensorboard=False)
    w.write(StepMetrics(1, 2, 5.0, 1e-3, 1000.0, None, None, 2.0, 0.01, 1.0, 0.5, micro_batch=4, grad_accum=2))
    w.close()
    fallback = {"step": 1, "micro_batch": 8, "grad_accum": 1, "to_micro_batch": 4, "to_grad_accum": 2}
    summary = {"run_id": "r-oom", "backend": "gloo", "world_size": 1, "oom_fallbacks": [fallback]}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    got = micro_batches(load_run(run_dir))
    assert got == "4 x 2; out of GPU memory at step 1 with 8 x 1, halved", f"got {got!r}"


def _page(run_dir: Path, tmp_path: Path) -> str:
    from automation.commands.report import render_html

    png = tmp_path / "throughput.png"
    png.write_bytes(b"\x89PNG")
    return render_html([load_run(run_dir, require_verdict=False)], {"throughput": png})


def test_report_opens_with_the_verdict_then_the_throughput_the_terminal_printed(tmp_path):
    run_dir = make_run(tmp_path, "r1")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "tokens_per_s": 1234.0, "device": "cpu"}))
    page = _page(run_dir, tmp_path)
    after_title = page.split("<h2>r1</h2>", 1)[1]
    verdict_first = after_title.startswith('<p class="verdict">NCCL transport verdict')
    figures = [label for label in ("tokens/s (mean after warm-up)</th><td>1,234", "tokens/s (median") if label in page]
    assert (verdict_first, figures) == (True, ["tokens/s (mean after warm-up)</th><td>1,234"]), (
        f"expected the verdict first and the summary's mean alone, got {verdict_first}, {figures}"
    )


def test_throughput_plot_of_a_cpu_run_says_why_it_has_no_mfu_line(tmp_path):
    run_dir = make_run(tmp_path, "r1")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "device": "cpu"}))
    caption = _page(run_dir, tmp_path).split('<figure id="plot-throughput">', 1)[1].split("</figcaption>")[0]
    assert "no MFU: MFU needs the peak FLOP/s of the device, and the run was on CPU" in caption, caption


def test_report_names_the_precision_the_run_summary_records(tmp_path):
    from automation.commands.report import headline

    run_dir = make_run(tmp_path, "r1")
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "precision": "float8 tensorwise"}))
    got = headline(load_run(run_dir, require_verdict=False))["precision"]
    assert got == "float8 tensorwise", f"expected the summary's precision, got {got!r}"


def test_report_metrics_carry_the_precision_of_the_summary():
    training = RunSummary(precision="float8 tensorwise")
    metrics = RunReport("aws", "us-west-2", PipelineResult(steps=()), training=training).metrics()
    assert metrics["precision"] == "float8 tensorwise", metrics


# ---- `automation report --stack S RUN` and the end of `automation run` on AWS: the run's files are copied
# from the right pods (summary from the head, metrics from rank 0's worker, NCCL logs from every worker)
# through a scripted exec against the fake Kubernetes API, and the report judges the run by EFA.

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
        if (request := pod_request(cmd)) and request.action is PodAction.PACK_FILES and "summary.json" in request.names:
            return ExecResult(0, helpers.tar_b64({"summary.json": summary}) if pod == HEAD else "", "")
        if asks(cmd, PodAction.PACK_FILES):
            return ExecResult(0, helpers.tar_b64(rank0_files(tmp, run_id)) if pod == RANK0_POD else "", "")
        if asks(cmd, PodAction.COLLECT_LOGS):
            return ExecResult(0, nccl if pod == RANK0_POD else "", "")
        raise AssertionError(f"unexpected command {cmd} in {pod}")

    return helpers.ScriptedExec(answer)


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
    packs = [(pod, "summary.json" in " ".join(cmd)) for pod, _, cmd, _ in calls if asks(cmd, PodAction.PACK_FILES)]
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
        target = AwsTarget(AwsRun(helpers.stack_config(), "r1"), deps)
        files = report.run_files(target, tmp_path / "runs", {"target": "aws", "stack": "us-west-2"})
    assert files.get("report") and Path(files["report"]).is_file(), f"expected a report, got {files}"
