"""bench/throughput_model.py: the step-time formula and the AWS sample's bytes."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from conftest import REPO


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_throughput_model", REPO / "bench" / "throughput_model.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


tm = _load_script()
LINK = tm.Link(nic_bytes=5e9, pcie_bytes=3.2e9, groups=29)  # 1 s on a 40 Gbps NIC, 0.1 s on PCIe


def test_serial_step_adds_compute_nic_and_pcie():
    got = tm.step_time(2.0, LINK, 40.0, overlap=False)
    assert got == pytest.approx(3.1), f"expected 2 s compute + 1 s NIC + 0.1 s PCIe = 3.1 s, got {got}"


def test_overlap_hides_the_network_behind_longer_compute_but_for_the_edge_groups():
    got = tm.step_time(2.0, LINK, 40.0, overlap=True)
    expected = 2.0 + 2 / 29 * 1.0
    assert got == pytest.approx(expected), f"expected {expected} s (compute plus the unhidden 2/29 of 1 s), got {got}"


def test_overlap_never_predicts_more_than_serial():
    for compute in (0.0, 0.5, 1.0, 5.0):
        for gbps in (10.0, 40.0):
            a, b = tm.step_time(compute, LINK, gbps, True), tm.step_time(compute, LINK, gbps, False)
            assert a <= b, f"compute {compute} s at {gbps} Gbps: overlap {a} s exceeds serial {b} s"


def test_aws_sample_nic_bytes_are_seven_eighths_of_two_gathers_and_one_reduce_scatter():
    row = {
        "n_layers": 28,
        "collectives": {
            "by_kind": {
                "all_gather/bfloat16/8-rank": {"bytes": 800},
                "reduce_scatter/bfloat16/8-rank": {"bytes": 800},
            }
        },
    }
    got = tm.predict_aws_sample(row)["nic_bytes"]
    assert got == pytest.approx(7 / 8 * 2400), f"expected 7/8 x (2 x 800 + 800) = 2100 B, got {got}"


def test_chosen_default_fits_with_margin_and_hides_the_network_over_efa():
    rows = tm.load_rows(tm.DEFAULT_ROWS)
    best = tm.choose_default(tm.candidate_table(rows, {}))
    assert best["reserved_gib"] <= tm.reserved_limit_gib(), f"chosen {best['config']} does not fit: {best}"
    ratio = best["low"]["efa"]["t"] / best["low"]["t_compute"]
    assert ratio <= 1.15, f"chosen {best['config']}: EFA step is {ratio:.2f} x its compute-only step, expected <= 1.15"


def test_a_float8_row_scales_by_the_bf16_rates_times_the_cards_fp8_gains():
    bf16 = {"device": "NVIDIA H100 80GB HBM3", "float8": "off"}
    f8 = {**bf16, "float8": "tensorwise"}
    gain = (1979.0 / 989.0) / (242.5 / 121.0)  # H100's FP8/bf16 over the L4's, from the two datasheets
    got = tm.compute_scale(f8, 60.0) / tm.compute_scale(bf16, 60.0)
    assert got == pytest.approx(gain), f"expected the float8 row's scale to be the bf16 one x {gain:.4f}, got {got:.4f}"
