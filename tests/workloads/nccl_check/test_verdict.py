"""Verdicts on real NCCL logs: EFA pass, fallbacks, wrong fabrics, single node, mixed."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from conftest import FIXTURES as FIXTURE_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.nccl_check import Connection, Evidence, ScanState, Transport, check_logs
from workloads.nccl_check.verdict import FIX_IB, FIX_OFI_FAILED, FIX_SOCKET, classify_connections, decide

FIXTURES = FIXTURE_ROOT / "nccl"


def verdict(name: str, require: str = "efa"):
    return check_logs([FIXTURES / name], require=require)


@pytest.mark.parametrize(
    "name",
    ["efa_gdrdma_sagemaker_ofi1.11.log", "efa_unprefixed_ofi1.20.log"],
)
def test_efa_run_passes(name):
    r = verdict(name)
    assert (r.verdict, r.exit_code) == ("pass", 0), f"{name}: expected pass/0, got {r.verdict}/{r.exit_code}: {r.cause}"


def test_efa_pass_says_whether_gpudirect_rdma_was_used():
    with_gdr = verdict("efa_gdrdma_sagemaker_ofi1.11.log").cause
    without = verdict("efa_unprefixed_ofi1.20.log").cause
    assert "6 with GPUDirect RDMA" in with_gdr and "without GPUDirect RDMA" in without, (
        f"got {with_gdr!r} / {without!r}"
    )


def test_libfabric_without_a_logged_provider_is_inconclusive():
    r = verdict("efa_ring_nccl2.7.8_ofi1.1.2.log")
    assert (r.verdict, r.exit_code) == ("inconclusive", 2), f"expected inconclusive/2, got {r.verdict}: {r.cause}"


def test_hosts_from_comm_lines_class_a_net_connection_inter_node():
    r = verdict("efa_ring_nccl2.7.8_ofi1.1.2.log", "any")
    reasons = {e.why for e in r.evidence}
    assert any("ranks on ip-172-31-6-104 and ip-172-31-13-103" in w for w in reasons), f"got {reasons}"


def test_plugin_missing_socket_fallback_fails_with_plugin_cause():
    r = verdict("socket_plugin_missing_2nodes.log")
    assert r.verdict == "fail" and "no net plugin" in r.cause, (
        f"expected fail naming the missing plugin, got {r.verdict}: {r.cause}"
    )


def test_socket_fallback_fails_with_evidence():
    r = verdict("socket_cluster_nccl952.log")
    lines = [(e.file.endswith("socket_cluster_nccl952.log"), e.line) for e in r.evidence]
    assert r.verdict == "fail" and (True, 3) in lines, (
        f"expected fail citing line 3 (NET/Socket/3), got {r.verdict} {lines}"
    )


def test_socket_cause_names_the_efa_request():
    r = verdict("socket_cluster_nccl952.log")
    assert "vpc.amazonaws.com/efa" in r.cause, f"expected the usual fix in the cause, got {r.cause!r}"


def test_ofi_init_failure_fails_even_without_channel_lines():
    r = verdict("ofi_init_failed_cloudwatch.log")
    assert r.verdict == "fail" and "failed to start" in r.cause, f"got {r.verdict}: {r.cause}"


def test_tcp_provider_fails_naming_the_provider():
    r = verdict("provider_tcp_nccl2.4.6.log")
    assert r.verdict == "fail" and "'tcp;ofi_rxm'" in r.cause, f"got {r.verdict}: {r.cause}"


@pytest.mark.parametrize("name", ["ib_nccl2.2x_1412.log", "roce_nccl2.5.7.log", "ibext_nccl1814.log"])
def test_ib_and_roce_fail_efa(name):
    r = verdict(name)
    assert r.verdict == "fail" and "NET/IB" in r.cause, (
        f"{name}: expected fail naming NET/IB, got {r.verdict}: {r.cause}"
    )


@pytest.mark.parametrize("name", ["ib_nccl2.2x_1412.log", "roce_nccl2.5.7.log"])
def test_ib_passes_require_any(name):
    r = verdict(name, "any")
    assert r.verdict == "pass", f"{name}: expected pass for require=any, got {r.verdict}: {r.cause}"


@pytest.mark.parametrize(
    "name",
    [
        "single_node_shm_nccl1609.log",
        "single_node_p2p_cumem_nccltests252.log",
        "h200_socket.log",
        "ray_vllm_comm_suffix_ray59778.log",
    ],
)
def test_intra_node_only_is_inconclusive_never_pass(name):
    r = verdict(name)
    assert (r.verdict, r.exit_code) == ("inconclusive", 2) and "no inter-node traffic" in r.cause, (
        f"{name}: expected inconclusive (no inter-node traffic), got {r.verdict}: {r.cause}"
    )


def test_multi_node_comm_without_channel_lines_is_inconclusive():
    r = verdict("ray_train_p5_awsome386.log")
    assert r.verdict == "inconclusive", f"expected inconclusive, got {r.verdict}: {r.cause}"


def test_mixed_efa_and_socket_fails():
    r = verdict("mixed_efa_socket.log")
    assert r.verdict == "fail" and r.cause.startswith("mixed transports"), f"got {r.verdict}: {r.cause}"


def test_socket_requirement_passes_on_socket_run():
    r = verdict("socket_plugin_missing_2nodes.log", "socket")
    assert r.verdict == "pass", f"expected pass for require=socket, got {r.verdict}: {r.cause}"


def test_socket_requirement_fails_on_efa_run():
    r = verdict("efa_gdrdma_sagemaker_ofi1.11.log", "socket")
    assert r.verdict == "fail" and "NCCL_NET=Socket" in r.cause, f"got {r.verdict}: {r.cause}"


def test_single_node_is_inconclusive_for_require_any():
    r = verdict("single_node_shm_nccl1609.log", "any")
    assert r.verdict == "inconclusive", f"got {r.verdict}: {r.cause}"


def test_forced_libfabric_without_plugin_fails_as_plugin_missing():
    r = verdict("h200_net_libfabric.log")
    assert r.verdict == "fail" and "no net plugin" in r.cause, f"got {r.verdict}: {r.cause}"


def test_report_dict_holds_verdict_summary_and_evidence():
    d = verdict("mixed_efa_socket.log").to_dict()
    got = (d["verdict"], d["exit_code"], d["summary"]["inter_node"], len(d["evidence"]) > 0)
    assert got == ("fail", 1, 4, True), f"expected fail/1/4 inter-node/evidence, got {got}"


def test_render_lists_evidence_as_file_line_text():
    text = verdict("socket_cluster_nccl952.log").render()
    assert "socket_cluster_nccl952.log:3: <cluster_name>:926:1151 [7] NCCL INFO Channel 03/0" in text, text


def test_unknown_requirement_is_rejected():
    with pytest.raises(ValueError, match="require must be one of"):
        check_logs([FIXTURES / "h200_socket.log"], require="ib")


def test_report_dict_lists_each_connection_with_its_scope():
    conns = verdict("socket_plugin_missing_2nodes.log").to_dict()["connections"]
    shm = [(c["src"], c["dst"], c["scope"]) for c in conns if c["kind"] == "SHM"]
    assert shm == [(2, 0, "intra"), (2, 0, "intra")], f"expected the two SHM channels intra-node, got {shm}"


def test_intra_node_run_that_chose_socket_stays_inconclusive_with_a_caution():
    r = verdict("h200_socket.log")
    assert r.verdict == "inconclusive" and "a multi-node run would use Socket" in r.cause, f"got {r.verdict}: {r.cause}"


def test_collnet_fails_efa_with_the_collnet_cause_and_passes_any():
    r = verdict("collnet_sharp_nccl2.23.4.log")
    assert (r.verdict, r.exit_code) == ("fail", 1) and "CollNet" in r.cause and "NCCL_COLLNET_ENABLE" in r.cause, (
        r.cause
    )
    assert [e.line for e in r.evidence[:4]] == [2, 3, 4, 5], [(e.line, e.text) for e in r.evidence]
    assert verdict("collnet_sharp_nccl2.23.4.log", "any").verdict == "pass"


def test_collnet_fallback_to_ib_fails_efa_citing_the_warning():
    r = verdict("collnet_fallback_ibext_nccltests311.log")
    texts = [e.text for e in r.evidence]
    assert r.verdict == "fail" and r.cause.startswith("NCCL used InfiniBand/RoCE verbs"), f"got {r.verdict}: {r.cause}"
    assert any("Cannot initialize CollNet" in t for t in texts), texts


def test_rdma_sharp_plugin_network_fails_efa_as_ib():
    r = verdict("rdma_plugin_nvls_nccl2.26.2.log")
    assert r.verdict == "fail" and r.cause.startswith("NCCL used InfiniBand/RoCE verbs"), f"got {r.verdict}: {r.cause}"


# -- several hosts whose only network is Socket, no channel line (issue 20, item 2) ------------


def test_nccl_2_4_socket_nic_distance_on_several_hosts_fails_efa_naming_the_lines():
    r = verdict("socket_nic_distance_multihost_nccl226.log")
    cited = [e.line for e in r.evidence if "Socket NIC distance" in e.text]
    assert (r.verdict, r.exit_code) == ("fail", 1) and cited[:1] == [1], (
        f"expected fail/1 citing line 1 (Socket NIC distance), got {r.verdict}/{r.exit_code} citing {cited}: {r.cause}"
    )


def test_socket_on_several_hosts_fails_efa_naming_the_hosts():
    r = verdict("socket_interface_2hosts_nccl2.5.6_nccl278.log")
    assert r.verdict == "fail" and "2 hosts (sh-01, sh-03) chose only Socket, so" in r.cause, (
        f"expected fail naming hosts sh-01 and sh-03 and Socket, got {r.verdict}: {r.cause}"
    )


def test_ofi_refusing_a_non_efa_provider_then_socket_fails_efa_citing_both_lines():
    r = verdict("ofi_only_efa_socket_nccl398.log")
    texts = [e.text for e in r.evidence]
    refused = any("Only EFA provider is supported" in t for t in texts)
    socket = any("NET/Socket : Using" in t for t in texts)
    assert (r.verdict, refused, socket) == ("fail", True, True), (
        f"expected fail citing the OFI refusal and the NET/Socket line, got {r.verdict}: {r.cause} {texts}"
    )


def test_socket_on_several_hosts_is_no_pass_for_require_socket_without_channel_lines():
    r = verdict("socket_nic_distance_multihost_nccl226.log", "socket")
    assert r.verdict == "inconclusive", (
        f"expected inconclusive (a pass needs channel lines), got {r.verdict}: {r.cause}"
    )


def test_socket_on_several_hosts_fails_efa_even_with_intra_node_channel_lines(tmp_path):
    # two real logs joined: two hosts that chose Socket, and one host's SHM channels
    log = tmp_path / "joined.log"
    log.write_bytes(
        (FIXTURES / "socket_interface_2hosts_nccl2.5.6_nccl278.log").read_bytes()
        + (FIXTURES / "single_node_shm_nccl1609.log").read_bytes()
    )
    r = check_logs([log], require="efa")
    assert r.verdict == "fail" and "cannot have used EFA" in r.cause, f"expected fail, got {r.verdict}: {r.cause}"


def test_socket_hosts_beside_an_efa_host_are_not_called_socket_only(tmp_path):
    # one whose aws-ofi-nccl selected efa (its channel lines left out) beside the Socket hosts: the
    # run's networks are not only Socket
    log = _beside_socket_hosts(tmp_path, _fixture("efa_gdrdma_sagemaker_ofi1.11.log", drop_channels=True))
    r = check_logs([log], require="efa")
    assert r.verdict == "inconclusive", f"expected inconclusive (not socket-only), got {r.verdict}: {r.cause}"


def test_socket_requirement_fails_when_a_later_inter_node_connection_is_not_socket(tmp_path):
    # two real logs joined: Socket channels first, then EFA channels
    log = tmp_path / "joined.log"
    log.write_bytes(
        (FIXTURES / "socket_cluster_nccl952.log").read_bytes()
        + (FIXTURES / "efa_gdrdma_sagemaker_ofi1.11.log").read_bytes()
    )
    r = check_logs([log], require="socket")
    assert r.verdict == "fail", f"expected fail (EFA channels are not Socket), got {r.verdict}: {r.cause}"


# -- what a PASS needs (issue 20, item 6) -----------------------------------------------------


def test_efa_provider_without_a_channel_line_is_no_pass(tmp_path):
    # the real EFA log without its channel lines: provider efa and "Using network AWS Libfabric" only
    lines = (FIXTURES / "efa_gdrdma_sagemaker_ofi1.11.log").read_bytes().splitlines(keepends=True)
    log = tmp_path / "efa_no_channels.log"
    log.write_bytes(b"".join(line for line in lines if b" via " not in line))
    r = check_logs([log], require="efa")
    provider = [p.provider for p in r.state.processes.values()]
    assert (r.verdict, r.exit_code) == ("inconclusive", 2) and "efa" in provider, (
        f"expected inconclusive/2 with provider efa parsed, got {r.verdict}/{r.exit_code} (providers {provider}): "
        f"{r.cause}"
    )


# -- verdict-changing mutants that survived the mutation run (TESTING.md, "NCCL verdict") -----
# Small logs below are built from lines of the fixtures (each names the file it comes from); where
# a line is placed under another line's prefix, or a count in it changed, the comment says so.

H200 = "vm:523:523 [0] NCCL INFO "  # NCCL's prefix in h200_socket.log
P5 = "(RayTrainWorker pid=950, ip=10.67.132.202) ini-worker-ray-worker-p5:950:3034 [0] NCCL INFO "


def _log(tmp_path, name: str, *parts: str | bytes) -> Path:
    """A log file of the given text (str) and fixture bytes (bytes), in order."""
    path = tmp_path / name
    path.write_bytes(b"".join(p if isinstance(p, bytes) else p.encode() for p in parts))
    return path


def _without(data: bytes, word: bytes) -> bytes:
    return b"".join(line for line in data.splitlines(keepends=True) if word not in line)


def _fixture(name: str, drop_channels: bool = False) -> bytes:
    data = (FIXTURES / name).read_bytes()
    return _without(data, b" via ") if drop_channels else data


def _beside_socket_hosts(tmp_path, efa_lines: bytes) -> Path:
    """Three real logs joined: two hosts that chose Socket, ``efa_lines`` of one EFA process, one
    host's SHM channels."""
    socket_hosts = _fixture("socket_interface_2hosts_nccl2.5.6_nccl278.log")
    return _log(tmp_path, "joined.log", socket_hosts, efa_lines, _fixture("single_node_shm_nccl1609.log"))


def _one_node_net_log(tmp_path) -> Path:
    # NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 on one node: NET between local GPUs. h200_socket.log's
    # network line and its two communicator lines (parent and split; nRanks and localRanks 1 -> 2),
    # then socket_plugin_missing_2nodes.log's channel lines under h200's prefix.
    return _log(
        tmp_path,
        "one_node_net.log",
        H200 + "Using network Socket\n",
        H200 + "comm 0x3e47dd90 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n",
        H200 + "comm 0x468b60b0 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n",
        H200 + "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n",
        H200 + "Channel 01/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n",
    )


def test_net_channel_inside_a_one_node_communicator_is_no_inter_node_pass(tmp_path):
    r = check_logs([_one_node_net_log(tmp_path)], require="any")
    assert (r.verdict, r.cause.split(":")[0]) == ("inconclusive", "no inter-node traffic, the transport not proven"), (
        f"expected inconclusive (NET inside an nNodes 1 communicator is intra-node), got {r.verdict}: {r.cause}"
    )


def test_every_net_channel_of_a_one_node_communicator_is_classed_intra_node(tmp_path):
    r = check_logs([_one_node_net_log(tmp_path)], require="any")
    got = [(c.channel, c.scope, c.scope_reason) for c in r.state.connections.values()]
    want = [(0, "intra", "communicator has nNodes 1"), (1, "intra", "communicator has nNodes 1")]
    assert got == want, f"expected {want}, got {got}"


def _cut_transport_log(tmp_path) -> Path:
    # efa_ring_nccl2.7.8_ofi1.1.2.log's line 5 cut off right after "via " (a rank killed mid-write),
    # then that whole log: its ranks 9 and 0 are on two hosts by the communicator lines
    cut = b"ip-172-31-6-104:9922:9980 [1] NCCL INFO Channel 01 : 9[101d0] -> 0[101c0] [send] via \n"
    return _log(tmp_path, "cut.log", cut, _fixture("efa_ring_nccl2.7.8_ofi1.1.2.log"))


def test_a_channel_line_cut_before_its_transport_is_not_inter_node_traffic(tmp_path):
    r = check_logs([_cut_transport_log(tmp_path)], require="any")
    got = [(c.evidence.line, c.transport.kind, c.scope) for c in r.state.connections.values()]
    want = [(1, "OTHER", "intra"), (2, "P2P", "intra"), (5, "NET", "inter"), (6, "NET", "inter")]
    assert got == want, f"expected (line, kind, scope) {want}, got {got}"


def test_a_channel_line_cut_before_its_transport_says_it_names_no_network(tmp_path):
    r = check_logs([_cut_transport_log(tmp_path)], require="any")
    reason = next(iter(r.state.connections.values())).scope_reason
    assert reason == "transport is not a network", f"expected 'transport is not a network', got {reason!r}"


@pytest.mark.parametrize("kind", ["P2P", "SHM", "NVLS"])
def test_intra_node_transports_are_intra_node_without_a_communicator(kind):
    # the rule itself, on a record: no fixture has a channel line "via NVLS..." (the NVLS lines of
    # the fixtures name no peer), so the connection is built, not parsed
    state = ScanState()
    ev = Evidence("records", 1, f"Channel 00/0 : 0[0] -> 1[1] via {kind}")
    state.connections["c"] = Connection(("h", 1), None, 0, 0, 1, None, Transport(kind, kind, None, None, False), ev)
    classify_connections(state)
    c = state.connections["c"]
    assert (c.scope, c.scope_reason) == ("intra", f"{kind} works inside one node"), (
        f"expected intra ({kind} works inside one node), got {c.scope} ({c.scope_reason})"
    )


def _same_host_net_log(tmp_path) -> Path:
    # efa_ring_nccl2.7.8_ofi1.1.2.log's lines 1-3 and 7, with line 1's "via P2P/IPC/read" -> "via
    # NET/AWS Libfabric/0" (what NCCL prints there with P2P and SHM disabled): ranks 8 and 9, both on
    # ip-172-31-6-104 by their communicator lines.
    lines = _fixture("efa_ring_nccl2.7.8_ofi1.1.2.log").splitlines(keepends=True)
    first = lines[0].replace(b"via P2P/IPC/read", b"via NET/AWS Libfabric/0")
    return _log(tmp_path, "same_host.log", first, lines[1], lines[2], lines[6])


def test_net_connection_between_two_ranks_on_one_host_is_no_inter_node_pass(tmp_path):
    r = check_logs([_same_host_net_log(tmp_path)], require="any")
    scopes = [(c.scope, c.scope_reason) for c in r.state.connections.values()]
    want = [("intra", "both ranks on ip-172-31-6-104")]
    assert (r.verdict, scopes) == ("inconclusive", want), (
        f"expected inconclusive with {want}, got {r.verdict} {scopes}: {r.cause}"
    )


def test_unprefixed_communicator_line_does_not_hide_the_hosts_of_later_ones(tmp_path):
    # efa_ring's line 3 without NCCL's prefix (as issue reports trim it), in its own file, read first
    bare = _log(tmp_path, "a_bare.log", b"comm 0x7fdc3c000dc0 rank 8 nranks 16 cudaDev 0 busId 101c0 - Init COMPLETE\n")
    r = check_logs([bare, _same_host_net_log(tmp_path)], require="any")
    assert r.verdict == "inconclusive", f"expected inconclusive (both ranks on one host), got {r.verdict}: {r.cause}"


def test_net_connection_whose_ranks_no_line_places_is_inter_node(tmp_path):
    # roce_nccl2.5.7.log (host and pid trimmed by the reporter) with a communicator line in the same
    # trimmed prefix, ray_train_p5_awsome386.log's "nRanks 16 nNodes 2 localRanks 8": no host is known
    # for any rank, so the NET/IB ring connections stay inter-node
    comm = b" [0] NCCL INFO comm 0x7f25293fcdd0 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n"
    r = check_logs([_log(tmp_path, "roce.log", comm, _fixture("roce_nccl2.5.7.log"))], require="efa")
    assert r.verdict == "fail" and r.cause.startswith("NCCL used InfiniBand/RoCE verbs"), (
        f"expected fail naming NET/IB, got {r.verdict}: {r.cause}"
    )


def test_two_unprefixed_logs_are_not_two_hosts(tmp_path):
    # two per-rank files of bare lines (as efa_unprefixed_ofi1.20.log quotes them): h200_socket.log's
    # "Using network Socket" and a channel line of single_node_shm_nccl1609.log, without prefixes
    a = _log(tmp_path, "rank0.log", "Using network Socket\n", "Channel 07 : 2[6] -> 3[7] via SHM/direct/direct\n")
    b = _log(tmp_path, "rank1.log", "Using network Socket\n", "Channel 00 : 3[7] -> 2[6] via SHM/direct/direct\n")
    r = check_logs([a, b], require="efa")
    assert r.verdict == "inconclusive", f"expected inconclusive (files are not hosts), got {r.verdict}: {r.cause}"


@pytest.mark.parametrize(
    ("network", "require", "cause"),
    [
        (
            "Socket",
            "efa",
            "a communicator with nNodes > 1 chose only Socket, so this multi-host run cannot have used EFA",
        ),
        (
            "AWS Libfabric",
            "socket",
            "a communicator with nNodes > 1 chose only AWS Libfabric, so this multi-host run cannot have used "
            "TCP sockets: expected TCP sockets for the baseline but ini-worker-ray-worker-p5 chose AWS "
            "Libfabric: set NCCL_NET=Socket for the TCP side of the benchmark",
        ),
    ],
)
def test_one_rank_of_a_two_node_communicator_fails_on_a_ruled_out_network(tmp_path, network, require, cause):
    # ray_train_p5_awsome386.log (nRanks 16 nNodes 2, one host logged), with a network line (h200_socket's
    # or efa_gdrdma_sagemaker_ofi1.11.log's) and a P2P channel to rank 7, its ring neighbour (the
    # transport of socket_cluster_nccl952.log's P2P lines), under its prefix
    log = _log(
        tmp_path,
        "p5.log",
        _fixture("ray_train_p5_awsome386.log"),
        P5 + f"Using network {network}\n",
        P5 + "Channel 00/0 : 0[0] -> 7[7] via P2P/IPC/read\n",
    )
    r = check_logs([log], require=require)
    assert (r.verdict, r.cause[: len(cause)]) == ("fail", cause), (
        f"expected fail: {cause!r}, got {r.verdict}: {r.cause}"
    )


def test_libfabric_channels_of_a_process_on_provider_tcp_fail_beside_an_efa_process(tmp_path):
    # provider_tcp_nccl2.4.6.log (provider tcp;ofi_rxm) with efa_unprefixed_ofi1.20.log's channel line
    # under its first host's prefix, then efa_unprefixed_ofi1.20.log itself (provider efa): two providers
    tcp = b"ip-192-168-16-255:25604:25604 [0] NCCL INFO Channel 00/0 : 7[3] -> 0[0] [receive] via NET/Libfabric/0\n"
    log = _log(tmp_path, "two_providers.log", _fixture("provider_tcp_nccl2.4.6.log"), tcp)
    r = check_logs([log, FIXTURES / "efa_unprefixed_ofi1.20.log"], require="efa")
    assert (r.verdict, "provider 'tcp;ofi_rxm'" in r.cause) == ("fail", True), (
        f"expected fail naming provider 'tcp;ofi_rxm', got {r.verdict}: {r.cause}"
    )


def test_libfabric_channels_of_a_rank_without_a_provider_line_fail_on_the_runs_only_provider_tcp(tmp_path):
    # two real logs joined: provider tcp;ofi_rxm on two hosts, and algo-1's libfabric channel lines
    lines = _fixture("efa_gdrdma_sagemaker_ofi1.11.log").splitlines(keepends=True)
    channels = b"".join(line for line in lines if b" via " in line)
    log = _log(tmp_path, "joined.log", _fixture("provider_tcp_nccl2.4.6.log"), channels)
    r = check_logs([log], require="efa")
    assert (r.verdict, "provider 'tcp;ofi_rxm'" in r.cause) == ("fail", True), (
        f"expected fail naming provider 'tcp;ofi_rxm', got {r.verdict}: {r.cause}"
    )


def test_provider_efa_layered_on_rxr_counts_as_efa(tmp_path):
    # "efa;ofi_rxr": libfabric's EFA RDM provider as aws-ofi-nccl 0.9.1 names it (its RELEASENOTES.md
    # lists it among the providers tested), in provider_tcp_nccl2.4.6.log's "Selected Provider is
    # tcp;ofi_rxm" line, before efa_unprefixed_ofi1.20.log's channel line (all bare)
    log = _log(
        tmp_path,
        "rxr.log",
        "NET/OFI Selected Provider is efa;ofi_rxr\n",
        "Channel 00/0 : 7[3] -> 0[0] [receive] via NET/Libfabric/0\n",
    )
    r = check_logs([log], require="efa")
    assert r.verdict == "pass", f"expected pass (efa;ofi_rxr is efa), got {r.verdict}: {r.cause}"


# -- what causes and evidence say (cheap code mutants of the same run) -------------------------

ALL_LOGS = sorted(p.name for p in FIXTURES.glob("*.log"))


def test_decide_rejects_an_unknown_requirement_naming_it():
    with pytest.raises(ValueError, match="require must be one of .* got 'ib'"):
        decide(ScanState(), "ib")


@pytest.mark.parametrize(
    ("name", "cause"),
    [
        ("ib_nccl2.2x_1412.log", "4 inter-node connection(s) seen (NET/IB x4)"),
        ("collnet_sharp_nccl2.23.4.log", "4 inter-node connection(s) seen (COLLNET x4)"),
    ],
)
def test_any_pass_counts_the_inter_node_connections_by_transport(name, cause):
    got = verdict(name, "any").cause
    assert got == cause, f"{name}: expected {cause!r}, got {got!r}"


@pytest.mark.parametrize("require", ["efa", "socket", "any"])
@pytest.mark.parametrize("name", ALL_LOGS)
def test_report_text_never_says_none(name, require):
    text = verdict(name, require).render()
    assert "None" not in text, f"{name} --require {require}: 'None' in the report:\n{text}"


@pytest.mark.parametrize("require", ["efa", "socket", "any"])
@pytest.mark.parametrize("name", ALL_LOGS)
def test_evidence_cites_each_line_once(name, require):
    cited = [(e.file, e.line) for e in verdict(name, require).evidence]
    assert len(cited) == len(set(cited)), f"{name} --require {require}: a line cited twice in {cited}"


def test_require_any_never_fails_a_run_without_inter_node_connections():
    r = verdict("socket_interface_2hosts_nccl2.5.6_nccl278.log", "any")
    want = "no inter-node traffic, the transport not proven: no channel connection was logged"
    assert (r.verdict, r.cause[: len(want)]) == ("inconclusive", want), (
        f"expected inconclusive: {want!r}, got {r.cause}"
    )


@pytest.mark.parametrize("name", ["socket_interface_2hosts_nccl2.5.6_nccl278.log", "socket_cluster_nccl952.log"])
def test_socket_without_a_plugin_line_names_the_socket_fix(name):
    cause = verdict(name).cause
    assert cause.endswith(FIX_SOCKET), f"{name}: expected the cause to end with {FIX_SOCKET!r}, got {cause!r}"


def test_efa_pass_cause_names_the_provider():
    cause = verdict("efa_unprefixed_ofi1.20.log").cause
    want = "1 inter-node connection(s), all over aws-ofi-nccl (NET/Libfabric) with provider efa, without GPUDirect RDMA"
    assert cause == want, f"expected {want!r}, got {cause!r}"


def test_efa_pass_cites_the_channel_line_and_the_provider_line():
    lines = [e.line for e in verdict("efa_unprefixed_ofi1.20.log").evidence]
    assert lines == [3, 2], f"expected lines 3 (channel) then 2 (provider), got {lines}"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("single_node_shm_nccl1609.log", "intra-node connection (SHM works inside one node)"),
        ("h200_socket.log", "nNodes 1"),
    ],
)
def test_inconclusive_cites_the_lines_that_show_one_node(name, why):
    whys = [e.why for e in verdict(name).evidence]
    assert why in whys, f"{name}: expected a line cited as {why!r}, got {whys}"


def test_libfabric_network_without_channel_lines_fails_require_socket_naming_the_baseline(tmp_path):
    # the real EFA log without its channel lines: one host that chose AWS Libfabric
    log = _log(tmp_path, "efa_no_channels.log", _fixture("efa_gdrdma_sagemaker_ofi1.11.log", drop_channels=True))
    r = check_logs([log], require="socket")
    want = "expected TCP sockets for the baseline but algo-1 chose AWS Libfabric"
    assert (r.verdict, r.cause[: len(want)]) == ("fail", want), f"expected fail: {want!r}, got {r.verdict}: {r.cause}"


@pytest.mark.parametrize(
    "efa_lines",
    [
        # efa_unprefixed_ofi1.20.log's plugin and provider lines: no "Using network" line
        pytest.param(_fixture("efa_unprefixed_ofi1.20.log", drop_channels=True), id="provider-line-alone"),
        # efa_gdrdma_sagemaker_ofi1.11.log without its provider lines: "Using network AWS Libfabric" alone
        pytest.param(
            _without(_fixture("efa_gdrdma_sagemaker_ofi1.11.log", drop_channels=True), b"Selected Provider"),
            id="network-line-alone",
        ),
    ],
)
def test_an_efa_provider_or_libfabric_network_line_alone_counts_as_choosing_efa_beside_socket_hosts(
    tmp_path, efa_lines
):
    # one process's EFA lines (its channel lines left out) beside the Socket hosts
    log = _beside_socket_hosts(tmp_path, efa_lines)
    r = check_logs([log], require="efa")
    assert r.verdict == "inconclusive", f"expected inconclusive (not socket-only), got {r.verdict}: {r.cause}"


def test_socket_hosts_beside_an_efa_host_are_no_fail_for_require_socket(tmp_path):
    # the same three real logs as test_socket_hosts_beside_an_efa_host_are_not_called_socket_only
    log = _beside_socket_hosts(tmp_path, _fixture("efa_gdrdma_sagemaker_ofi1.11.log", drop_channels=True))
    r = check_logs([log], require="socket")
    assert r.verdict == "inconclusive", f"expected inconclusive (Socket hosts exist), got {r.verdict}: {r.cause}"


def test_ray_worker_known_only_by_its_pid_is_not_a_second_host(tmp_path):
    # h200_socket.log's network line and single_node_shm_nccl1609.log's SHM channel lines on one
    # host (vm), and a Ray worker line with neither NCCL's prefix nor an ip (ray_train_p5's Ray
    # prefix, its ip and NCCL prefix trimmed) that chose Socket too
    log = _log(
        tmp_path,
        "ray.log",
        H200 + "Using network Socket\n",
        H200 + "Channel 07 : 2[6] -> 3[7] via SHM/direct/direct\n",
        "(RayTrainWorker pid=950) NCCL INFO Using network Socket\n",
    )
    r = check_logs([log], require="efa")
    assert r.verdict == "inconclusive", f"expected inconclusive (one host), got {r.verdict}: {r.cause}"


def test_non_efa_provider_cause_names_the_fi_provider_value():
    cause = verdict("provider_tcp_nccl2.4.6.log").cause
    assert cause.endswith("or FI_PROVIDER is set to 'tcp'"), f"expected FI_PROVIDER 'tcp' at the end, got {cause!r}"


@pytest.mark.parametrize(
    ("names", "require", "cause"),
    [
        (
            ["mixed_efa_socket.log"],
            "efa",
            "mixed transports: 2 inter-node connection(s) over EFA but 2 over NET/Socket x2; ",
        ),
        (
            ["socket_cluster_nccl952.log", "efa_gdrdma_sagemaker_ofi1.11.log"],
            "socket",
            "mixed transports: 6 inter-node connection(s) over Socket but 6 over NET/AWS Libfabric x6; ",
        ),
        (
            ["collnet_fallback_ibext_nccltests311.log"],
            "socket",
            "expected TCP sockets for the baseline but inter-node traffic went over COLLNET x1, NET/IBext_v8 x3: ",
        ),
    ],
)
def test_fail_cause_counts_what_went_over_each_transport(tmp_path, names, require, cause):
    log = _log(tmp_path, "joined.log", *(_fixture(n) for n in names))
    got = check_logs([log], require=require).cause
    assert got.startswith(cause), f"{names} --require {require}: expected {cause!r} first, got {got!r}"


def test_socket_pass_cause_says_all_went_over_tcp_sockets():
    cause = verdict("socket_plugin_missing_2nodes.log", "socket").cause
    want = "9 inter-node connection(s), all over TCP sockets (NET/Socket)"
    assert cause == want, f"expected {want!r}, got {cause!r}"


@pytest.mark.parametrize(
    ("name", "want"),
    [
        (
            "h200_socket.log",
            "no inter-node traffic, EFA not proven: every communicator reports nNodes 1; "
            "and a multi-node run would use Socket, not EFA",
        ),
        ("single_node_shm_nccl1609.log", "no inter-node traffic, EFA not proven: all connections are intra-node"),
        (
            "ray_train_p5_awsome386.log",
            "no inter-node traffic, EFA not proven: no channel connection was logged (was NCCL_DEBUG=INFO set, "
            "and did a collective run?)",
        ),
        (
            "ofi_init_failed_cloudwatch.log",
            FIX_OFI_FAILED + " (no channel lines were logged; this is what the processes chose)",
        ),
        (
            "efa_ring_nccl2.7.8_ofi1.1.2.log",
            "inter-node connections went over NET/Libfabric but no process logged which libfabric provider it "
            "selected ('NET/OFI Selected provider is ...'), so EFA is not proven: keep NCCL_DEBUG=INFO with the "
            "INIT and NET subsystems and read every rank's log",
        ),
    ],
)
def test_efa_cause_without_a_pass_says_what_the_logs_lack(name, want):
    cause = verdict(name).cause
    assert cause == want, f"{name}: expected {want!r}, got {cause!r}"


@pytest.mark.parametrize(
    ("name", "require", "why"),
    [
        ("collnet_sharp_nccl2.23.4.log", "any", "inter-node connection (CollNet reduces in the network, across nodes)"),
        ("ib_nccl2.2x_1412.log", "any", "inter-node connection (network transport between ranks)"),
        (
            "socket_plugin_missing_2nodes.log",
            "socket",
            "inter-node connection over Socket (network transport between ranks)",
        ),
        ("efa_unprefixed_ofi1.20.log", "efa", "inter-node connection over EFA (network transport between ranks)"),
        ("mixed_efa_socket.log", "efa", "inter-node connection not over efa (network transport between ranks)"),
        (
            "efa_ring_nccl2.7.8_ofi1.1.2.log",
            "efa",
            "provider not logged (ranks on ip-172-31-6-104 and ip-172-31-13-103)",
        ),
    ],
)
def test_a_cited_connection_says_why_it_is_cited(name, require, why):
    whys = [e.why for e in verdict(name, require).evidence]
    assert why in whys, f"{name} --require {require}: expected a line cited as {why!r}, got {whys}"


def test_socket_channels_after_aws_ofi_nccl_failed_name_the_failed_plugin(tmp_path):
    # ofi_init_failed_cloudwatch.log (aws-ofi-nccl failed, "Using network Socket"), then
    # socket_plugin_missing_2nodes.log's channel line under its prefix
    channel = b"ip-10-36-29-253:86:2554 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    log = _log(tmp_path, "ofi_failed.log", _fixture("ofi_init_failed_cloudwatch.log"), channel)
    cause = check_logs([log], require="efa").cause
    assert cause == FIX_OFI_FAILED, f"expected {FIX_OFI_FAILED!r}, got {cause!r}"


def test_ib_network_without_channel_lines_names_the_ib_fix(tmp_path):
    # ib_nccl2.2x_1412.log without its channel lines, and NCCL's "Using network IB" under its prefix
    # (the line h200_socket.log prints as "Using network Socket", with the network of that log)
    log = _log(
        tmp_path,
        "ib_no_channels.log",
        _fixture("ib_nccl2.2x_1412.log", drop_channels=True),
        b"swat1-04:2017630:2017669 [0] NCCL INFO Using network IB\n",
    )
    cause = check_logs([log], require="efa").cause
    want = FIX_IB + " (no channel lines were logged; this is what the processes chose)"
    assert cause == want, f"expected {want!r}, got {cause!r}"


def test_efa_provider_with_socket_chosen_names_the_socket_fix(tmp_path):
    # efa_unprefixed_ofi1.20.log's first two lines (aws-ofi-nccl selected efa) and h200_socket.log's
    # "Using network Socket", bare: NCCL_NET=Socket chooses Socket over a working plugin
    log = _log(
        tmp_path,
        "efa_then_socket.log",
        _fixture("efa_unprefixed_ofi1.20.log", drop_channels=True),
        "Using network Socket\n",
    )
    cause = check_logs([log], require="efa").cause
    want = FIX_SOCKET + " (no channel lines were logged; this is what the processes chose)"
    assert cause == want, f"expected {want!r}, got {cause!r}"


# ---- Properties of the NCCL verdict's aggregation over processes and nodes (workloads/nccl_check, ``check_logs``
# with require=efa): whatever the number, order and layout of the processes' logs, a run passes only when some
# process sent inter-node traffic over EFA and none over anything else; no process that proves nothing ever
# turns a run into a pass.
#
# Each process is one NCCL process on its own host, logging with NCCL's ``host:pid:tid [dev] NCCL INFO`` prefix.
# Its lines are copied from the fixtures in tests/fixtures/nccl (README.md there names each one's source), with
# only the ranks changed:
# - efa: ``NET/OFI Selected provider is efa, fabric is efa (found 1 nics)`` (efa_unprefixed_ofi1.20.log, line 2)
#   and a ``via NET/Libfabric/0`` send channel (the same file, line 3);
# - socket: ``Using network Socket`` (h200_socket.log, line 15) and a ``via NET/Socket/0`` channel
#   (mixed_efa_socket.log, line 4);
# - tcp: ``NET/OFI Selected Provider is tcp;ofi_rxm`` (provider_tcp_nccl2.4.6.log, line 2) and a Libfabric channel;
# - unnamed: a Libfabric channel from a process that logged no provider (efa_ring_nccl2.7.8_ofi1.1.2.log has
#   such processes);
# - local: a ``via P2P/IPC/read`` channel between two GPUs of the host (efa_ring_nccl2.7.8_ofi1.1.2.log, line 1);
# - tcp-local: the tcp provider line, and only a local channel (its traffic stayed on its host).
# The rule under test is verdict.py's docstring: a process that logged no provider borrows the run's only one, so
# beside a process that selected tcp, an unnamed one's Libfabric traffic is not proven EFA.

PROPERTY = settings(max_examples=120, deadline=None, derandomize=True)
NET = "Channel 00/0 : {r}[0] -> {peer}[0] [send] via NET/{net}/0"
LINES = {
    "efa": ["NET/OFI Selected provider is efa, fabric is efa (found 1 nics)", NET.replace("{net}", "Libfabric")],
    "socket": ["Using network Socket", NET.replace("{net}", "Socket")],
    "tcp": ["NET/OFI Selected Provider is tcp;ofi_rxm", NET.replace("{net}", "Libfabric")],
    "unnamed": [NET.replace("{net}", "Libfabric")],
    "local": ["Channel 00/0 : {r}[0] -> {r}[1] via P2P/IPC/read"],
    "tcp-local": ["NET/OFI Selected Provider is tcp;ofi_rxm", "Channel 00/0 : {r}[0] -> {r}[1] via P2P/IPC/read"],
}
NOT_EFA = {"socket", "tcp"}  # a process whose inter-node traffic provably did not go over EFA
PROVES_NOTHING = {"unnamed", "local"}  # alone, neither proves nor refutes EFA


def _process_lines(kind: str, rank: int, world: int) -> list[str]:
    prefix = f"ip-10-0-0-{rank}:{4000 + rank}:{4100 + rank} [0] NCCL INFO "
    peer = (rank + 1) % world if world > 1 else 1
    return [prefix + line.format(r=rank, peer=peer) + "\n" for line in LINES[kind]]


def joined_verdict(kinds: list[str], joined: bool, order: list[int]) -> str:
    """The run's verdict from one log file per process, or from one file where the processes' lines interleave
    (each process's own lines stay in order) as `kubectl logs` of several processes would show them."""
    per = [_process_lines(k, r, len(kinds)) for r, k in enumerate(kinds)]
    with tempfile.TemporaryDirectory() as d:
        if joined:
            queues, lines = [list(p) for p in per], []
            for who in order:
                if queues[who % len(queues)]:
                    lines.append(queues[who % len(queues)].pop(0))
            lines += [line for q in queues for line in q]
            paths = [Path(d) / "all.log"]
            paths[0].write_text("".join(lines))
        else:
            paths = [Path(d) / f"worker-{r}.log" for r in range(len(per))]
            for path, lines in zip(paths, per, strict=True):
                path.write_text("".join(lines))
        return check_logs(paths, require="efa").verdict


run = st.lists(st.sampled_from(sorted(LINES)), min_size=1, max_size=6)
layout = st.tuples(st.booleans(), st.lists(st.integers(min_value=0, max_value=5), max_size=24))


@PROPERTY
@given(kinds=run, how=layout)
def test_a_run_passes_exactly_when_some_process_used_efa_and_none_used_anything_else(kinds, how):
    borrowed_from_several = {"unnamed", "tcp-local"} <= set(kinds)  # the unnamed process's provider is unknown
    expected = "pass" if "efa" in kinds and not NOT_EFA & set(kinds) and not borrowed_from_several else None
    got = joined_verdict(kinds, *how)
    assert (got == "pass") == (expected == "pass"), f"processes {kinds} (joined={how[0]}): got {got}"


@PROPERTY
@given(kinds=run, how=layout)
def test_one_process_off_efa_fails_the_run_wherever_it_is(kinds, how):
    if not NOT_EFA & set(kinds):
        kinds = [*kinds, "socket"]
    got = joined_verdict(kinds, *how)
    assert got == "fail", f"processes {kinds} (joined={how[0]}): expected fail, got {got}"


@PROPERTY
@given(kinds=run, how=layout)
def test_an_unnamed_process_beside_two_providers_never_passes_on_the_efa_one(kinds, how):
    kinds = [k for k in kinds if k not in NOT_EFA] + ["efa", "tcp-local", "unnamed"]
    got = joined_verdict(kinds, *how)
    assert got == "inconclusive", f"processes {kinds} (joined={how[0]}): expected inconclusive, got {got}"


@PROPERTY
@given(kinds=st.lists(st.sampled_from(sorted(PROVES_NOTHING)), min_size=1, max_size=6), how=layout)
def test_processes_that_prove_nothing_never_make_a_pass_however_many(kinds, how):
    got = joined_verdict(kinds, *how)
    assert got == "inconclusive", f"processes {kinds} (joined={how[0]}): expected inconclusive, got {got}"
