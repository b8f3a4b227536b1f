"""workloads/collectives_bench.py's arithmetic and table (in process): nccl-tests' bus bandwidth
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md) and the sweep's sizes."""

from __future__ import annotations

import pytest

from workloads import collectives_bench as cb


@pytest.mark.parametrize(
    ("op", "n", "factor"), [("all_reduce", 8, 1.75), ("all_gather", 8, 0.875), ("reduce_scatter", 2, 0.5)]
)
def test_bus_bandwidth_factor_is_nccl_tests_ring_accounting(op, n, factor):
    assert cb.bus_factor(op, n) == factor, f"{op} over {n}: expected {factor}, got {cb.bus_factor(op, n)}"


def test_a_point_at_the_link_rate_is_100_percent_of_the_link():
    # 2 ranks all-reduce: busbw = algbw; 5 GB in 1 s is the 40 Gbps link's 5 GB/s
    assert cb.row("all_reduce", 5 * 10**9, 2, 1.0)["of_link"] == pytest.approx(1.0)


def test_sizes_double_from_1_mib_to_1_gib():
    got = cb.sizes(cb.MIB, 1024 * cb.MIB)
    assert (len(got), got[0], got[-1]) == (11, cb.MIB, 1024 * cb.MIB), f"got {got}"


def test_table_has_one_line_per_point_after_its_two_header_lines():
    doc = {"backend": "gloo", "world": 2, "nodes": 1, "rows": [cb.row(op, cb.MIB, 2, 1e-3) for op in cb.OPS]}
    assert len(cb.table(doc)) == 2 + len(cb.OPS), "\n".join(cb.table(doc))
