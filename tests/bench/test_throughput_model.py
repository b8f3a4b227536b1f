"""bench/throughput_model.py: the step-time formula and the AWS sample's bytes."""

from __future__ import annotations

import pytest

from bench import throughput_model as tm

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


def sweep_doc(backend: str, nodes: int) -> dict:
    """A `bench --collectives` document (workloads/collectives_bench.py's shape); the numbers are test values."""
    rows = [
        {"op": "all_reduce", "bytes": 1 << 20, "busbw_gbs": 1.0},
        {"op": "all_reduce", "bytes": 1 << 30, "busbw_gbs": 4.5},
        {"op": "all_gather", "bytes": 1 << 30, "busbw_gbs": 9.0},
    ]
    return {"backend": backend, "nodes": nodes, "rows": rows}


def test_measured_efa_rate_is_the_largest_all_reduces_bus_bandwidth():
    assert tm.measured_nic_gbps(sweep_doc("nccl", 2)) == pytest.approx(36.0), "4.5 GB/s busbw is 36 Gbps"


def test_a_sweep_that_crossed_no_nic_is_refused_as_a_measured_rate():
    with pytest.raises(SystemExit, match="crossed no NIC"):
        tm.measured_nic_gbps(sweep_doc("gloo", 1))


def test_a_measured_rate_replaces_the_assumed_one_in_the_prediction():
    row = {"collectives": {"inter_node_bytes_per_nic": 5e9, "intra_node_bytes_per_gpu": 0.0}, "n_layers": 28}
    row |= {"step_time_s": 0.0, "tokens_per_rank_step": 1, "n_params": 1, "hidden": 1, "seq_len": 1}
    got = tm.predict(row, 54.0, {"efa": 20.0})["efa_serial"]["t"]
    assert got == pytest.approx(2.0), f"5 GB at a measured 20 Gbps is 2 s, got {got}"


def test_a_float8_row_scales_by_the_bf16_rates_times_the_cards_fp8_gains():
    bf16 = {"device": "NVIDIA H100 80GB HBM3", "float8": "off"}
    f8 = {**bf16, "float8": "tensorwise"}
    gain = (1979.0 / 989.0) / (242.5 / 121.0)  # H100's FP8/bf16 over the L4's, from the two datasheets
    got = tm.compute_scale(f8, 60.0) / tm.compute_scale(bf16, 60.0)
    assert got == pytest.approx(gain), f"expected the float8 row's scale to be the bf16 one x {gain:.4f}, got {got:.4f}"
