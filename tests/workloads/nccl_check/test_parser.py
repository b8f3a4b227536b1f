"""The NCCL log parser: prefixes, message kinds and transports, on real NCCL lines."""

from __future__ import annotations

import pytest
from conftest import FIXTURES as FIXTURE_ROOT

from workloads.nccl_check import ScanState, classify_transport
from workloads.nccl_check.parser import LineReader

FIXTURES = FIXTURE_ROOT / "nccl"


def scan_text(text: str, label: str = "log") -> ScanState:
    state = ScanState()
    reader = LineReader(label, state, None, True)
    for line in text.encode().splitlines(keepends=True):
        reader.line(line)
    return state


def scan_file(name: str) -> ScanState:
    return scan_text((FIXTURES / name).read_text(), name)


@pytest.mark.parametrize(
    "via, kind, net, gdr",
    [
        ("NET/AWS Libfabric/1(2)/GDRDMA/Shared", "NET", "libfabric", True),  # aws-ofi-nccl#715
        ("NET/Libfabric/0", "NET", "libfabric", False),  # aws-ofi-nccl 1.20 (ENVIRONMENT.md)
        ("NET/Socket/3", "NET", "socket", False),  # NVIDIA/nccl#952
        ("NET/IB/0", "NET", "ib", False),  # NVIDIA/nccl#392 (RoCE)
        ("NET/IBext_v8/4", "NET", "ib", False),  # NVIDIA/nccl#1814
        ("NET/NCCL RDMA Plugin v8/1/GDRDMA", "NET", "ib", True),  # NVIDIA/nccl-tests#319
        ("COLLNET/SHARP/1/GDRDMA", "COLLNET", "other", True),  # NVIDIA/nccl-tests#311
        ("P2P/CUMEM", "P2P", None, False),
        ("P2P/direct pointer/read", "P2P", None, False),  # NVIDIA/nccl#1412
        ("SHM/direct/direct", "SHM", None, False),
        ("direct shared memory", "SHM", None, False),  # NCCL 2.5, NVIDIA/nccl#392
    ],
)
def test_transport_is_classed_by_its_via_text(via, kind, net, gdr):
    t = classify_transport(via)
    assert (t.kind, t.net, t.gdrdma) == (kind, net, gdr), (
        f"{via!r}: expected {(kind, net, gdr)}, got {(t.kind, t.net, t.gdrdma)}"
    )


def test_cloudwatch_timestamps_and_warn_file_prefix_still_name_the_process():
    state = scan_file("ofi_init_failed_cloudwatch.log")
    procs = {p.key for p in state.processes.values() if not p.key[0].startswith("file:")}
    assert procs == {("ip-10-36-29-253", 86)}, f"expected one process ip-10-36-29-253:86, got {procs}"


def test_ofi_initialization_failure_is_recorded_with_its_line():
    proc = scan_file("ofi_init_failed_cloudwatch.log").processes[("ip-10-36-29-253", 86)]
    assert proc.ofi_failure is not None and proc.ofi_failure.line == 3, (
        f"expected the WARN on line 3, got {proc.ofi_failure}"
    )


def test_network_choice_is_recorded_per_process():
    proc = scan_file("ofi_init_failed_cloudwatch.log").processes[("ip-10-36-29-253", 86)]
    assert set(proc.networks) == {"Socket"}, f"expected networks {{'Socket'}}, got {set(proc.networks)}"


def test_nccl_228_plugin_search_and_version_are_recorded():
    proc = scan_file("h200_socket.log").processes[("vm", 523)]
    got = (proc.nccl_version, proc.plugin_missing.line if proc.plugin_missing else None, sorted(proc.networks))
    assert got == ("2.28.9+cuda13.0", 5, ["Socket"]), f"expected version, plugin-missing line 5, Socket; got {got}"


def test_nccl_net_plugin_env_wording_counts_as_plugin_missing():
    proc = scan_file("h200_plugin_ofi.log").processes[("vm", 580)]
    assert proc.plugin_missing is not None and "libnccl-net-ofi.so" in proc.plugin_missing.text, (
        f"expected the 'Could not find: ofi libnccl-net-ofi.so' line, got {proc.plugin_missing}"
    )


def test_comm_split_gives_two_communicators_in_one_process():
    comms = scan_file("h200_socket.log").comms
    got = sorted((ptr, c.nnodes) for (_, ptr), c in comms.items())
    assert got == [("0x3e47dd90", 1), ("0x468b60b0", 1)], f"expected parent and split comm with nNodes 1, got {got}"


def test_provider_fabric_and_nic_count_are_read_from_the_new_wording():
    proc = next(iter(scan_file("efa_unprefixed_ofi1.20.log").processes.values()))
    got = (proc.provider, proc.fabric, proc.nics, proc.plugin)
    assert got == ("efa", "efa", 1, "aws-ofi-nccl 1.20.0"), f"expected efa/efa/1 nics/1.20.0, got {got}"


def test_provider_is_read_from_the_old_wording():
    proc = scan_file("efa_gdrdma_sagemaker_ofi1.11.log").processes[("algo-1", 18568)]
    assert (proc.provider, proc.nics) == ("efa", 4), f"expected ('efa', 4), got {(proc.provider, proc.nics)}"


def test_nested_ray_prefix_does_not_hide_nccl_prefix():
    comms = scan_file("ray_nested_prefix_fastsafetensors36.log").comms
    got = [(c.proc, c.nnodes, c.local_ranks) for c in comms.values()]
    assert got == [(("spark2", 285), 2, 1)], f"expected spark2:285 with nNodes 2 localRanks 1, got {got}"


def test_trailing_comm_pointer_is_not_part_of_the_transport():
    conns = list(scan_file("ray_vllm_comm_suffix_ray59778.log").connections.values())
    got = [(c.src, c.dst, c.transport.raw) for c in conns]
    assert got == [(16, 18, "P2P/IPC")], f"expected 16->18 via P2P/IPC, got {got}"


def test_ring_listings_are_not_connections():
    state = scan_file("h200_socket.log")
    assert state.connections == {}, (
        f"'Channel 00/64 : 0' lists a ring, expected no connection, got {len(state.connections)}"
    )


def test_old_ring_format_and_leading_space_prefix_are_connections():
    conns = scan_file("roce_nccl2.5.7.log").connections.values()
    got = sorted((c.channel, c.src, c.dst, c.transport.kind) for c in conns)
    want = [(0, 0, 1, "P2P"), (0, 0, 7, "SHM"), (0, 15, 0, "NET"), (1, 0, 1, "P2P"), (1, 15, 0, "NET")]
    assert got == want, f"expected {want}, got {got}"


def test_ansi_colour_and_ray_dedup_suffix_are_stripped():
    # A real line of aws/aws-ofi-nccl#64 wrapped the way Ray's log monitor prints it.
    line = (
        "\x1b[36m(RayTrainWorker pid=9738, ip=172.31.13.103)\x1b[0m ip-172-31-13-103:9738:9797 [0] NCCL INFO "
        "Channel 01 : 9[101d0] -> 0[101c0] [receive] via NET/AWS Libfabric/0 [repeated 3x across cluster]\n"
    )
    conns = list(scan_text(line).connections.values())
    got = [(c.proc, c.transport.raw) for c in conns]
    assert got == [(("ip-172-31-13-103", 9738), "NET/AWS Libfabric/0")], f"got {got}"


def test_repeated_connection_lines_are_kept_once():
    line = (FIXTURES / "socket_plugin_missing_2nodes.log").read_text().splitlines()[13] + "\n"
    state = scan_text(line * 1000)
    assert len(state.connections) == 1, f"expected 1 distinct connection, got {len(state.connections)}"


def test_warn_lines_are_kept_with_their_line_numbers():
    state = scan_file("socket_cluster_nccl952.log")
    got = [w.line for w in state.warnings]
    assert got == [15, 17], f"expected WARN lines 15 and 17, got {got}"


def test_warn_lines_kept_are_bounded_but_all_counted():
    line = (FIXTURES / "socket_cluster_nccl952.log").read_text().splitlines()[14] + "\n"
    state = scan_text(line * 500)
    got = (len(state.warnings), state.warning_count)
    assert got == (50, 500), f"expected 50 kept of 500 counted, got {got}"


def test_mpirun_rank_prefix_and_old_ring_format_are_read():
    # A real line of aws/aws-ofi-nccl#24 (horovod + mpirun --tag-output, NCCL 2.4).
    line = "[1,7]<stdout>:ip-172-32-38-1:21471:22316 [7] NCCL INFO Ring 00 : 7 -> 8 [send] via NET/AWS Libfabric/0\n"
    conns = list(scan_text(line).connections.values())
    got = [(c.proc, c.src, c.dst, c.direction, c.transport.net) for c in conns]
    assert got == [(("ip-172-32-38-1", 21471), 7, 8, "send", "libfabric")], f"got {got}"


def test_collnet_one_rank_lines_are_connections_to_the_network():
    conns = scan_file("collnet_sharp_nccl2.23.4.log").connections.values()
    got = sorted((c.proc[0], c.src, c.dst, c.direction, c.transport.kind, c.transport.net_name) for c in conns)
    want = [
        ("gpu34", 0, None, "receive", "COLLNET", "SHARP"),
        ("gpu36", 2, None, "receive", "COLLNET", "SHARP"),
        ("gpu40", 4, None, "receive", "COLLNET", "SHARP"),
        ("gpu41", 6, None, "receive", "COLLNET", "SHARP"),
    ]
    assert got == want, f"expected the 4 CollNet receive connections, got {got}"


def test_network_name_with_spaces_is_read_whole():
    conns = scan_file("rdma_plugin_nvls_nccl2.26.2.log").connections.values()
    got = sorted((c.proc[0], c.src, c.dst, c.transport.net_name) for c in conns)
    assert got == [("lccn09", 1, 9, "NCCL RDMA Plugin v8"), ("lccn19", 1, 9, "NCCL RDMA Plugin v8")], got


def test_nvls_head_and_tree_lines_are_not_connections():
    for name in ("rdma_plugin_nvls_nccl2.26.2.log", "nvls_tree_awsdoeks.log"):
        state = scan_file(name)
        kinds = {c.transport.kind for c in state.connections.values()}
        assert "NVLS" not in kinds, f"{name}: 'NVLS Head' / 'Connected NVLS tree' name no peer, got {kinds}"


def test_nic_distance_line_names_the_network_nccl_2_4_chose():
    state = scan_file("socket_nic_distance_multihost_nccl226.log")
    got = sorted((p.host, tuple(p.networks)) for p in state.processes.values())
    want = [(h, ("Socket",)) for h in ("ip-172-31-1-46", "ip-172-31-10-149", "ip-172-31-7-227", "ip-172-31-8-230")]
    assert got == want, f"expected Socket for each of the four hosts, got {got}"


def test_socket_transport_start_is_kept_apart_from_a_chosen_network():
    state = scan_file("socket_interface_2hosts_nccl2.5.6_nccl278.log")
    got = sorted(
        (p.host, p.socket_interface.line if p.socket_interface else None, dict(p.networks))
        for p in state.processes.values()
    )
    assert got == [("sh-01", 2, {}), ("sh-03", 4, {})], (
        f"expected lines 2 and 4 as socket starts, no network, got {got}"
    )


def test_ofi_refusing_a_non_efa_provider_is_an_ofi_failure():
    state = scan_file("ofi_only_efa_socket_nccl398.log")
    failed = sorted(p.pid for p in state.processes.values() if p.ofi_failure is not None)
    assert failed == [8159, 8164, 8166], f"expected the three processes that warned, got {failed}"
