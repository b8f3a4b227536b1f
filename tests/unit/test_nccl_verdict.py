"""Verdicts on real NCCL logs: EFA pass, fallbacks, wrong fabrics, single node, mixed."""

from __future__ import annotations

import pytest
from conftest import FIXTURES as FIXTURE_ROOT

from workloads.nccl_check import check_logs

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
    # three real logs joined: two hosts that chose Socket, one whose aws-ofi-nccl selected efa
    # (its channel lines left out), one host's SHM channels; the run's networks are not only Socket
    efa = (FIXTURES / "efa_gdrdma_sagemaker_ofi1.11.log").read_bytes().splitlines(keepends=True)
    log = tmp_path / "joined.log"
    log.write_bytes(
        (FIXTURES / "socket_interface_2hosts_nccl2.5.6_nccl278.log").read_bytes()
        + b"".join(line for line in efa if b" via " not in line)
        + (FIXTURES / "single_node_shm_nccl1609.log").read_bytes()
    )
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
