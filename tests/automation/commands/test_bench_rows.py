"""automation/commands/bench.py without a cluster: the two run ids, and which of the throughput
model's measured rows (bench/throughput_model.py) a job's prediction comes from."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import quiet_stack

from automation.commands import bench
from automation.job import cluster_job
from workloads.nccl_check.scope import path_matches_run

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cfg():

    return quiet_stack("us-west-2")


@pytest.mark.parametrize("base", ["20261204-170212-fa9897", "a", "tcp", "efa-tcp"])
def test_neither_run_id_scopes_the_others_nccl_log(base):
    ids = bench.run_ids(base)
    leaks = [
        (mine, other)
        for mine, other in ((ids["efa"], ids["tcp"]), (ids["tcp"], ids["efa"]))
        if path_matches_run(Path(f"/c/runs/{other}/nccl/nccl.{other}.rank0.h.1.log"), mine)
    ]
    assert not leaks, f"run ids {ids}: the NCCL check would count the other run's log for {leaks}"


def test_job_with_an_unmeasured_layout_has_no_model_row(cfg):
    job = dataclasses.replace(cluster_job(cfg, "r1"), seq_len=4096)
    row = bench.model_row(bench.model_rows(), job, cfg.gpu_nodes.gpus_per_node)
    assert row is None, f"expected no measured row for seq_len 4096, got {row and row['config']}"


def test_prediction_of_another_instance_type_says_the_model_does_not_cover_it(cfg):
    other = dataclasses.replace(cfg, gpu_nodes=dataclasses.replace(cfg.gpu_nodes, instance_type="p5.48xlarge"))
    pred = bench.prediction(cluster_job(cfg, "r1"), other)
    assert pred["config"] is None and "p5.48xlarge" in pred["note"], f"expected a note naming p5.48xlarge, got {pred}"


def test_prediction_ratio_spans_the_models_efa_over_tcp_at_both_l4_rates(cfg):
    job = cluster_job(cfg, "r1")
    model = bench.load_model()
    row = bench.model_row(bench.model_rows(), job, cfg.gpu_nodes.gpus_per_node)
    at = [model.predict(row, rate) for rate in model.L4_ACHIEVABLE_TFLOPS]
    ratios = [p["efa"]["tokens_per_s"] / p[k]["tokens_per_s"] for p in at for k in ("tcp_best", "tcp_worst")]
    got = bench.prediction(job, cfg)["ratio"]
    assert got == [min(ratios), max(ratios)], f"expected [{min(ratios)}, {max(ratios)}], got {got}"


def test_run_id_too_long_for_its_tcp_suffix_is_refused_naming_the_flag(capsys):
    from automation import cli

    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(["bench", "--stack", "us-west-2", "--run-id", "a" * 61])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--run-id" in err, f"expected exit 2 naming --run-id, got {e.value.code}: {err!r}"


def test_a_rows_unrecorded_field_is_read_from_its_config_string_else_the_default():
    from automation.throughput import _row_field

    row = {"config": "mesh=hsdp+loss_chunk_size=2048+reshard_after_forward=1"}
    got = (_row_field(row, "loss_chunk_size", 8192), _row_field(row, "reshard_after_forward", False))
    assert got == (2048, True), f"expected the config string's 2048 and True, got {got}"
    assert _row_field(row, "ac_policy", "full") == "full", "a field the string does not name is the default"


def test_the_precision_leg_runs_the_other_precision(cfg):
    job = cluster_job(cfg, "r1")
    got = (bench.precision_leg(job), bench.precision_leg(dataclasses.replace(job, float8="off")))
    assert got == (("bf16", "off"), ("float8", "tensorwise")), f"expected bf16 against float8 and back, got {got}"


def test_a_measured_float8_gain_below_the_model_says_its_l4_power_assumption_fails(cfg):
    pred = bench.precision_prediction(cluster_job(cfg, "r1"), cfg)
    said = bench.precision_verdict(pred["ratio"][0] - 0.05, pred["ratio"])
    assert "72 W" in pred["assumption"] and said.endswith("does not hold"), f"{pred['assumption']!r}: {said!r}"
