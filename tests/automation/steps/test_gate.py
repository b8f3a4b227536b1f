"""automation/steps/gate.py's reading of `nvidia-smi --query-gpu=... --format=csv,noheader,nounits`: comma and
space between fields, one GPU a line, `[N/A]` where the GPU does not report a field (nvidia-smi(1): "Any unsupported
data is indicated by a N/A"). The `0, NVIDIA L4, GPU-c2f76b33-...` shape is a public capture's (a DRA driver check
record, found with find_string "NVIDIA L4, GPU-"); the ECC and remap columns are set per test."""

from __future__ import annotations

import pytest

from automation.steps.gate import GATE_SHARE, check_link, gpu_problems, parse_nvidia_smi

L4 = "0, NVIDIA L4, GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"


def test_l4_row_remap_fields_read_as_not_reported_never_as_pass_or_fail():
    (gpu,) = parse_nvidia_smi(f"{L4}, 0, [N/A], [N/A]\n")
    assert (gpu.name, gpu.ecc_uncorrected, gpu.remap_pending, gpu.remap_failed) == ("NVIDIA L4", 0, None, None)


def test_an_ecc_count_of_n_a_is_not_reported():
    (gpu,) = parse_nvidia_smi(f"{L4}, [N/A], No, No\n")
    assert (gpu.ecc_uncorrected, gpu.remap_pending, gpu.remap_failed) == (None, False, False)


def test_a_pending_remap_and_a_failed_remap_are_each_a_problem():
    gpus = parse_nvidia_smi(f"{L4}, 0, Yes, No\n1, NVIDIA L4, GPU-b, 0, No, Yes\n")
    assert [p.split(" has ")[1] for p in gpu_problems(gpus, 2)] == [
        "a row remap pending (a GPU reset is needed)",
        "a failed row remap",
    ]


def test_a_node_short_of_gpus_is_a_problem_even_when_each_gpu_is_healthy():
    assert gpu_problems(parse_nvidia_smi(f"{L4}, 0, [N/A], [N/A]\n"), 4) == ["nvidia-smi lists 1 GPUs, expected 4"]


def test_a_line_with_missing_fields_is_refused():
    with pytest.raises(ValueError, match="expected 6 fields"):
        parse_nvidia_smi("0, NVIDIA L4, GPU-x, 0\n")


def test_a_sweep_that_crossed_no_nic_fails_the_link_instead_of_passing():
    doc = {"backend": "gloo", "nodes": 1, "rows": []}
    assert check_link(doc, ["a", "b"], 40.0).status == "fail"


def test_the_link_passes_at_exactly_the_stated_share():
    busbw_gbs = GATE_SHARE * 40.0 / 8
    doc = {"backend": "nccl", "nodes": 2, "rows": [{"op": "all_reduce", "bytes": 1, "busbw_gbs": busbw_gbs}]}
    assert check_link(doc, ["a", "b"], 40.0).status == "pass"
