"""The per-step metrics file: its schema, what survives a kill, resume appending, and the echo the
driver's progress bar reads."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO

from workloads.metrics import (
    ECHO_PREFIX,
    FIELDS,
    METRICS_FILE,
    DataWait,
    MetricsError,
    MetricsWriter,
    StepMetrics,
    latest_per_step,
    parse_echo,
    read_metrics,
)


def step(n: int, loss: float = 2.0) -> StepMetrics:
    return StepMetrics(n, 10, loss, 1e-3, 1000.0, None, None, 0.5, 0.01, 1.5, 0.8)


def write_steps(run_dir: Path, steps: list[int], **kw) -> None:
    w = MetricsWriter(run_dir, "run-a", echo=False, tensorboard=False, **kw)
    for n in steps:
        w.write(step(n, loss=float(n)))
    w.close()


def test_each_line_holds_exactly_the_documented_fields(tmp_path):
    write_steps(tmp_path, [1])
    rec = json.loads((tmp_path / METRICS_FILE).read_text().splitlines()[0])
    assert sorted(rec) == sorted(FIELDS), f"expected the fields {sorted(FIELDS)}, got {sorted(rec)}"


def test_observing_page_documents_every_field():
    page = (REPO / "docs" / "observing.md").read_text()
    missing = [k for k in FIELDS if f"`{k}`" not in page]
    assert not missing, f"expected docs/observing.md to document every metrics field, missing {missing}"


def test_reopened_writer_appends_rather_than_overwrites(tmp_path):
    write_steps(tmp_path, [1, 2, 3])
    write_steps(tmp_path, [3, 4])  # a resumed run redoes step 3
    steps = [r["step"] for r in read_metrics(tmp_path / METRICS_FILE)]
    assert steps == [1, 2, 3, 3, 4], f"expected both runs' lines in order, got steps {steps}"


def test_latest_record_of_a_redone_step_wins(tmp_path):
    write_steps(tmp_path, [1, 2, 3])
    w = MetricsWriter(tmp_path, "run-a", echo=False, tensorboard=False)
    w.write(step(3, loss=99.0))
    w.close()
    latest = latest_per_step(read_metrics(tmp_path / METRICS_FILE))
    got = [(r["step"], r["loss"]) for r in latest]
    assert got == [(1, 1.0), (2, 2.0), (3, 99.0)], f"expected step 3 from the resumed run, got {got}"


_KILLED_WRITER = """
import sys, time
from workloads.metrics import MetricsWriter, StepMetrics
w = MetricsWriter(sys.argv[1], "killed", echo=False, tensorboard=False)
n = 0
while True:
    n += 1
    w.write(StepMetrics(n, 10**9, 1.0, 1e-3, 1.0, None, None, 0.01, 0.0, 0.1, None))
    time.sleep(0.01)
"""


def test_writer_killed_mid_run_leaves_only_valid_lines(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(tmp_path)], cwd=REPO)
    path = tmp_path / METRICS_FILE
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not path.exists() or path.read_text().count("\n") < 20):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # no exit handler runs: only what was flushed is there
    proc.wait(timeout=30)
    records = read_metrics(path)
    steps = [r["step"] for r in records]
    assert len(steps) >= 20 and steps == list(range(1, len(steps) + 1)), f"expected steps 1..N (N>=20), got {steps}"


def test_cut_last_line_is_dropped(tmp_path):
    write_steps(tmp_path, [1, 2])
    with (tmp_path / METRICS_FILE).open("a") as f:
        f.write('{"schema": 1, "step": 3, "lo')
    steps = [r["step"] for r in read_metrics(tmp_path / METRICS_FILE)]
    assert steps == [1, 2], f"expected the cut line dropped, got steps {steps}"


def test_damaged_middle_line_is_an_error_naming_the_line(tmp_path):
    write_steps(tmp_path, [1])
    with (tmp_path / METRICS_FILE).open("a") as f:
        f.write("garbage\n")
    write_steps(tmp_path, [2])
    with pytest.raises(MetricsError, match=r"metrics.jsonl:2: not a JSON line"):
        read_metrics(tmp_path / METRICS_FILE)


def test_echoed_line_parses_back_to_the_record(tmp_path, capsys):
    w = MetricsWriter(tmp_path, "run-a", echo=True, tensorboard=False)
    written = w.write(step(7))
    w.close()
    out = capsys.readouterr().out
    assert out.startswith(ECHO_PREFIX), f"expected the line to start with {ECHO_PREFIX!r}, got {out[:40]!r}"
    # Ray prefixes worker output with the worker's name: the record must still be found.
    assert parse_echo("(RayTrainWorker pid=1) " + out.strip()) == written


def test_other_log_lines_are_not_records():
    assert parse_echo("[train] step 3/20 loss 2.0") is None


def test_data_wait_adds_up_time_spent_in_next():
    def slow():
        while True:
            time.sleep(0.05)
            yield 1

    batches = DataWait(slow())
    next(batches), next(batches)
    waited = batches.take()
    assert 0.09 <= waited < 1.0, f"expected about 0.1 s waited over two batches, got {waited:.3f} s"
    assert batches.take() == 0.0, "expected take() to reset the count"


def test_tensorboard_event_file_holds_the_loss_curve(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    w = MetricsWriter(tmp_path, "run-a", echo=False, tensorboard=True)
    for n in (1, 2, 3):
        w.write(step(n, loss=float(n)))
    w.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    assert got == [(1, 1.0), (2, 2.0), (3, 3.0)], f"expected the three losses by step, got {got}"


def test_remote_storage_gets_a_copy_at_the_end(tmp_path):
    from workloads.config import TrainConfig
    from workloads.metrics import StepRecorder

    store = tmp_path / "store"
    cfg = TrainConfig(preset="tiny", run_dir=str(tmp_path / "run"), storage_path=f"file://{store}").resolved()
    rec = StepRecorder(cfg, rank=0, world=1, flops_per_token=1.0, peak_tflops=None, gpu=False)
    rec.record(1, 2.0, 1e-3, 0.5, 0.0, 1.0, None)
    rec.close()
    copied = store / cfg.name / METRICS_FILE
    assert copied.is_file() and read_metrics(copied)[0]["step"] == 1, f"expected a copy with step 1 at {copied}"


def test_non_finite_loss_is_recorded_as_null(tmp_path):
    from workloads.config import TrainConfig
    from workloads.metrics import StepRecorder

    cfg = TrainConfig(preset="tiny", run_dir=str(tmp_path / "run")).resolved()
    rec = StepRecorder(cfg, rank=0, world=1, flops_per_token=1.0, peak_tflops=None, gpu=False)
    rec.record(1, float("nan"), 1e-3, 0.5, 0.0, 1.0, None)
    rec.close()
    loss = read_metrics(tmp_path / "run" / METRICS_FILE)[0]["loss"]
    assert loss is None, f"expected null for a NaN loss, got {loss!r}"


def test_only_rank_0_writes(tmp_path):
    from workloads.config import TrainConfig
    from workloads.metrics import StepRecorder

    cfg = TrainConfig(preset="tiny", run_dir=str(tmp_path / "run")).resolved()
    StepRecorder(cfg, rank=1, world=2, flops_per_token=1.0, peak_tflops=None, gpu=False).record(
        1, 2.0, 1e-3, 0.5, 0, 1, None
    )
    assert not (tmp_path / "run" / METRICS_FILE).exists(), "expected no metrics file from rank 1"


def test_gpu_record_holds_per_gpu_throughput_and_mfu_by_the_stated_formula(tmp_path):
    from workloads.config import TrainConfig
    from workloads.metrics import StepRecorder

    cfg = TrainConfig(preset="tiny", global_batch_size=8, seq_len=2048, run_dir=str(tmp_path / "run")).resolved()
    fpt, peak, world, step_s = 9.3e9, 989.0, 2, 0.5
    rec = StepRecorder(cfg, rank=0, world=world, flops_per_token=fpt, peak_tflops=peak, gpu=True)
    rec.record(1, 2.0, 1e-3, step_s, 0.0, 1.0, None)
    rec.close()
    got = read_metrics(tmp_path / "run" / METRICS_FILE)[0]
    tps = 8 * 2048 / step_s
    expected = {"tokens_per_s": tps, "tokens_per_s_per_gpu": tps / world, "mfu": tps * fpt / (world * peak * 1e12)}
    assert {k: got[k] for k in expected} == pytest.approx(expected), f"expected {expected}, got {got}"


class Partial:  # named like torch's placement: grad_norm_value reads the class name
    pass


class NormOnShards:
    placements = (Partial(),)

    def to_local(self):
        raise AssertionError("a partial norm must not be read as the whole norm")


def test_grad_norm_of_a_plain_tensor_is_its_value():
    import torch

    from workloads.metrics import grad_norm_value

    assert grad_norm_value(torch.tensor(2.5)) == 2.5


def test_grad_norm_that_would_need_a_collective_is_unknown():
    from workloads.metrics import grad_norm_value

    assert grad_norm_value(NormOnShards()) is None


def test_metrics_writer_marks_its_run_directory_for_clean(tmp_path):
    from workloads.metrics import MetricsWriter, is_run_dir

    writer = MetricsWriter(tmp_path / "r1", "r1", echo=False, tensorboard=False)
    writer.close()
    assert is_run_dir(tmp_path / "r1"), (
        f"expected the run marker in {sorted(p.name for p in (tmp_path / 'r1').iterdir())}"
    )
