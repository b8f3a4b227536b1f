"""The counter witness's verdicts pinned whole (workloads/nccl_check/witnesses.py): each rule's outcome, the line
the user reads, the NIC rows and what is stored with the run, so a rule that picks the wrong NICs to name, or a
reason lost, fails here. Figures are small on purpose: the rules are fractions of the prediction."""

from __future__ import annotations

import pytest

from workloads.nccl_check import witnesses as w
from workloads.nccl_check.counters import NicDelta
from workloads.nccl_check.records import Evidence
from workloads.nccl_check.verdict import ChannelClaim

P = 1000  # bytes per NIC the model predicts
FIX = "check NCCL_NET / FI_PROVIDER in the job's env and which NIC carried them"


def nic(node: str, sent: int, device: str = "e0") -> NicDelta:
    return NicDelta(node, device, "ok", {"tx_bytes": sent})


def claim(host: str, family: str = "libfabric", lines: int = 2) -> ChannelClaim:
    return ChannelClaim(host, family, lines, Evidence("f.log", 3, f"{host} line", "why"))


BUSY_AND_FLAT = [nic("a", 900), nic("b", 300)]
SPAN_A = "a/e0 sent 900 of 1,000 (90%)"


@pytest.mark.parametrize(
    ("require", "log", "found", "outcome", "message"),
    [
        ("efa", "pass", [nic("a", 900)], w.PASS, f"both witnesses say EFA: {SPAN_A}"),
        (
            "efa",
            "pass",
            BUSY_AND_FLAT,
            w.FLAT,
            "the NCCL log says EFA but the EFA counters did not move at least 60% of the predicted bytes: b/e0 sent "
            f"300 of 1,000 (30%); the collectives did not cross the EFA device ({FIX})",
        ),
        (
            "efa",
            "fail",
            BUSY_AND_FLAT,
            w.LOG_FAILED,
            f"the NCCL log says fail (cause X); the EFA counters moved: {SPAN_A}",
        ),
        (
            "efa",
            "fail",
            [nic("a", 10)],
            w.BOTH_NOT_EFA,
            "the NCCL log says fail (cause X); the EFA counters did not move either: a/e0 sent 10 of 1,000 (1%)",
        ),
        (
            "efa",
            "inconclusive",
            BUSY_AND_FLAT,
            w.LOG_FAILED,
            f"the NCCL log says inconclusive (cause X); the EFA counters moved: {SPAN_A}",
        ),
        (
            "efa",
            "inconclusive",
            [nic("a", 900)],
            w.MOVED_LOG_UNSURE,
            f"the EFA counters moved ({SPAN_A}) but the NCCL log is inconclusive (cause X): bytes on the NIC without a "
            "log naming the transport is no proof of which path NCCL took; not a pass",
        ),
        (
            "socket",
            "pass",
            [nic("a", 10), nic("b", 599)],
            w.PASS,
            "both witnesses say TCP sockets: a/e0 sent 10 of 1,000 (1%), b/e0 sent 599 of 1,000 (60%)",
        ),
        (
            "socket",
            "pass",
            BUSY_AND_FLAT,
            w.DISAGREE,
            f"the NCCL log says sockets but the EFA counters moved: {SPAN_A}: this run is no TCP baseline",
        ),
        ("socket", "fail", [nic("a", 10)], w.LOG_FAILED, "the NCCL log says fail (cause X)"),
    ],
)
def test_each_rule_gives_its_outcome_and_line_and_keeps_every_nic_and_the_log_verdict(
    require, log, found, outcome, message
):
    got = w.judge(require, log, "cause X", found, P)
    rows = tuple(w.NicRow(d.node, d.device, P, d.sent, "ok") for d in found)
    assert got == w.Witnesses(outcome, outcome == w.PASS, message, rows, log_verdict=log), got


def test_every_broken_device_of_the_first_broken_kind_is_named_and_kept_as_detail():
    found = [
        NicDelta("a", "e0", "missing", why="M"),
        NicDelta("b", "e0", "reset", why="R1"),
        NicDelta("c", "e0", "reset", why="R2"),
        NicDelta("d", "e0", "unreadable", why="U"),
    ]
    got = w.judge("efa", "pass", "c", found, P)
    rows = tuple(w.NicRow(d.node, d.device, P, None, d.outcome) for d in found)
    assert got == w.Witnesses(
        "reset", False, "counter witness reset: R1; R2", rows, log_verdict="pass", detail=("R1; R2",)
    )


@pytest.mark.parametrize("kind", ["missing", "unreadable"])
def test_a_missing_or_unreadable_device_beside_one_that_passed_is_its_own_outcome(kind):
    got = w.judge("socket", "pass", "c", [nic("a", 0), NicDelta("b", "e0", kind, why="W")], P)
    assert (got.outcome, got.ok, got.message, got.detail) == (kind, False, f"counter witness {kind}: W", ("W",)), got


def test_no_node_read_no_reading_before_and_no_prediction_are_each_no_pass_with_their_line():
    assert w.judge("efa", "pass", "c", [], P) == w.Witnesses(
        "missing", False, "counter witness missing: no GPU node was read", log_verdict="pass"
    )
    assert w.judge("efa", "pass", "c", None, P) == w.Witnesses(
        w.NO_BEFORE,
        False,
        "counter witness absent: the EFA counters were not read before the job, so what moved is unknown "
        "(`efa_witness.snapshot` runs before the job in `python -m automation run`)",
        log_verdict="pass",
    )
    got = w.judge("efa", "pass", "c", BUSY_AND_FLAT, None)
    rows = tuple(w.NicRow(d.node, d.device, None, d.sent, "ok") for d in BUSY_AND_FLAT)
    assert got == w.Witnesses(
        w.NO_PREDICTION,
        False,
        "counter witness cannot be weighed: workloads/throughput_model.py has no measured row "
        "for this job's layout "
        "(counted: a/e0 900 B, b/e0 300 B)",
        rows,
        log_verdict="pass",
    ), got
    assert w.not_applicable("why", "pass") == w.Witnesses(
        w.NOT_APPLICABLE, False, "counter witness not applicable: why", log_verdict="pass"
    )


def test_a_contradiction_is_named_first_kept_and_stored_with_the_verdict():
    got = w.judge("efa", "pass", "c", [nic("a", 100)], P, [claim("a")])
    said = (
        "a's 2 inter-node channel line(s) say NET/Libfabric but the EFA counters of a did not move "
        "(e0 sent 100 B of 1,000 predicted)"
    )
    assert got.to_dict() == {
        "outcome": w.FLAT,
        "ok": False,
        "message": "the NCCL log's channel lines and the EFA counters contradict each other: "
        f"{said}; the NCCL log says EFA but the EFA counters did not move at least 60% of the predicted bytes: "
        f"a/e0 sent 100 of 1,000 (10%); the collectives did not cross the EFA device ({FIX})",
        "min_fraction": 0.6,
        "log_verdict": "pass",
        "nics": [
            {"node": "a", "device": "e0", "predicted_bytes": P, "counted_bytes": 100, "ratio": 0.1, "outcome": "ok"}
        ],
        "detail": ["f.log:3: a line   <- why"],
        "contradictions": [
            {
                "kind": w.LIBFABRIC_IDLE,
                "message": said,
                "node": "a",
                "evidence": {"file": "f.log", "line": 3, "text": "a line", "why": "why"},
            }
        ],
    }


def test_a_passing_log_with_a_contradiction_becomes_the_contradiction():
    got = w.judge("efa", "pass", "c", [nic("a", 900), nic("b", 900)], P, [claim("a", "socket")])
    assert (got.outcome, got.ok) == (w.CONTRADICTION, False), got


def test_cross_check_names_each_idle_node_and_unplaced_hosts_when_no_node_moved():
    found = [nic("a", 100), nic("a", 100, "e1"), nic("b", 100)]
    got = w.cross_check([claim("a"), claim("pod-x")], found, P)
    assert [(c.kind, c.node, c.message, c.evidence.text) for c in got] == [
        (
            w.LIBFABRIC_IDLE,
            "a",
            "a's 2 inter-node channel line(s) say NET/Libfabric but the EFA counters of a did not move "
            "(e0 sent 100 B of 1,000 predicted, e1 sent 100 B of 1,000 predicted)",
            "a line",
        ),
        (
            w.LIBFABRIC_IDLE,
            "",
            "the inter-node channel lines of pod-x say NET/Libfabric but no node's EFA counters moved (a: e0 sent "
            "100 B of 1,000 predicted, e1 sent 100 B of 1,000 predicted; b: e0 sent 100 B of 1,000 predicted)",
            "pod-x line",
        ),
    ], got


def test_cross_check_without_a_prediction_calls_idle_only_a_node_that_sent_no_byte():
    assert w.cross_check([claim("pod-x"), claim("pod-y")], [nic("a", 0), nic("b", 5)], None) == ()
    (got,) = w.cross_check([claim("a")], [nic("a", 0), nic("b", 5)], None)
    assert got.message == (
        "a's 2 inter-node channel line(s) say NET/Libfabric but the EFA counters of a did not move (e0 sent 0 B)"
    ), got


def test_cross_check_sums_every_non_libfabric_line_and_names_only_the_busy_nics():
    found = [nic("a", 900), nic("b", 100), nic("c", 600)]
    (got,) = w.cross_check([claim("a", "socket", 3), claim("b", "ib", 1)], found, P)
    assert (got.kind, got.node, got.evidence.text, got.message) == (
        w.NO_LIBFABRIC_BUSY,
        "",
        "a line",
        "all 4 inter-node channel line(s) say NET/IB, NET/Socket, none NET/Libfabric, but the EFA counters moved: "
        "a/e0 sent 900 B, c/e0 sent 600 B",
    ), got


def test_a_nic_row_without_a_count_or_prediction_has_no_ratio():
    assert w.NicRow("a", "e0", None, 5, "ok").ratio is None
    assert w.NicRow("a", "e0", 10.0, None, "reset").ratio is None
    assert w.NicRow("a", "e0", 10.0, 0, "ok").ratio == 0.0


def test_not_applicable_without_a_log_verdict_keeps_none():
    assert w.not_applicable("why").log_verdict == ""


def test_several_contradictions_are_named_in_order_each_once():
    found = [nic("a", 0), nic("b", 0)]
    got = w.judge("efa", "fail", "c", found, None, [claim("a"), claim("b")])
    said = "{}'s 2 inter-node channel line(s) say NET/Libfabric but the EFA counters of {} did not move (e0 sent 0 B)"
    prefix = "the NCCL log's channel lines and the EFA counters contradict each other: "
    assert got.message.startswith(f"{prefix}{said.format('a', 'a')}; {said.format('b', 'b')}; "), got.message


def test_unplaced_hosts_are_all_named_and_a_host_mapped_to_a_node_not_read_counts_as_unplaced():
    found = [nic("a", 0)]
    names = {"pod-y": "gone-node"}
    (got,) = w.cross_check([claim("pod-y"), claim("pod-x"), claim("pod-x")], found, P, names)
    assert got.message == (
        "the inter-node channel lines of pod-x, pod-y say NET/Libfabric but no node's EFA counters moved "
        "(a: e0 sent 0 B of 1,000 predicted)"
    ), got


def test_a_log_host_under_another_dns_suffix_is_placed_by_its_first_label():
    got = w.node_of("ip-10-0-1-5.ec2.internal", ["ip-10-0-1-5.us-west-2.compute.internal", "ip-10-0-1-6.x"])
    assert got == "ip-10-0-1-5.us-west-2.compute.internal", got


@pytest.mark.parametrize(("require", "outcome"), [("efa", w.PASS), ("socket", w.DISAGREE)])
def test_a_nic_at_exactly_the_fraction_counts_as_having_carried_the_run(require, outcome):
    got = w.judge(require, "pass", "c", [nic("a", 900), nic("b", int(w.MIN_FRACTION * P))], P)
    assert got.outcome == outcome, got.message
