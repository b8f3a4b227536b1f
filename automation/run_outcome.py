"""The run's report: one summary of a run (step timings, throughput, MFU, loss, transport verdict, cost per hour),
built the same way for every target, as a human table and as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table

from automation.cost import CostEstimate
from automation.pipeline import PipelineResult
from automation.recovery import Failure, Recovery
from automation.start_phases import StartPhases
from automation.targets import Target
from automation.ui import STATUS_STYLE, Ui
from workloads.summary import RunSummary


@dataclass(frozen=True)
class RunReport:
    target: str
    stack: str | None
    pipeline: PipelineResult
    training: RunSummary | None = None  # what the training job wrote in summary.json
    job_id: str | None = None
    transport: dict | None = None  # TransportVerdict.to_dict()
    cost: CostEstimate | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    files: str | None = None  # where the run's files are (summary, NCCL logs), when it wrote any
    start: dict | None = None  # seconds of each phase of the start (automation/start_phases.py), where known
    failure: Failure | None = None  # why the failed job failed (RunController.recovering), unless recovered from
    recoveries: tuple[Recovery, ...] = ()  # the recoveries made, each with the failure it recovered from

    def metrics(self) -> dict[str, object]:
        s = self.training or RunSummary()
        keys = (
            "run_id world_size steps precision tokens_per_s tokens_per_s_per_gpu mfu loss_first loss_last peak_mem_gb"
        )
        return {**{k: getattr(s, k) for k in keys.split()}, **{f"start_{k}": v for k, v in (self.start or {}).items()}}

    def to_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "stack": self.stack,
            **self.pipeline.to_dict(),
            "job_id": self.job_id,
            "metrics": self.metrics(),
            "transport": self.transport,
            "cost": self.cost.to_dict() if self.cost else None,
            "cost_per_hour": self.cost.text() if self.cost else "n/a",
            "notes": list(self.notes),
            "files": self.files,
            "failure": asdict(self.failure) if self.failure else None,
            "recoveries": [asdict(r) for r in self.recoveries],
        }


def build_report(
    target: Target,
    result: PipelineResult,
    command: str,
    failure: Failure | None = None,
    recoveries: tuple[Recovery, ...] = (),
) -> RunReport:
    """The report of `command`'s run on `target`: call it after the target is closed, so its notes are all in;
    ``failure`` and ``recoveries`` as its RunController told them."""
    followed, check = result.state.follow, result.state.check
    outcome = followed.data if followed is not None else None
    return RunReport(
        target=target.name,
        stack=target.stack_name,
        pipeline=result,
        training=outcome.summary if outcome is not None else None,
        job_id=outcome.job_id if outcome is not None else None,
        transport=check.data.to_dict() if check is not None and check.data is not None else None,
        cost=target.cost(command) if result.state.cluster_seen else None,
        notes=tuple(target.notes),
        files=target.files(result) if followed is not None else None,
        start=outcome.start if outcome is not None else None,
        failure=failure,
        recoveries=recoveries,
    )


def show(report: RunReport, ui: Ui, files: dict[str, str | None]) -> int:
    """Print the report (JSON or tables) with where its HTML report and metrics are (``files``), and
    return the exit code: 0 when every step passed, else 1."""
    if ui.json_mode:
        ui.emit_json({**report.to_dict(), **files})
    else:
        render(report, ui.console)
        if files.get("report"):  # the closing line: where the report is, or why there is none
            ui.note(f"report: {files['report']}  (metrics: {files['metrics_file']})")
        elif files.get("report_error"):
            ui.note(f"no report: {files['report_error']}")
    return 0 if report.pipeline.ok else 1


def _fmt(v: object, spec: str = "") -> str:
    """``v`` in ``spec`` when a number, else as text; n/a when unknown."""
    return "n/a" if v is None else format(v, spec) if isinstance(v, (int, float)) else str(v)


def render(report: RunReport, console: Console) -> None:
    """Print the final tables with rich: steps, then results, then what to do after a failure."""
    steps = Table(title=f"run ({report.target}{', stack ' + report.stack if report.stack else ''})", show_lines=False)
    for col in ("step", "status", "seconds", "summary"):
        steps.add_column(col, overflow="fold")
    for t in report.pipeline.steps:
        r = t.result
        steps.add_row(
            r.step, f"[{STATUS_STYLE[r.status]}]{r.status}[/]", f"{t.seconds:.1f}", r.summary.partition("\n")[0]
        )
    for name in report.pipeline.not_run:
        steps.add_row(name, "[dim]not run[/]", "", "")
    console.print(steps)

    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}")
    if report.files:
        console.print(f"[bold]files:[/] {report.files}")
    if any(x is not None for x in (report.training, report.transport, report.cost)):
        m = report.metrics()
        res = Table(title="results", show_header=False)
        res.add_column("what")
        res.add_column("value", overflow="fold")
        res.add_row("job", _fmt(report.job_id))
        # float8 never replaces bf16 silently: the summary says which ran
        res.add_row("precision", _fmt(m["precision"]))
        res.add_row(
            "throughput",
            f"{_fmt(m['tokens_per_s'], ',.0f')} tokens/s ({_fmt(m['tokens_per_s_per_gpu'], ',.0f')} per GPU), "
            "mean over the steps after warm-up (the report's headline figure)",
        )
        res.add_row("MFU", _fmt(m["mfu"], ".1%") if m["mfu"] is not None else "n/a (CPU)" if report.training else "n/a")
        res.add_row("loss", f"{_fmt(m['loss_first'], '.4f')} -> {_fmt(m['loss_last'], '.4f')}")
        tv = report.transport or {}
        res.add_row("transport", f"{tv.get('verdict', 'n/a')}: {tv.get('cause', '')}".strip())
        witness = (tv.get("counters") or {}).get("witnesses")
        if witness:  # the EFA counter witness: its outcome and, per NIC, counted against predicted bytes
            res.add_row("EFA counters", f"{witness['outcome']}: {witness['message']}")
        res.add_row("cost per hour", report.cost.text() if report.cost else "n/a")
        if report.start:
            res.add_row("start", StartPhases(**report.start).text())
        console.print(res)
    p = report.pipeline
    if not p.ok:
        console.print(f"[bold red]failed at {p.failed_step}[/]: {p.reason}")
        if p.advice:
            console.print(f"[bold]what exists now:[/] {p.advice.exists}")
            for cmd in p.advice.next_commands:
                console.print(f"  [cyan]{cmd}[/]")
