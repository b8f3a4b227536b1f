"""`python -m automation report RUN`: one self-contained HTML page and its PNG plots for a run.

    python -m automation report                                   # the newest run under ./runs
    python -m automation report 20261204-170000-abc123            # a run id under ./runs
    python -m automation report runs/20261204-170000-abc123       # or a run directory
    python -m automation report RUN --compare RUN2                # two runs on the same axes

It reads what the run left in its directory: `metrics.jsonl` (one line per step, workloads/metrics.py),
`summary.json` (the training summary), `run_info.json` (config and versions), `driver.json` (what
`automation run` knew: target, stack, NCCL verdict, cost per hour) and, when the verdict is not there,
the NCCL logs under `nccl/`. With --stack it copies the run from the cluster's pods, or, once they are gone,
from what the run's end kept in the run bucket (`<storage_uri>/<run id>/logs/`). It writes
`<run>/report/report.html` (plots embedded, so the page is one file) beside `loss.png`, `throughput.png` and
`memory.png`.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import html
import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from automation import efa_witness
from automation.errors import DriverError
from automation.flags import CLUSTER_PARENT, command_parser, location, output_folder
from automation.run_files import DRIVER_FILE, SUMMARY_FILE
from automation.steps.check import assert_transport
from automation.targets import Target, aws
from automation.ui import Ui
from workloads.config import _RUN_ID, runs_root
from workloads.metrics import METRICS_FILE, RUN_INFO_FILE, MetricsError, latest_per_step, local_runs, read_metrics
from workloads.summary import RunSummary

if TYPE_CHECKING:  # matplotlib is imported where a plot is drawn: `report --help` stays instant
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

REPORT_DIR = "report"
PLOT_SIZE_IN = (8.0, 4.5)
PLOT_DPI = 100  # so every PNG is 800 x 450 pixels
PLOTS = {
    "loss": "Loss vs step",
    "throughput": "Tokens/s and MFU vs step",
    "memory": "Peak memory and step time vs step",
}
# Drawn only for a run with an EFA counter witness (automation/efa_witness.py): a cluster run.
EFA_PLOT = "efa"
TITLES = {**PLOTS, EFA_PLOT: "EFA bytes per NIC per node: predicted vs counted"}
HELP = "write an HTML report with plots (loss, throughput, MFU, memory) of a finished run"


@dataclass(frozen=True)
class RunData:
    """Everything a report shows about one run."""

    run_id: str
    dir: Path
    metrics: list[dict]
    summary: RunSummary | None
    info: dict | None
    driver: dict | None
    verdict: dict = field(default_factory=dict)


def find_run_dir(ref: str, runs_root: Path) -> Path:
    """A run directory from a path or a run id under `runs_root`; unknown runs are bad input."""
    for candidate in (Path(ref), runs_root / ref):
        if candidate.is_dir():
            return candidate.resolve()
    known = sorted(p.name for p in runs_root.iterdir() if p.is_dir()) if runs_root.is_dir() else []
    hint = f"known runs in {runs_root}: {', '.join(known[-5:])}" if known else f"{runs_root} holds no runs"
    raise DriverError(f"run {ref!r} not found (no directory {ref} or {runs_root / ref}): {hint}", exit_code=2)


def newest_local_run(runs_root: Path) -> str:
    """The newest run under ``runs_root`` (as ``clean`` and ``status`` see it); bad input if none or no step metrics."""
    runs = local_runs(runs_root)
    if not runs:
        raise DriverError(
            f"no run under {runs_root}: run `python -m automation run` first, or pass RUN (a run id or directory)",
            exit_code=2,
        )
    if not (runs[0] / METRICS_FILE).is_file():
        older = [p.name for p in runs[1:] if (p / METRICS_FILE).is_file()][:3]
        hint = f"pass an older run: {', '.join(older)}" if older else "no older run has any either"
        raise DriverError(
            f"the newest run under {runs_root}, {runs[0].name}, has no {METRICS_FILE} (it stopped before its "
            f"first step): {hint}",
            exit_code=2,
        )
    return str(runs[0])


def _json_file(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DriverError(f"{path} is damaged: not JSON ({e.msg} at line {e.lineno})", exit_code=2) from None
    return data if isinstance(data, dict) else None


def load_run(run_dir: Path, require_verdict: bool = True) -> RunData:
    """Read a run directory; a run without step metrics, or a NCCL run without its logs, is bad input."""
    path = run_dir / METRICS_FILE
    if not path.is_file():
        raise DriverError(
            f"{path} does not exist: the run wrote no per-step metrics (it never trained, or predates them)",
            exit_code=2,
        )
    try:
        metrics = latest_per_step(read_metrics(path))
    except MetricsError as e:
        raise DriverError(str(e), exit_code=2) from None
    if not metrics:
        raise DriverError(f"{path} holds no step: the run stopped before its first step ended", exit_code=2)
    summary, info, driver = (_json_file(run_dir / n) for n in (SUMMARY_FILE, RUN_INFO_FILE, DRIVER_FILE))
    typed = RunSummary.from_dict(summary) if summary is not None else None
    run = RunData(metrics[0].get("run_id") or run_dir.name, run_dir, metrics, typed, info, driver)
    return dataclasses.replace(run, verdict=nccl_verdict(run, require_verdict))


def nccl_verdict(run: RunData, required: bool = True) -> dict:
    """The driver's verdict if `automation run` saved one; else the NCCL check over `<run>/nccl`."""
    saved = (run.driver or {}).get("transport")
    if saved:
        return saved
    backend = run.summary.backend if run.summary else None  # else a run before the summary named it
    if not (backend == "nccl" if backend else ((run.info or {}).get("config") or {}).get("use_gpu")):
        return {"verdict": "not-applicable", "cause": "the run used gloo on CPU: no NCCL, no EFA", "evidence": []}
    nccl_dir = run.dir / "nccl"
    files = sorted(nccl_dir.rglob("*.log")) if nccl_dir.is_dir() else []
    if not files:
        if not required:
            return {"verdict": "not-checked", "cause": f"no NCCL logs in {nccl_dir} (--no-verdict)", "evidence": []}
        raise DriverError(
            f"run {run.run_id} used NCCL but {nccl_dir} holds no NCCL log: copy the run from its cluster "
            f"(`python -m automation report {run.run_id} --stack S`) or pass --no-verdict",
            exit_code=2,
        )
    require = "efa" if (run.driver or {}).get("target") == "aws" else "any"
    return assert_transport(files, require, run.run_id).to_dict()


# ---- plots -----------------------------------------------------------------------------------------
def _series(run: RunData, key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in run.metrics if r.get(key) is not None]
    return [s for s, _ in pts], [v for _, v in pts]


def _figure(title: str) -> tuple[Figure, Axes]:
    try:
        import matplotlib.figure
        import matplotlib.ticker
    except ImportError:
        raise DriverError("the report's plots need matplotlib: pip install -e '.[observe]'", exit_code=2) from None
    # A Figure of its own, not pyplot's: no display, no global state to close (matplotlib >= 3.1; its gallery, "Embed in
    # a web application server": https://matplotlib.org/stable/gallery/user_interfaces/web_application_server_sgskip.html).
    fig = matplotlib.figure.Figure(figsize=PLOT_SIZE_IN, dpi=PLOT_DPI)
    ax = fig.subplots()
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    return fig, ax


def plot_loss(ax: Axes, runs: list[RunData]) -> None:
    for run in runs:
        ax.plot(*_series(run, "loss"), marker=".", label=run.run_id)
    ax.set_ylabel("loss")
    ax.legend(loc="upper right")


def plot_throughput(ax: Axes, runs: list[RunData]) -> None:
    """tokens/s on the left axis; MFU (where the peak is known, i.e. on GPUs) on the right, dashed."""
    mfu_ax = None
    for run in runs:
        (line,) = ax.plot(*_series(run, "tokens_per_s"), marker=".", label=f"{run.run_id} tokens/s")
        steps, mfu = _series(run, "mfu")
        if mfu:
            mfu_ax = mfu_ax or ax.twinx()
            mfu_ax.plot(steps, [100 * v for v in mfu], "--", color=line.get_color(), label=f"{run.run_id} MFU")
    ax.set_ylabel("tokens/s (global)")
    if mfu_ax is not None:
        mfu_ax.set_ylabel("MFU (%)")
    ax.legend(loc="lower right")


def plot_memory(ax: Axes, runs: list[RunData]) -> None:
    time_ax = ax.twinx()
    for run in runs:
        (line,) = ax.plot(*_series(run, "peak_mem_gb"), marker=".", label=f"{run.run_id} peak memory")
        steps, st = _series(run, "step_time_s")
        time_ax.plot(steps, st, ":", color=line.get_color(), label=f"{run.run_id} step time")
    ax.set_ylabel("peak memory (GB), rank 0")
    time_ax.set_ylabel("step time (s), dotted")
    # From 0: a few MB of allocator noise on a 1 GB peak drawn over a 2 MB axis looked like a cliff.
    ax.set_ylim(0, max((ax.get_ylim()[1], 1e-3)) * 1.1)
    time_ax.set_ylim(0, max((time_ax.get_ylim()[1], 1e-3)) * 1.1)
    lines = ax.get_lines() + time_ax.get_lines()  # one legend for both axes: the step time's too
    ax.legend(lines, [str(line.get_label()) for line in lines], loc="lower right")


def counter_nics(run: RunData) -> list[dict]:
    """The NIC rows of the run's EFA counter witness (predicted and counted bytes), [] without one."""
    witness = ((run.verdict or {}).get("counters") or {}).get("witnesses") or {}
    return [n for n in witness.get("nics") or [] if n.get("counted_bytes") is not None]


def plot_efa(ax: Axes, runs: list[RunData]) -> None:
    """One pair of bars per NIC: the model's predicted bytes for the run and what the counters say it sent."""
    rows = [(run, n) for run in runs for n in counter_nics(run)]
    xs = range(len(rows))
    predicted = [(n.get("predicted_bytes") or 0) / 1e9 for _, n in rows]
    counted = [n["counted_bytes"] / 1e9 for _, n in rows]
    ax.bar([x - 0.2 for x in xs], predicted, width=0.4, label="predicted (workloads/throughput_model.py)")
    bars = ax.bar([x + 0.2 for x in xs], counted, width=0.4, label="counted (tx_bytes after - before)")
    for bar, (_, n) in zip(bars, rows, strict=True):
        if n.get("ratio") is not None:
            ax.annotate(f"{n['ratio']:.0%}", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center")
    ax.set_xticks(list(xs), [f"{r.run_id}\n{n['node'].split('.')[0]}/{n['device']}" for r, n in rows], fontsize=7)
    ax.set_xlabel("run, node / EFA device")
    ax.set_ylabel("GB sent per NIC over the run")
    ax.legend(loc="lower right")


def write_plots(runs: list[RunData], out_dir: Path) -> dict[str, Path]:
    makers = {"loss": plot_loss, "throughput": plot_throughput, "memory": plot_memory, EFA_PLOT: plot_efa}
    paths = {}
    for name in [*PLOTS, *([EFA_PLOT] if any(counter_nics(r) for r in runs) else [])]:
        fig, ax = _figure(TITLES[name])
        makers[name](ax, runs)
        fig.tight_layout()
        paths[name] = out_dir / f"{name}.png"
        fig.savefig(paths[name], dpi=PLOT_DPI)  # no bbox_inches="tight": it would change the pixel size
    return paths


# ---- numbers -----------------------------------------------------------------------------------------
def _median(run: RunData, key: str, skip: int = 2) -> float | None:
    """Median over the steps after the first `skip` (compilation, allocator warm-up), when there are any."""
    vals = [r[key] for r in run.metrics[skip:] or run.metrics if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def wall_time_s(run: RunData) -> float:
    """From the start of the first recorded step to the end of the last."""
    first, last = run.metrics[0], run.metrics[-1]
    return last["time"] - first["time"] + first["step_time_s"]


def mfu_absent(run: RunData) -> str | None:
    """Why the run has no MFU (and its throughput plot no MFU line), or None when it has one."""
    if any(r.get("mfu") is not None for r in run.metrics):
        return None
    device = (run.summary or RunSummary()).device or "?"
    if device == "cpu":
        return "no MFU: MFU needs the peak FLOP/s of the device, and the run was on CPU"
    return f"no MFU: the peak bf16 FLOP/s of {device} is not in PEAK_BF16_TFLOPS (workloads/model.py)"


def headline(run: RunData) -> dict[str, object]:
    """The numbers at the top of the page, after the verdict (medians skip the first two steps). Throughput and MFU
    are the summary's means after warm-up, the figures the terminal printed at the end of the run; the median step's
    where the run left no summary."""
    s, last = run.summary or RunSummary(), run.metrics[-1]
    tps: float | None
    if s.tokens_per_s is not None:
        label, tps, per_gpu, mfu = "tokens/s (mean after warm-up)", s.tokens_per_s, s.tokens_per_s_per_gpu, s.mfu
    else:
        label = "tokens/s (median step)"
        tps, per_gpu, mfu = (_median(run, k) for k in ("tokens_per_s", "tokens_per_s_per_gpu", "mfu"))
    return {
        "steps": f"{last['step']} / {last['total_steps']}",
        "workers": s.world_size or (run.info or {}).get("world_size"),
        "device": f"{s.device or '?'} ({s.backend or '?'})",
        "precision": s.precision or "not recorded (a run before the summary named it)",
        "loss": " -> ".join(_fmt(r.get("loss"), ".4f") or "n/a (not finite)" for r in (run.metrics[0], last)),
        label: _fmt(tps, ",.0f", f" ({per_gpu:,.0f} per GPU)" if per_gpu is not None else ""),
        "MFU": _fmt(mfu, ".1%") or mfu_absent(run),
        "step time (median)": _fmt(_median(run, "step_time_s"), ".3f", " s"),
        "data wait (median)": _fmt(_median(run, "data_wait_s"), ".4f", " s"),
        "peak memory, rank 0": _fmt(max(r["peak_mem_gb"] for r in run.metrics), ".2f", " GB"),
        "micro-batch x accumulation": micro_batches(run),
        "gradient norm (last)": _fmt(last.get("grad_norm"), ".3f"),
        "training wall time": _fmt(wall_time_s(run), ".1f", " s"),
        "checkpoints": checkpoints_of(run),
    }


def checkpoints_of(run: RunData) -> str:
    """Where the run's checkpoints are (the storage path and run name it trained with), or why none."""
    config = (run.info or {}).get("config") or {}
    if not config.get("checkpoint_every"):
        return "none (checkpoint_every 0)"
    where = f"{str(config.get('storage_path') or '?').rstrip('/')}/{config.get('name') or run.run_id}/"
    last = run.summary.checkpoint if run.summary else None
    return f"{where} (last: {last})" if last else where


def micro_batches(run: RunData) -> str:
    """The last step's micro-batch x accumulation, and each halving an out-of-memory in the first steps
    caused (the summary's `oom_fallbacks`)."""
    last = run.metrics[-1]
    if last.get("micro_batch") is None:
        return "n/a"
    text = f"{last['micro_batch']} x {last['grad_accum']}"
    for f in run.summary.oom_fallbacks if run.summary else ():
        text += f"; out of GPU memory at step {f['step']} with {f['micro_batch']} x {f['grad_accum']}, halved"
    return text


def cost_rows(run: RunData) -> dict[str, object]:
    """Instance type and cost: the driver's On-Demand price per hour times this run's training wall time."""
    d = run.driver or {}
    if d.get("target") != "aws":
        return {"target": d.get("target", "local"), "instance type": "this machine", "cost estimate": "n/a (local)"}
    cost = d.get("cost") or {}
    items = cost.get("items") or []
    per_hour = cost.get("usd_per_hour")
    est = f"${per_hour * wall_time_s(run) / 3600:,.2f} for the training steps" if per_hour else "unknown"
    return {
        "target": f"aws, stack {d.get('stack')}",
        "instance type": ", ".join(f"{i['count']} x {i['instance_type']}" for i in items) or "unknown",
        "price (On-Demand)": f"${per_hour:,.2f}/h" if per_hour else f"unknown ({cost.get('note', '')})",
        "cost estimate": est,
    }


def _fmt(v: object, spec: str, unit: str = "") -> str | None:
    return None if v is None else format(v, spec) + unit


# ---- the page ------------------------------------------------------------------------------------------
_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:62em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}
th{background:#f3f3f3}img{max-width:100%;border:1px solid #ddd}.pass{color:#080}.fail{color:#b00}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}"""


def _table(rows: Mapping[str, object], head: tuple[str, ...] = ()) -> str:
    th = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" if head else ""
    body = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape('n/a' if v is None else str(v))}</td></tr>"
        for k, v in rows.items()
    )
    return f"<table>{th}{body}</table>"


def _verdict_html(run: RunData) -> str:
    """The run's NCCL transport verdict and its cause, in one line: the first thing the page says."""
    v = run.verdict
    word = str(v.get("verdict", "?"))
    cls = "pass" if word == "pass" else "fail" if word in ("fail", "bad-input") else ""
    return (
        f'<p class="verdict">NCCL transport verdict: <b class="{cls}">{html.escape(word)}</b>'
        f"{' (require ' + html.escape(str(v['require'])) + ')' if v.get('require') else ''}: "
        f"{html.escape(str(v.get('cause', '')))}</p>"
    )


def _evidence_html(run: RunData) -> str:
    evidence = "\n".join(run.verdict.get("evidence") or []) or "(no evidence lines: nothing was checked)"
    return f"<p>{html.escape(run.run_id)}</p><pre>{html.escape(evidence)}</pre>" + _counters_html(run)


def _img(name: str, path: Path, runs: list[RunData]) -> str:
    """The plot, embedded, and its caption; the throughput plot's names each run it has no MFU line of, and why."""
    data = base64.b64encode(path.read_bytes()).decode()
    whys = ((r.run_id, mfu_absent(r)) for r in runs) if name == "throughput" else ()
    note = "; ".join(f"{run_id}: {why}" for run_id, why in whys if why is not None)
    return (
        f'<figure id="plot-{name}"><img src="data:image/png;base64,{data}" alt="{html.escape(TITLES[name])}">'
        f'<figcaption>{html.escape(TITLES[name])} (<a href="{path.name}">{path.name}</a>)'
        f"{'. ' + html.escape(note) if note else ''}</figcaption></figure>"
    )


def _counters_html(run: RunData) -> str:
    """The EFA counter witness of the run: its outcome, why, and each NIC's predicted and counted bytes."""
    w = ((run.verdict or {}).get("counters") or {}).get("witnesses")
    if not w:
        return ""
    cls = "pass" if w.get("ok") else "fail" if w.get("outcome") != "not-applicable" else ""
    rows = "".join(
        f"<tr><td>{html.escape(n['node'])}</td><td>{html.escape(n['device'])}</td>"
        f"<td>{_fmt(n.get('predicted_bytes'), ',.0f') or 'n/a'}</td>"
        f"<td>{_fmt(n.get('counted_bytes'), ',') or 'n/a'}</td>"
        f"<td>{_fmt(n.get('ratio'), '.0%') or 'n/a'}</td><td>{html.escape(n['outcome'])}</td></tr>"
        for n in w.get("nics") or []
    )
    head = "<tr><th>node</th><th>device</th><th>predicted bytes</th><th>counted bytes</th><th>ratio</th><th></th></tr>"
    return (
        f'<p>EFA counter witness: <b class="{cls}">{html.escape(str(w.get("outcome")))}</b>: '
        f"{html.escape(str(w.get('message', '')))} (pass needs at least {w.get('min_fraction', 0):.0%} of the "
        f"predicted bytes on every NIC)</p>" + (f"<table>{head}{rows}</table>" if rows else "")
    )


def render_html(runs: list[RunData], plots: dict[str, Path]) -> str:
    title = "Run report: " + " vs ".join(r.run_id for r in runs)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"]
    parts.append(f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>")
    for run in runs:
        parts.append(f"<h2>{html.escape(run.run_id)}</h2>{_verdict_html(run)}")
        parts.append(_table({**headline(run), **cost_rows(run)}))
        parts.append(f"<p>{html.escape(str(run.dir))}</p>")
    parts.append("<h2>Curves</h2>" + "".join(_img(name, path, runs) for name, path in plots.items()))
    parts.append("<h2>NCCL evidence</h2>" + "".join(map(_evidence_html, runs)))
    for run in runs:
        info = run.info or {}
        parts.append(f"<h2>Config and versions of {html.escape(run.run_id)}</h2>")
        parts.append(_table(info.get("versions") or {}, ("package", "version")))
        parts.append(_table(info.get("config") or {}, ("option", "value")))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(runs: list[RunData], out_dir: Path | None = None) -> tuple[Path, dict[str, Path]]:
    """The PNGs and the page embedding them, written into `out_dir` (default: report[-vs-<others>] of the first run)."""
    others = "-".join(r.run_id for r in runs[1:])
    out_dir = out_dir or runs[0].dir / (f"{REPORT_DIR}-vs-{others}" if others else REPORT_DIR)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = write_plots(runs, out_dir)
    page = out_dir / "report.html"
    page.write_text(render_html(runs, plots), encoding="utf-8")
    return page, plots


# ---- after a run of the pipeline, and the command ----------------------------------------------------
def run_files(target: Target, runs_root: Path, doc: dict) -> dict[str, str | None]:
    """`keep_and_report` on the target's run, once it is on this machine (copied from the cluster on AWS)."""
    try:
        run_dir = target.collect_run(runs_root)
    except DriverError as e:
        return {"report": None, "metrics_file": None, "report_error": f"copying the run from the cluster: {e}"}
    return keep_and_report(run_dir, doc)


def keep_and_report(run_dir: Path, doc: dict) -> dict[str, str | None]:
    """The driver's view of the run (target, stack, NCCL verdict, cost) kept in its directory, and its report: their
    paths, or why no report (never raised: the run's own outcome is what the user asked for)."""
    metrics = run_dir / METRICS_FILE
    if not metrics.is_file():
        return {"report": None, "metrics_file": None, "report_error": f"no {METRICS_FILE} in {run_dir}"}
    keep = {k: doc.get(k) for k in ("target", "stack", "job_id", "transport", "cost", "ok")}
    (run_dir / DRIVER_FILE).write_text(json.dumps(keep, indent=2, default=str) + "\n")
    counters = (doc.get("transport") or {}).get("counters")
    if counters and counters.get("after"):  # both readings and their differences, beside the run
        efa_witness.write(run_dir, counters)
    try:
        page, _ = write_report([load_run(run_dir)])
    except DriverError as e:
        return {"report": None, "metrics_file": str(metrics), "report_error": str(e)}
    return {"report": str(page), "metrics_file": str(metrics)}


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = command_parser(sub, "report", HELP, __doc__, [*parents, CLUSTER_PARENT])
    p.add_argument(
        "run",
        metavar="RUN",
        nargs="?",
        help="a run id (a directory under --runs-root) or a run directory (default: the newest local run)",
    )
    p.add_argument("--compare", metavar="RUN2", help="a second run to draw on the same axes")
    p.add_argument(
        "--out",
        type=lambda text: output_folder(location(remote=False)(text)),
        help="directory for report.html and the PNGs (default: RUN/report)",
    )
    p.add_argument(
        "--runs-root", type=output_folder, default=runs_root(), help="where run ids are looked up (default: ./runs)"
    )
    p.add_argument(
        "--no-verdict", action="store_true", help="report a NCCL run whose NCCL logs are missing, without a verdict"
    )


def run(args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None = None) -> int:
    """Write the report of RUN (and RUN2); print where it is, or a JSON document with the paths."""
    if args.run is None:
        if args.stack:
            raise DriverError("report --stack needs RUN: the run id to copy from the cluster", exit_code=2)
        args.run = newest_local_run(args.runs_root)
        ui.note(f"the newest run under {args.runs_root}: {Path(args.run).name}")
    refs = [args.run] + ([args.compare] if args.compare else [])
    if args.out is not None:  # before anything is copied or drawn (output_folder refused a file)
        try:
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DriverError(
                f"--out {str(args.out)!r} cannot be made ({e.strerror or e}): name a writable folder", exit_code=2
            ) from None
    if args.stack:
        for flag, ref in zip(("RUN", "--compare"), refs, strict=False):
            if not _RUN_ID.match(ref):  # copied into --runs-root/<ref>: a path there would write elsewhere
                raise DriverError(
                    f"{flag} {ref!r} is no run id: with --stack, name the run by its id (e.g. 20261204-170000-abc123)",
                    exit_code=2,
                )
        target = aws.open_stack(
            args.stack, project_dir=args.project_dir, kubeconfig=args.kubeconfig, deps=deps, on_note=ui.note
        )
        for ref in refs:  # from the pods, else from what the run's end kept in the run bucket
            ui.note(f"copying run {ref} from stack {args.stack} into {args.runs_root / ref}")
            target.collect_run(args.runs_root, ref)
    runs = [load_run(find_run_dir(ref, args.runs_root), not args.no_verdict) for ref in refs]
    page, plots = write_report(runs, args.out)
    paths = {k: str(v) for k, v in plots.items()}
    if args.json:
        metrics = [str(r.dir / METRICS_FILE) for r in runs]
        ui.emit_json({"ok": True, "report": str(page), "plots": paths, "metrics_files": metrics})
    else:
        ui.note(f"report: {page}")
        for name, path in paths.items():
            ui.note(f"  {name}: {path}")
    return 0
