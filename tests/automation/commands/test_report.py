"""`python -m automation report` on run directories made with the real metrics writer (no Ray):
bad input is refused with one line, the verdict and the cost come from what the run left."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from automation.cli import main
from automation.commands.report import cost_rows, find_run_dir, keep_and_report, load_run, micro_batches
from automation.errors import DriverError
from automation.run_report import announce
from workloads.metrics import METRICS_FILE, RUN_MARKER_FILE, MetricsWriter, StepMetrics


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
    announce(files, type("Ui", (), {"note": lambda self, t: notes.append(t)})())
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


def test_memory_plot_axis_starts_at_zero_and_names_the_step_time(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from automation.commands import report

    captured = {}
    real_save = report._save

    def keep(fig, path):
        ax = fig.axes[0]
        captured["ylim"], captured["labels"] = ax.get_ylim(), [t.get_text() for t in ax.get_legend().get_texts()]
        return real_save(fig, path)

    monkeypatch.setattr(report, "_save", keep)
    report.plot_memory([load_run(make_run(tmp_path, "r1"), require_verdict=False)], tmp_path / "m.png")
    plt.close("all")
    assert captured["ylim"][0] == 0, f"expected the memory axis from 0 (noise looked like a cliff), got {captured}"
    assert any("step time" in t for t in captured["labels"]), f"expected a legend entry for step time, got {captured}"


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
    from automation.pipeline import PipelineResult
    from automation.run_report import RunReport

    training = {"precision": "float8 tensorwise"}
    metrics = RunReport("aws", "us-west-2", PipelineResult(steps=()), training=training).metrics()
    assert metrics["precision"] == "float8 tensorwise", metrics
