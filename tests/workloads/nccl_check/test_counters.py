"""The EFA counter witness's pure parts: the read script's output parsed, what moved between two reads,
and the judge that joins the counters to the NCCL log's verdict (workloads/nccl_check/counters.py and
witnesses.py). Readings are in the layout the EFA driver's sysfs files give (counters.py cites it)."""

from __future__ import annotations

import pytest

from workloads.nccl_check import witnesses as w
from workloads.nccl_check.counters import NicDelta, NodeReading, deltas, parse_reading

NODE = "ip-10-30-1-17"
GB = 10**9


def reading(tx: int, rx: int | None = None, device: str = "rdmap0s31") -> NodeReading:
    return NodeReading({device: {"tx_bytes": tx, "rx_bytes": tx if rx is None else rx, "tx_pkts": 9}})


def test_read_output_parses_into_counters_by_device():
    out = "noise\nEFA_COUNTERS_BEGIN\nDEVICE rdmap0s31\nrx_bytes 12\ntx_bytes 34\nEFA_COUNTERS_END\n"
    assert parse_reading(out).devices == {"rdmap0s31": {"rx_bytes": 12, "tx_bytes": 34}}


def test_read_output_without_its_end_marker_is_an_error_not_a_partial_read():
    assert parse_reading("EFA_COUNTERS_BEGIN\nDEVICE efa_0\ntx_bytes 1\n").error, "a truncated read must not parse"


def test_counter_file_cat_could_not_read_is_listed_as_unreadable():
    out = "EFA_COUNTERS_BEGIN\nDEVICE efa_0\nUNREADABLE tx_bytes\nrx_bytes 5\nEFA_COUNTERS_END\n"
    assert parse_reading(out).unreadable == {"efa_0": ("tx_bytes",)}


def test_bytes_moved_are_after_minus_before():
    (d,) = deltas({NODE: reading(5 * GB)}, {NODE: reading(8 * GB)})
    assert (d.outcome, d.sent) == ("ok", 3 * GB), f"got {d}"


def test_a_counter_that_went_down_is_a_reset():
    (d,) = deltas({NODE: reading(5 * GB)}, {NODE: reading(GB)})
    assert d.outcome == "reset", f"got {d}"


def test_a_device_seen_before_but_not_after_is_missing():
    (d,) = deltas({NODE: reading(5 * GB)}, {NODE: NodeReading()})
    assert d.outcome == "missing", f"got {d}"


def test_a_node_whose_read_failed_is_unreadable():
    (d,) = deltas({NODE: reading(5 * GB)}, {NODE: NodeReading(error="exec failed")})
    assert d.outcome == "unreadable", f"got {d}"


def moved(sent: int) -> list[NicDelta]:
    return [NicDelta(NODE, "rdmap0s31", "ok", {"tx_bytes": sent})]


@pytest.mark.parametrize(
    ("require", "log", "sent", "outcome"),
    [
        ("efa", "pass", 3 * GB, w.PASS),
        ("efa", "pass", int(0.1 * GB), w.FLAT),
        ("efa", "fail", 0, w.BOTH_NOT_EFA),
        ("efa", "inconclusive", 3 * GB, w.MOVED_LOG_UNSURE),
        ("socket", "pass", 0, w.PASS),
        ("socket", "pass", 3 * GB, w.DISAGREE),
    ],
)
def test_the_two_witnesses_join_into_one_outcome(require, log, sent, outcome):
    got = w.judge(require, log, "cause", moved(sent), 3 * GB)
    assert (got.outcome, got.ok) == (outcome, outcome == w.PASS), f"got {got.outcome}: {got.message}"


def test_counters_just_under_the_stated_fraction_of_the_prediction_fail():
    got = w.judge("efa", "pass", "cause", moved(int((w.MIN_FRACTION - 0.01) * 3 * GB)), 3 * GB)
    assert got.outcome == w.FLAT, f"got {got.outcome}"


def test_no_prediction_for_the_job_is_no_pass():
    got = w.judge("efa", "pass", "cause", moved(3 * GB), None)
    assert (got.outcome, got.ok) == (w.NO_PREDICTION, False), f"got {got.outcome}"


def test_a_node_showing_fewer_devices_than_it_advertises_is_short():
    r = NodeReading(reading(5 * GB).devices, advertised=2)
    assert r.short == "1 EFA device(s) with readable hw_counters, the node advertises 2", r.short


def test_a_node_showing_no_device_is_short_even_when_it_advertises_none():
    assert NodeReading(advertised=0).short, "a reading with no device must never serve as the first half"


def test_a_node_showing_what_it_advertises_is_not_short():
    assert NodeReading(reading(5 * GB).devices, advertised=1).short == ""
