"""The training progress bar: fed by rank 0's metrics lines in the job log, silent with --json."""

from __future__ import annotations

import io
import json

from rich.console import Console

from automation.ui import Ui
from workloads.metrics import ECHO_PREFIX


def echo(step: int, total: int = 20, loss: float = 2.5, tps: float = 12345.0) -> str:
    rec = {"schema": 1, "run_id": "r", "step": step, "total_steps": total, "loss": loss, "tokens_per_s": tps}
    return "(RayTrainWorker pid=7) " + ECHO_PREFIX + json.dumps(rec)


def terminal_ui() -> tuple[Ui, io.StringIO]:
    ui = Ui()
    out = io.StringIO()
    ui.console = Console(file=out, force_terminal=True, width=160, highlight=False)
    return ui, out


def test_bar_shows_step_total_loss_and_tokens_per_s():
    ui, out = terminal_ui()
    ui.step_started("train")
    for n in (1, 2, 3):
        ui.log(echo(n, loss=3.0 - n / 10))
    ui.close()
    text = out.getvalue()
    for want in ("3/20", "loss 2.7000", "12,345 tokens/s", "ETA"):
        assert want in text, f"expected {want!r} in the bar's output, got {text[-400:]!r}"


def test_metrics_lines_are_not_printed_as_log_lines():
    ui, out = terminal_ui()
    ui.log(echo(1))
    ui.close()
    assert ECHO_PREFIX.strip() not in out.getvalue(), "expected the metrics line to feed the bar, not the log"


def test_finished_step_closes_the_bar():
    ui, _ = terminal_ui()
    ui.log(echo(1))
    ui._stop_status()
    assert ui._bar is None, "expected the bar gone once the step ends"


def test_json_mode_shows_no_progress():
    ui = Ui(json_mode=True)
    out = io.StringIO()  # a terminal, so a bar would be drawn if one were started
    ui.console = Console(file=out, force_terminal=True, width=160)
    for n in (1, 2):
        ui.log(echo(n))
    ui.close()
    assert "tokens/s" not in out.getvalue(), f"expected no progress output with --json, got {out.getvalue()!r}"


STEP_LINE = "(RayTrainWorker pid=7) [train] step 3/20 loss 2.7000 step_time 676 ms tokens/s 12,345 peak_mem 0.87 GB"


def test_a_step_is_shown_once_on_a_terminal_by_the_bar_not_also_as_its_raw_line():
    ui, out = terminal_ui()
    ui.step_started("train")
    ui.log(echo(3))
    ui.log(STEP_LINE)
    ui.close()
    assert "step_time 676 ms" not in out.getvalue(), f"expected the raw step line hidden, got {out.getvalue()!r}"


def test_without_a_terminal_the_raw_step_line_is_the_progress():
    ui = Ui()
    out = io.StringIO()
    ui.console = Console(file=out, force_terminal=False, width=400, highlight=False)
    ui.log(STEP_LINE)
    ui.close()
    assert "[train] step 3/20" in out.getvalue(), f"expected the step line printed, got {out.getvalue()!r}"


def test_the_bar_labels_its_tokens_per_s_as_the_last_steps():
    ui, out = terminal_ui()
    ui.step_started("train")
    ui.log(echo(1))
    ui.close()
    assert "tokens/s (last step)" in out.getvalue(), f"expected the label, got {out.getvalue()[-300:]!r}"
