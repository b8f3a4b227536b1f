"""Both sides of the limits verify enforces in Kubernetes quantities, with the units written out here.

Kubernetes quantities (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/): "Mi" and
"Gi" are powers of two (2**20, 2**30 bytes), "M" and "G" powers of ten; a plain number is bytes. The kubelet
reports a node's allocatable huge pages in any of these forms, so the check must compare amounts, not strings.
"""

from __future__ import annotations

import pytest

from automation.steps.verify_checks import check_hugepages

KEY = "hugepages-2Mi"  # the resource the EFA device plugin's pods and our workers request (infra/manifests.py)
WANT = "5120Mi"  # a worker's request in the example: 5120 MiB = 5,368,709,120 bytes
MIB = 2**20


def _status(allocatable: str) -> str:
    node = {"metadata": {"name": "gpu-a"}, "status": {"allocatable": {KEY: allocatable}}}
    (row,) = check_hugepages([node], {KEY: WANT})
    return row.status


@pytest.mark.parametrize(
    "allocatable",
    ["5120Mi", "5Gi", str(5120 * MIB), "10Gi"],
    ids=["same-unit", "GiB", "bytes", "twice"],
)
def test_a_node_holding_exactly_or_more_than_the_request_passes(allocatable):
    assert _status(allocatable) == "pass", f"{allocatable} allocatable against a request of {WANT}"


@pytest.mark.parametrize(
    "allocatable",
    ["5118Mi", str(5120 * MIB - 2 * MIB), "5G", "5368M"],
    ids=["one-page-short", "bytes-one-page-short", "GB-not-GiB", "MB-not-MiB"],
)
def test_a_node_short_of_the_request_by_a_page_or_by_a_unit_fails(allocatable):
    # 5G = 5,000,000,000 and 5368M = 5,368,000,000 bytes: both under 5120Mi = 5,368,709,120 bytes
    assert _status(allocatable) == "fail", f"{allocatable} allocatable against a request of {WANT}"


def test_a_request_in_bytes_is_compared_as_the_same_amount():
    node = {"metadata": {"name": "gpu-a"}, "status": {"allocatable": {KEY: "5Gi"}}}
    (row,) = check_hugepages([node], {KEY: str(5 * 2**30)})
    assert row.status == "pass", f"5Gi allocatable against a request of {5 * 2**30} bytes: {row}"


def test_one_short_node_of_several_fails_the_row_wherever_it_is_listed():
    for short in range(3):
        nodes = [
            {"metadata": {"name": f"gpu-{i}"}, "status": {"allocatable": {KEY: "5118Mi" if i == short else "5Gi"}}}
            for i in range(3)
        ]
        (row,) = check_hugepages(nodes, {KEY: WANT})
        assert row.status == "fail" and f"gpu-{short} has 5118Mi" in row.detail, f"node {short} short: {row}"


# ---- --data against the worker count, both sides (workloads/data_check.py): a Parquet space counts rows ------
@pytest.mark.parametrize(("rows", "refused"), [(3, True), (4, False)], ids=["one-row-short", "one-row-each"])
def test_a_parquet_corpus_needs_a_row_per_worker(tmp_path, rows, refused):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workloads.data_check import check_data
    from workloads.errors import TrainConfigError

    pq.write_table(pa.table({"text": [f"document {i}" for i in range(rows)]}), tmp_path / "a.parquet")
    try:
        check_data(str(tmp_path / "a.parquet"), world=4)
    except TrainConfigError as e:
        assert refused and "fewer than the 4 workers" in str(e), f"{rows} rows for 4 workers: {e}"
    else:
        assert not refused, f"{rows} rows for 4 workers were accepted"
