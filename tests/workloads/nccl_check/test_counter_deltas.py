"""What workloads/nccl_check/counters.py reads and keeps, pinned whole: the parsed read, each device's or
node's delta with the line that says why (shown to the user and stored in runs/<id>/efa_counters.json), and the
reading's stored form read back. Outputs are in `read_script`'s layout (counters.py cites the sysfs files)."""

from __future__ import annotations

import json

from workloads.nccl_check.counters import (
    MISSING,
    OK,
    RESET,
    SYSFS_ROOT,
    UNREAD,
    NicDelta,
    NodeReading,
    deltas,
    parse_reading,
)

NODE = "ip-10-0-1-5"


def test_a_read_is_parsed_whole_lines_before_the_first_device_and_values_not_counts_kept_apart():
    out = (
        "EFA_COUNTERS_BEGIN\nstray 5\nDEVICE efa_0\ntx_bytes 10\nrx_bytes n/a\nUNREADABLE send_bytes\n"
        "rdma_read_bytes 1 2\nDEVICE efa_1\ntx_bytes 3\nEFA_COUNTERS_END\n"
    )
    got = parse_reading(out)
    expected = NodeReading(
        {"efa_0": {"tx_bytes": 10}, "efa_1": {"tx_bytes": 3}},
        {"efa_0": ("rx_bytes", "send_bytes", "rdma_read_bytes")},
    )
    assert got == expected, f"got {got}"


def test_a_read_cut_short_says_so():
    got = parse_reading("EFA_COUNTERS_BEGIN\nDEVICE efa_0\ntx_bytes 1\n")
    assert got == NodeReading(error="the counter read did not finish (no end marker in its output)"), got


def reading(**devices: dict[str, int]) -> NodeReading:
    return NodeReading(dict(devices))


def test_a_device_seen_on_one_side_only_is_missing_and_says_which_side():
    got = deltas({NODE: reading(efa_0={"tx_bytes": 1})}, {NODE: reading(efa_1={"tx_bytes": 1})})
    assert got == [
        NicDelta(NODE, "efa_0", MISSING, why=f"efa_0 on {NODE} was not there after the job"),
        NicDelta(NODE, "efa_1", MISSING, why=f"efa_1 on {NODE} was not there before the job"),
    ], got


def test_counters_unreadable_on_either_side_are_all_named_and_the_device_is_unreadable():
    before = NodeReading({"efa_0": {"rx_bytes": 1}}, {"efa_0": ("tx_bytes",)})
    after = NodeReading({"efa_0": {"rx_bytes": 2, "send_bytes": 4}}, {"efa_0": ("recv_bytes",)})
    (got,) = deltas({NODE: before}, {NODE: after})
    expected = NicDelta(
        NODE, "efa_0", UNREAD, why=f"efa_0 on {NODE}: recv_bytes, tx_bytes, send_bytes could not be read"
    )
    assert got == expected, got


def test_a_counter_other_than_tx_bytes_unreadable_on_one_side_leaves_the_device_judged_by_tx_bytes():
    before = NodeReading({"efa_0": {"tx_bytes": 1}}, {"efa_0": ("rx_bytes",)})
    (got,) = deltas({NODE: before}, {NODE: reading(efa_0={"tx_bytes": 5, "rx_bytes": 9})})
    assert got == NicDelta(NODE, "efa_0", OK, {"tx_bytes": 4}), got


def test_tx_bytes_absent_from_both_reads_is_unreadable_by_name():
    (got,) = deltas({NODE: reading(efa_0={"rx_bytes": 1})}, {NODE: reading(efa_0={"rx_bytes": 2})})
    assert got == NicDelta(NODE, "efa_0", UNREAD, why=f"efa_0 on {NODE}: tx_bytes could not be read"), got


def test_a_reset_names_each_counter_that_went_down_and_the_first_ones_values():
    before = reading(efa_0={"tx_bytes": 50, "rx_bytes": 40, "send_bytes": 7})
    after = reading(efa_0={"tx_bytes": 10, "rx_bytes": 5, "send_bytes": 9})
    (got,) = deltas({NODE: before}, {NODE: after})
    expected = NicDelta(
        NODE,
        "efa_0",
        RESET,
        {"tx_bytes": -40, "rx_bytes": -35, "send_bytes": 2},
        f"efa_0 on {NODE}: tx_bytes, rx_bytes went down (50 -> 10): the counters were reset during the job "
        "(driver reload or instance replaced), so the difference means nothing",
    )
    assert got == expected, got


def test_only_byte_counters_read_on_both_sides_are_differenced():
    before = reading(efa_0={"tx_bytes": 1, "tx_pkts": 1})
    after = reading(efa_0={"tx_bytes": 4, "tx_pkts": 9, "rx_bytes": 3})
    (got,) = deltas({NODE: before}, {NODE: after})
    assert got == NicDelta(NODE, "efa_0", OK, {"tx_bytes": 3}), got  # packets are no bytes; rx_bytes read once


def test_a_node_not_read_on_one_side_is_missing_and_one_whose_read_failed_is_unreadable_with_its_error():
    ok = reading(efa_0={"tx_bytes": 1})
    got = deltas(
        {"a": ok, "b": NodeReading(error="exec failed"), "c": ok},
        {"a": NodeReading(error="pod gone"), "b": ok, "d": ok},
    )
    assert got == [
        NicDelta("a", "*", UNREAD, why="a: pod gone"),
        NicDelta("b", "*", UNREAD, why="b: exec failed"),
        NicDelta("c", "*", MISSING, why="c: not read"),
        NicDelta("d", "*", MISSING, why="d: not read"),
    ], got


def test_a_node_showing_no_device_on_either_side_is_missing_and_the_next_node_still_counts():
    got = deltas(
        {"a": NodeReading(), "b": reading(efa_0={"tx_bytes": 1})},
        {"a": NodeReading(), "b": reading(efa_0={"tx_bytes": 3})},
    )
    assert got == [
        NicDelta("a", "*", MISSING, why=f"a: no EFA device under {SYSFS_ROOT}"),
        NicDelta("b", "efa_0", OK, {"tx_bytes": 2}),
    ], got


def test_a_reading_and_a_delta_are_stored_as_plain_json_and_a_reading_reads_back_the_same():
    r = NodeReading({"efa_0": {"tx_bytes": 5}}, {"efa_0": ("rx_bytes",)}, "", 2)
    stored = json.loads(json.dumps(r.to_dict()))
    assert stored == {
        "devices": {"efa_0": {"tx_bytes": 5}},
        "unreadable": {"efa_0": ["rx_bytes"]},
        "error": "",
        "advertised": 2,
    }
    assert NodeReading.from_dict(stored) == r
    d = NicDelta(NODE, "efa_0", OK, {"tx_bytes": 3}, "w")
    assert d.to_dict() == {"node": NODE, "device": "efa_0", "outcome": OK, "moved": {"tx_bytes": 3}, "why": "w"}


def test_a_stored_reading_with_fields_left_out_or_null_reads_back_as_empty_and_counts_as_ints():
    got = NodeReading.from_dict({"devices": {"efa_0": {"tx_bytes": "7"}}, "unreadable": None, "error": None})
    assert got == NodeReading({"efa_0": {"tx_bytes": 7}}), got
    assert NodeReading.from_dict({"error": "x"}) == NodeReading(error="x")
