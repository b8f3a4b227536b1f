"""The NCCL log's inter-node channel claims cross-checked with the EFA counters (workloads/nccl_check/verdict.py
`channel_claims`, witnesses.py `cross_check` and `judge`). The logs are the real ones of tests/fixtures/nccl (its
README says where each comes from); no public source records their counters, so each test gives the counters it
needs as NicDelta values, named for the hosts of the log, in the layout counters.py reads."""

from __future__ import annotations

import pytest
from conftest import FIXTURES

from workloads.nccl_check import check_logs
from workloads.nccl_check import witnesses as w
from workloads.nccl_check.counters import NicDelta
from workloads.nccl_check.verdict import ChannelClaim, channel_claims

NCCL = FIXTURES / "nccl"
PREDICTED = 10 * 10**9  # bytes per NIC the model predicts for the run (any figure: the rules are fractions of it)
MOVED, FLAT = 9 * 10**9, 4_096  # 90% of it; a few kB, what an idle EFA device shows (witnesses.py's docstring)


def claims(name: str) -> tuple[ChannelClaim, ...]:
    report = check_logs([NCCL / name])
    assert report.state is not None
    return channel_claims(report.state)


def nic(node: str, sent: int, device: str = "rdmap0s31") -> NicDelta:
    return NicDelta(node, device, "ok", {"tx_bytes": sent})


def kinds(found) -> list[tuple[str, str]]:
    return [(c.kind, c.node) for c in found]


# efa_ring_nccl2.7.8_ofi1.1.2.log: two EC2 hosts whose channels go via NET/AWS Libfabric (no provider line).
RING = "efa_ring_nccl2.7.8_ofi1.1.2.log"
A, B = "ip-172-31-6-104.ec2.internal", "ip-172-31-13-103.ec2.internal"


def test_libfabric_channels_on_a_node_whose_counters_did_not_move_are_a_contradiction_naming_the_node():
    found = w.cross_check(claims(RING), [nic(A, FLAT), nic(B, MOVED)], PREDICTED)
    assert kinds(found) == [(w.LIBFABRIC_IDLE, A)], f"expected one contradiction on {A}, got {found}"


def test_libfabric_channels_on_nodes_whose_counters_moved_contradict_nothing():
    found = w.cross_check(claims(RING), [nic(A, MOVED), nic(B, MOVED)], PREDICTED)
    assert found == (), f"expected no contradiction, got {found}"


def test_a_contradiction_quotes_the_channel_line_it_denies():
    (found,) = w.cross_check(claims(RING), [nic(A, FLAT), nic(B, MOVED)], PREDICTED)
    assert "via NET/AWS Libfabric" in found.evidence.text, f"got {found.evidence}"


def test_without_a_prediction_only_a_nic_that_sent_nothing_denies_libfabric_channels():
    found = w.cross_check(claims(RING), [nic(A, 0), nic(B, FLAT)], None)
    assert kinds(found) == [(w.LIBFABRIC_IDLE, A)], f"expected only {A} (0 bytes), got {found}"


# socket_plugin_missing_2nodes.log: hosts node0 and node2, every inter-node channel via NET/Socket.
SOCKETS = "socket_plugin_missing_2nodes.log"


def test_socket_only_channels_while_the_counters_moved_are_a_contradiction():
    found = w.cross_check(claims(SOCKETS), [nic("node0", MOVED), nic("node2", FLAT)], PREDICTED)
    assert kinds(found) == [(w.NO_LIBFABRIC_BUSY, "")], f"expected the busy-NIC contradiction, got {found}"


def test_socket_only_channels_with_flat_counters_agree():
    found = w.cross_check(claims(SOCKETS), [nic("node0", FLAT), nic("node2", FLAT)], PREDICTED)
    assert found == (), f"a TCP run with idle EFA devices is consistent, got {found}"


def test_mixed_channels_with_moving_counters_are_not_called_socket_only():
    # mixed_efa_socket.log: algo-1 via NET/AWS Libfabric, dgxa100 via NET/Socket.
    found = w.cross_check(claims("mixed_efa_socket.log"), [nic("algo-1", MOVED), nic("dgxa100", MOVED)], PREDICTED)
    assert found == (), f"some channels went via Libfabric, got {found}"


def test_hosts_that_match_no_node_are_judged_against_every_node_when_none_moved():
    # efa_unprefixed_ofi1.20.log has no NCCL prefix: its host is the file, which names no node.
    found = w.cross_check(claims("efa_unprefixed_ofi1.20.log"), [nic(A, FLAT), nic(B, FLAT)], PREDICTED)
    assert kinds(found) == [(w.LIBFABRIC_IDLE, "")], f"expected the run-wide contradiction, got {found}"


def test_hosts_that_match_no_node_are_not_blamed_while_some_node_moved():
    found = w.cross_check(claims("efa_unprefixed_ofi1.20.log"), [nic(A, FLAT), nic(B, MOVED)], PREDICTED)
    assert found == (), f"the channels may have run on {B}, got {found}"


def test_an_explicit_host_to_node_map_places_a_pod_named_host():
    names = {"algo-1": "ip-10-30-1-17.us-west-2.compute.internal"}
    deltas = [nic(names["algo-1"], FLAT), nic(B, MOVED)]
    found = w.cross_check(claims("efa_gdrdma_sagemaker_ofi1.11.log"), deltas, PREDICTED, names)
    assert kinds(found) == [(w.LIBFABRIC_IDLE, names["algo-1"])], f"got {found}"


def test_unreadable_or_reset_counters_are_no_witness_of_idleness():
    deltas = [NicDelta(A, "rdmap0s31", "reset", {"tx_bytes": -5}), nic(B, MOVED)]
    assert w.cross_check(claims(RING), deltas, PREDICTED) == (), "a reset device says nothing about its traffic"


@pytest.mark.parametrize(
    ("host", "node"),
    [
        ("ip-172-31-6-104", "ip-172-31-6-104.ec2.internal"),
        ("ray:10.0.1.5", "ip-10-0-1-5.us-west-2.compute.internal"),
        ("raycluster-gpu-worker-x7k2p", None),
    ],
)
def test_a_log_host_is_placed_on_the_node_its_name_or_ip_names(host, node):
    nodes = ["ip-172-31-6-104.ec2.internal", "ip-10-0-1-5.us-west-2.compute.internal", "ip-10-0-1-50.x"]
    assert w.node_of(host, nodes) == node


# ---- in the verdict --------------------------------------------------------------------------------
def judged(name: str, deltas, require: str = "efa", names=None):
    report = check_logs([NCCL / name], require=require)
    return w.judge(require, report.verdict, report.cause, deltas, PREDICTED, claims(name), names)


def test_an_inconclusive_log_over_a_flat_node_is_judged_a_contradiction_not_a_non_efa_run():
    v = judged(RING, [nic(A, FLAT), nic(B, FLAT)])
    assert (v.outcome, v.ok) == (w.CONTRADICTION, False), f"got {v.outcome}: {v.message}"


def test_a_socket_log_over_a_busy_nic_is_judged_a_contradiction():
    v = judged(SOCKETS, [nic("node0", MOVED), nic("node2", MOVED)])
    assert (v.outcome, v.ok) == (w.CONTRADICTION, False), f"got {v.outcome}: {v.message}"


def test_the_verdict_message_names_the_contradiction():
    v = judged(RING, [nic(A, FLAT), nic(B, MOVED)])
    assert "ip-172-31-6-104's 1 inter-node channel line(s) say NET/Libfabric" in v.message, v.message


def test_a_passing_log_over_a_flat_node_keeps_its_own_outcome_and_gains_the_node():
    names = {"algo-1": A}
    v = judged("efa_gdrdma_sagemaker_ofi1.11.log", [nic(A, FLAT)], names=names)
    assert (v.outcome, kinds(v.contradictions)) == (w.FLAT, [(w.LIBFABRIC_IDLE, A)]), f"got {v.outcome}: {v.message}"


def test_the_tcp_baselines_busy_nic_keeps_its_own_outcome():
    v = judged(SOCKETS, [nic("node0", MOVED), nic("node2", FLAT)], require="socket")
    assert (v.outcome, kinds(v.contradictions)) == (w.DISAGREE, [(w.NO_LIBFABRIC_BUSY, "")]), v.message


def test_agreeing_witnesses_still_pass():
    v = judged("efa_gdrdma_sagemaker_ofi1.11.log", [nic("algo-1.ec2.internal", MOVED)])
    assert (v.outcome, v.ok, v.contradictions) == (w.PASS, True, ()), f"got {v.outcome}: {v.message}"


def test_the_reports_channel_claims_read_back_as_the_same_claims():
    report = check_logs([NCCL / "mixed_efa_socket.log"])
    read = tuple(ChannelClaim.from_dict(d) for d in report.to_dict()["channel_claims"])
    assert read == claims("mixed_efa_socket.log"), f"got {read}"
