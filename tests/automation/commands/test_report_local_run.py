"""One real local `automation run --json`, the session's shared one (tests/support/shared_setups.py),
feeds every assertion here: the per-step metrics it wrote,
the report it names, and `automation report --compare` over it.

The page is checked with Python's HTML parser, not a browser: Playwright's Chromium cannot be
downloaded here and CI would have to install a browser through the project's own files.
"""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from _shared_env import driver_env

from automation.commands.report import PLOT_DPI, PLOT_SIZE_IN, PLOTS
from workloads.metrics import FIELDS, METRICS_FILE, parse_echo, read_metrics

EXPECTED_PX = (int(PLOT_SIZE_IN[0] * PLOT_DPI), int(PLOT_SIZE_IN[1] * PLOT_DPI))


def driver(args: list[str], cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = driver_env()
    return subprocess.run(
        [sys.executable, "-m", "automation", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def run_doc(local_run_doc) -> dict:
    """The shared local run's document (tests/support/shared_setups.py)."""
    return local_run_doc


class Page(HTMLParser):
    """The figures, images and text of a report page."""

    def __init__(self, text: str):
        super().__init__()
        self.figures: list[str] = []
        self.images: list[dict] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "figure":
            self.figures.append(a.get("id", ""))
        if tag == "img":
            self.images.append(a)

    def handle_data(self, data):
        self.text.append(data)


def test_run_json_names_the_report_and_the_metrics_file(run_doc):
    missing = [k for k in ("report", "metrics_file") if not run_doc.get(k) or not Path(run_doc[k]).is_file()]
    assert not missing, f"expected existing files for {missing}, got report={run_doc.get('report')!r}"


def test_run_json_keeps_the_training_metrics_beside_the_file_paths(run_doc):
    steps = (run_doc.get("metrics") or {}).get("steps")
    assert steps == 20, f"expected doc['metrics'] to stay the training summary (20 steps), got {run_doc.get('metrics')}"


def test_real_run_wrote_one_schema_line_per_step(run_doc):
    records = read_metrics(run_doc["metrics_file"])
    steps = [r["step"] for r in records]
    assert steps == list(range(1, 21)), f"expected steps 1..20, got {steps}"
    bad = [r["step"] for r in records if sorted(r) != sorted(FIELDS)]
    assert not bad, f"expected every line to hold exactly the schema's fields; steps {bad} differ"


def test_metrics_lines_reach_the_driver_through_the_job_log(run_doc):
    """What feeds the progress bar: rank 0's echoed records, as the job log delivers them."""
    tail = next(s["data"]["log_tail"] for s in run_doc["steps"] if s["step"] == "follow")
    steps = [rec["step"] for rec in map(parse_echo, tail) if rec is not None]
    assert steps and steps[-1] == 20, f"expected echoed records up to step 20 in the job log, got steps {steps}"


def test_real_run_metrics_carry_a_gradient_norm(run_doc):
    norms = [r["grad_norm"] for r in read_metrics(run_doc["metrics_file"])]
    assert all(isinstance(n, float) and n > 0 for n in norms), f"expected a positive grad norm each step, got {norms}"


def test_report_page_shows_every_plot_as_an_embedded_png(run_doc):
    page = Page(Path(run_doc["report"]).read_text())
    assert page.figures == [f"plot-{n}" for n in PLOTS], f"expected figures for {list(PLOTS)}, got {page.figures}"
    alts = [i.get("alt") for i in page.images]
    assert alts == list(PLOTS.values()), f"expected images titled {list(PLOTS.values())}, got {alts}"
    assert all(i["src"].startswith("data:image/png;base64,") for i in page.images), "expected embedded PNG data"


def test_report_page_states_the_verdict_and_the_versions(run_doc):
    text = " ".join(Page(Path(run_doc["report"]).read_text()).text)
    for want in ("not-applicable", "torch", "ray", "tokens/s (mean after warm-up)"):
        assert want in text, f"expected {want!r} in the report's text"


def test_report_pngs_open_as_images_of_the_plot_size(run_doc):
    from PIL import Image

    report_dir = Path(run_doc["report"]).parent
    sizes = {n: Image.open(report_dir / f"{n}.png").size for n in PLOTS}
    assert set(sizes.values()) == {EXPECTED_PX}, f"expected every plot {EXPECTED_PX}, got {sizes}"


def test_embedded_png_is_the_written_file(run_doc):
    report_dir = Path(run_doc["report"]).parent
    src = Page(Path(run_doc["report"]).read_text()).images[0]["src"]
    embedded = base64.b64decode(src.split(",", 1)[1])
    assert embedded == (report_dir / "loss.png").read_bytes(), "expected the page to embed loss.png itself"


def test_compare_overlays_two_runs(run_doc, tmp_path):
    """The second run is the real run's directory under another id with every loss halved."""
    from PIL import Image

    first = Path(run_doc["metrics_file"]).parent
    second = tmp_path / "runs" / "second-run"
    shutil.copytree(first, second, ignore=shutil.ignore_patterns("report*", "ray_results", "tensorboard"))
    lines = [json.loads(x) for x in (second / METRICS_FILE).read_text().splitlines()]
    rewritten = [{**r, "run_id": "second-run", "loss": r["loss"] / 2} for r in lines]
    (second / METRICS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rewritten))
    proc = driver(["report", str(first), "--compare", "second-run", "--json"], tmp_path, timeout=120)
    assert proc.returncode == 0, f"expected exit 0, got {proc.returncode}: {proc.stderr[-1500:]}"
    doc = json.loads(proc.stdout)
    text = Path(doc["report"]).read_text()
    assert first.name in text and "second-run" in text, "expected the page to name both runs"
    size = Image.open(io.BytesIO(Path(doc["plots"]["loss"]).read_bytes())).size
    assert size == EXPECTED_PX, f"expected the overlay plot at {EXPECTED_PX}, got {size}"
