"""workloads/throughput_model.py: the step-time formula, the AWS sample's bytes, the L4 budget, the choice of
the default, and a job's measured row."""

from __future__ import annotations

import pytest

from workloads import throughput_model as tm

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


# ---- The throughput model's limits pinned by value and judged on both sides (issue 48), through its public functions
# (workloads/throughput_model.py): the L4 memory budget, the 15% rule for hiding the network over EFA, the ranking, and
# which bandwidth sweeps count as a measured EFA rate.
#
# The budget written out from its cited parts, not from the module: 22888 MiB per L4 (EC2 DescribeInstanceTypes for
# g6.12xlarge), less 0.82 GiB of context, 3 communicators x 4 channels x 4 connections x 9.1875 MiB of NCCL buffers
# (441 MiB), and a 0.5 GiB margin: 22888/1024 - 0.82 - 441/1024 - 0.5 = 20.6009 GiB.

LIMIT_GIB = 22888 / 1024 - 0.82 - 441 / 1024 - 0.5


def test_the_l4_budget_is_its_memory_less_context_nccl_and_margin():
    assert tm.reserved_limit_gib() == pytest.approx(LIMIT_GIB, abs=1e-9)
    assert round(LIMIT_GIB, 4) == 20.6009


def _row(config="c", reserved=10.0, step=1.0, nic=0.0, pcie=0.0, tokens=1000) -> dict:
    """A fake_rank_step.py row (bench/fake_rank_step.py's keys); the numbers are test values."""
    return {
        "config": config,
        "tokens_per_rank_step": tokens,
        "collectives": {"inter_node_bytes_per_nic": nic, "intra_node_bytes_per_gpu": pcie},
        "step_time_s": step,
        "peak_allocated_gib": reserved - 1,
        "peak_reserved_gib": reserved,
        "n_layers": 3,
        "n_params": 1000,
        "hidden": 8,
        "seq_len": 16,
        "device": "NVIDIA H100 80GB HBM3",
    }


@pytest.mark.parametrize(("reserved", "fits"), [(LIMIT_GIB, True), (LIMIT_GIB + 1e-6, False), (5.0, True)])
def test_a_config_fits_up_to_the_budget_and_not_past_it(reserved, fits):
    (row,) = tm.candidate_table([_row(reserved=reserved)], {})
    assert row["fits"] is fits


def test_a_lower_reserved_peak_with_expandable_segments_makes_a_config_fit():
    table = tm.candidate_table(
        [_row("a", reserved=25.0)], {"a": {"peak_reserved_gib": 20.0}, "b": {"peak_reserved_gib": 1.0}}
    )
    assert (table[0]["fits"], table[0]["reserved_expandable_gib"]) == (True, 20.0)


def test_an_expandable_row_without_a_peak_leaves_the_measured_one():
    (row,) = tm.candidate_table([_row("a", reserved=25.0)], {"a": {"peak_reserved_gib": None}})
    assert (row["fits"], row["reserved_expandable_gib"]) == (False, None)


def test_a_candidate_row_carries_its_bytes_in_gb_and_both_l4_rates():
    (row,) = tm.candidate_table([_row(nic=2e9, pcie=3e9)], {}, {"efa": 40.0})
    assert (row["nic_gb"], row["pcie_gb"], row["t_h200"], row["alloc_gib"], row["reserved_gib"]) == (
        2.0,
        3.0,
        1.0,
        9.0,
        10.0,
    )
    assert (row["low"]["rate"], row["high"]["rate"], set(row["low"]) - {"rate", "t_compute"}) == (
        54.0,
        71.0,
        {"efa", "efa_serial"},
    )
    assert set(row["high"]) - {"rate", "t_compute"} == {"efa", "efa_serial"}, "the fast rate ignored the links given"
    assert (row["config"], row["tokens_per_rank_step"]) == ("c", 1000)


def _cand(config, fits=True, t_compute=1.0, efa_t=1.0, tcp_tps=1.0, efa_tps=1.0) -> dict:
    low = {"t_compute": t_compute, "efa": {"t": efa_t, "tokens_per_s": efa_tps}, "tcp_worst": {"tokens_per_s": tcp_tps}}
    return {"config": config, "fits": fits, "low": low}


@pytest.mark.parametrize(("efa_t", "hidden"), [(1.15, True), (1.1500001, False)])
def test_the_network_counts_as_hidden_up_to_fifteen_percent_over_compute(efa_t, hidden):
    table = [_cand("slow-net", efa_t=efa_t, tcp_tps=9.0), _cand("fallback", tcp_tps=1.0)]
    assert tm.choose_default(table)["config"] == ("slow-net" if hidden else "fallback")


def test_a_config_that_does_not_fit_is_never_chosen():
    table = [_cand("big", fits=False, tcp_tps=9.0), _cand("small", tcp_tps=1.0)]
    assert tm.choose_default(table)["config"] == "small"


def test_the_most_tokens_at_worst_case_tcp_wins_then_over_efa():
    table = [
        _cand("a", tcp_tps=5.0, efa_tps=1.0),
        _cand("b", tcp_tps=5.0, efa_tps=2.0),
        _cand("c", tcp_tps=4.0, efa_tps=9.0),
    ]
    assert tm.choose_default(table)["config"] == "b"


def test_no_candidate_that_fits_and_hides_the_network_stops_with_why():
    with pytest.raises(SystemExit) as err:
        tm.choose_default([_cand("a", fits=False), _cand("b", efa_t=2.0)])
    assert err.value.code == "no candidate fits an L4 with margin and hides the network over EFA"


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        (
            {"backend": "gloo", "nodes": 2},
            "f: backend 'gloo' on 2 node(s) crossed no NIC: pass a sweep run with NCCL across two nodes",
        ),
        (
            {"backend": "nccl", "nodes": 1},
            "f: backend 'nccl' on 1 node(s) crossed no NIC: pass a sweep run with NCCL across two nodes",
        ),
        (
            {"backend": "nccl"},
            "f: backend 'nccl' on None node(s) crossed no NIC: pass a sweep run with NCCL across two nodes",
        ),
        ({"backend": "nccl", "nodes": 2}, "f: no all_reduce row"),
        (
            {"backend": "nccl", "nodes": 2, "rows": [{"op": "all_gather", "bytes": 1, "busbw_gbs": 1.0}]},
            "f: no all_reduce row",
        ),
    ],
    ids=["gloo", "one-node", "nodes-unknown", "no-rows", "no-all-reduce"],
)
def test_a_sweep_that_measured_no_nic_rate_is_refused_with_why(doc, why):
    with pytest.raises(SystemExit) as err:
        tm.measured_nic_gbps(doc, "f")
    assert err.value.code == why


def test_a_sweep_of_two_nodes_counts_and_the_default_source_is_named():
    doc = {"backend": "nccl", "nodes": "2", "rows": [{"op": "all_reduce", "bytes": 8, "busbw_gbs": 0.5}]}
    assert tm.measured_nic_gbps(doc) == 4.0
    with pytest.raises(SystemExit, match=r"^the sweep: no all_reduce row$"):
        tm.measured_nic_gbps({"backend": "nccl", "nodes": 3, "rows": []})


def test_a_rows_unrecorded_field_is_read_from_its_config_string_else_the_default():
    row = {"config": "mesh=hsdp+loss_chunk_size=2048+reshard_after_forward=1"}
    got = (tm._row_field(row, "loss_chunk_size", 8192), tm._row_field(row, "reshard_after_forward", False))
    assert got == (2048, True), f"expected the config string's 2048 and True, got {got}"
    assert tm._row_field(row, "ac_policy", "full") == "full", "a field the string does not name is the default"
