"""The EFA counter witness's pure parts: the read script's output parsed, what moved between two reads,
and the judge that joins the counters to the NCCL log's verdict (workloads/nccl_check/counters.py and
witnesses.py). Readings are in the layout the EFA driver's sysfs files give (counters.py cites it)."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

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


# The join of the two witnesses, as witnesses.py's docstring states it, over any number of NICs whose counters read:
# a NIC carried the job when it sent at least FLOOR of the predicted bytes per NIC.
# - efa: pass when the log says pass and every NIC carried the job; the log saying pass over a NIC that did not is
#   counters-flat; an inconclusive log over NICs that all carried it is counters-moved-log-inconclusive; otherwise
#   the log failed: not-efa when no NIC carried the job, log-failed when one did.
# - socket: pass when the log says pass and no NIC carried the job; the log saying pass over one that did is
#   witnesses-disagree; otherwise log-failed.
# Only a pass is ok.
FLOOR = 0.6  # MIN_FRACTION, the docstring's floor (its derivation is there)
JOIN = settings(max_examples=150, deadline=None, derandomize=True)


def expected_join(require: str, log: str, carried: list[bool]) -> str:
    if require == "socket":
        return ("witnesses-disagree" if any(carried) else "pass") if log == "pass" else "log-failed"
    if log == "pass":
        return "pass" if all(carried) else "counters-flat"
    if log == "inconclusive" and all(carried):
        return "counters-moved-log-inconclusive"
    return "log-failed" if any(carried) else "not-efa"


@JOIN
@given(
    require=st.sampled_from(["efa", "socket"]),
    log=st.sampled_from(["pass", "fail", "inconclusive"]),
    fractions=st.lists(st.floats(min_value=0.0, max_value=1.5), min_size=1, max_size=4),
    predicted=st.integers(min_value=10**6, max_value=10**11),
)
def test_the_two_witnesses_join_into_one_outcome(require, log, fractions, predicted):
    sent = [int(f * predicted) for f in fractions]
    assume(all(abs(s / predicted - FLOOR) > 1e-6 for s in sent))  # the floor itself is the boundary test below
    found = [NicDelta(f"node-{i // 2}", f"rdmap{i % 2}s31", "ok", {"tx_bytes": s}) for i, s in enumerate(sent)]
    want = expected_join(require, log, [s >= FLOOR * predicted for s in sent])
    got = w.judge(require, log, "cause", found, predicted)
    assert (got.outcome, got.ok) == (want, want == "pass"), f"{require}/{log} {sent} of {predicted}: {got.message}"


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
