"""Human output (rich spinners and tables) or machine output (--json: one JSON document on stdout).

In --json mode everything meant for people goes to stderr, so stdout holds the document alone.
"""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.status import Status
from rich.table import Table

from automation.errors import DriverError
from automation.pipeline import Timed
from automation.ray_head import is_step_line, worth_showing
from workloads.metrics import parse_echo

STATUS_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


class Ui:
    def __init__(self, json_mode: bool = False):
        self.json_mode = json_mode
        self.console = Console(stderr=json_mode, highlight=False, soft_wrap=False)
        self._status: Status | None = None
        self._bar: Progress | None = None  # the training progress bar, fed by rank 0's metrics lines

    # ---- progress ------------------------------------------------------------------------------
    def step_started(self, name: str) -> None:
        self._stop_status()
        self._status = self.console.status(f"[bold]{name}[/] …")
        self._status.start()
        self._current = name

    def progress(self, text: str) -> None:
        """A progress line of the running step: shown on the spinner; training lines are also printed."""
        if self._status is not None:
            self._status.update(f"[bold]{self._current}[/] {escape(text[:120])}")

    def milestone(self, text: str) -> None:
        """A long command's progress: on the spinner on a terminal, else a line of its own (a spinner
        off a terminal shows nothing, and a drill then said nothing for minutes)."""
        if self.console.is_terminal:
            self.progress(text)
        else:
            self.note(text)

    def log(self, text: str) -> None:
        record = parse_echo(text)
        if record is not None:  # rank 0's metrics line moves the training bar (replacing the spinner); not with --json
            if not self.json_mode:
                self._train_bar(record)
            return
        if self.console.is_terminal and is_step_line(text):
            return  # the bar shows this step already: printed too, every step came out twice
        if not self.json_mode and worth_showing(text):
            self.console.print(f"[dim]{escape(text)}[/]")
        self.progress(text)

    def _train_bar(self, record: dict) -> None:
        """step/total, loss, tokens/s and ETA of the running job, moved to ``record``'s step."""
        if self._bar is None:
            self._stop_status()
            self._bar = Progress(
                TextColumn("[bold]train[/] step"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("loss {task.fields[loss]}  {task.fields[tps]} tokens/s (last step)  ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.add_task("train", loss="…", tps="…")
            self._bar.start()
        loss, tps = record.get("loss"), record.get("tokens_per_s")
        self._bar.update(
            self._bar.task_ids[0],
            completed=record["step"],
            total=record["total_steps"],
            loss=f"{loss:.4f}" if loss is not None else "n/a",
            tps=f"{tps:,.0f}" if tps is not None else "n/a",
        )
        self._bar.refresh()  # at most once a step: the bar shows each step as it lands

    def step_finished(self, timed: Timed) -> None:
        self._stop_status()
        r = timed.result
        first = r.summary.splitlines()[0] if r.summary else ""
        self.console.print(
            f"[{STATUS_STYLE[r.status]}]{r.status:>4}[/] [bold]{r.step}[/] ({timed.seconds:.1f} s) {escape(first)}"
        )
        if not r.findings:
            return
        table = Table(show_header=True, header_style="bold")  # the findings, each with its fix
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")
        for f in r.findings:
            table.add_row(escape(f.check), f"[{STATUS_STYLE[f.status]}]{f.status}[/]", escape(f.detail), escape(f.fix))
        self.console.print(table)

    def _stop_status(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def note(self, text: str) -> None:
        self.console.print(escape(text))

    def error(self, text: str) -> None:
        self._stop_status()
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {escape(text)}")

    def emit_json(self, doc: object) -> None:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        sys.stdout.flush()

    def close(self) -> None:
        self._stop_status()


def tty_confirm(question: str) -> bool:
    """Ask `question` on the terminal; without one, a bad-input error that says to pass --yes."""
    if not sys.stdin.isatty():
        raise DriverError(f"{question} — no terminal to ask on: pass --yes to go ahead", exit_code=2)
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
