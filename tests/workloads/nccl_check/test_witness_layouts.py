"""The counter witness over every NIC and node layout (issue 48): 1 to 4 GPU nodes with 0 to 4 EFA devices
each, read before and after the job as `counters.read_script` prints them (one `DEVICE` line, then one
`name value` line per hw_counters file, `UNREADABLE name` where `cat` failed; the sysfs layout counters.py
cites), with at most one thing wrong in one reading: a device or node gone, a node's read cut short, tx_bytes
unreadable, not a number or absent (in one reading or in both), or reset. The verdict is a pass only when
EVERY device of EVERY node carried its share, and a counter not read is never read as zero."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.nccl_check import counters as c
from workloads.nccl_check import witnesses as w

PREDICTED = 10**9  # bytes per NIC the model predicts (any figure: the rules are fractions of it)
# Percent of the prediction a device sent: the boundary (60) and its neighbours, idle, and above; drawn from one
# pool per layout so that layouts where every NIC, or none, reached the boundary are common.
POOLS = st.sampled_from([(60, 61, 100, 140), (0, 1, 30, 59), (0, 1, 30, 59, 60, 61, 100, 140), (59, 60)])
DEVICE_FAULTS = ("device-gone", "tx-unreadable", "tx-not-a-number", "tx-absent", "tx-absent-both", "reset")
NODE_FAULTS = ("node-gone", "read-cut-short")
# What each fault must be judged as (witnesses.py's docstring: each its own outcome, never a pass).
EXPECTED = {
    "device-gone": c.MISSING,
    "node-gone": c.MISSING,
    "read-cut-short": c.UNREAD,
    "tx-unreadable": c.UNREAD,
    "tx-not-a-number": c.UNREAD,
    "tx-absent": c.UNREAD,
    "tx-absent-both": c.UNREAD,
    "reset": c.RESET,
}


@st.composite
def layouts(draw):
    """(before text by node, after text by node, percent sent by (node, device), the fault's expected outcome
    or None, whether some node shows no device)."""
    nodes = [f"ip-10-0-1-{i}" for i in range(draw(st.integers(1, 4)))]
    devices = {n: [f"rdmap{j}s31" for j in range(draw(st.integers(0, 4)))] for n in nodes}
    pool = draw(POOLS)
    sent = {(n, d): draw(st.sampled_from(pool)) for n in nodes for d in devices[n]}
    base = {(n, d): draw(st.integers(10**6, 10**12)) for n in nodes for d in devices[n]}
    before = {n: {d: {"tx_bytes": str(base[n, d]), "rx_bytes": "7", "tx_pkts": "3"} for d in devices[n]} for n in nodes}
    after = {
        n: {d: {"tx_bytes": str(base[n, d] + sent[n, d] * PREDICTED // 100), "rx_bytes": "9"} for d in devices[n]}
        for n in nodes
    }
    fault = draw(st.one_of(st.none(), st.sampled_from((*NODE_FAULTS, *DEVICE_FAULTS))))
    node = draw(st.sampled_from(nodes))
    when = draw(st.sampled_from(["before", "after"]))
    reading = before if when == "before" else after
    cut = set()
    if fault in DEVICE_FAULTS and not devices[node]:
        fault = None  # a device fault needs a device
    if fault in DEVICE_FAULTS:
        dev = draw(st.sampled_from(devices[node]))
        if fault == "device-gone":
            del reading[node][dev]
        elif fault == "tx-unreadable":
            reading[node][dev]["tx_bytes"] = "UNREADABLE"
        elif fault == "tx-not-a-number":
            reading[node][dev]["tx_bytes"] = "-"
        elif fault == "tx-absent":
            del reading[node][dev]["tx_bytes"]
        elif fault == "tx-absent-both":
            del before[node][dev]["tx_bytes"], after[node][dev]["tx_bytes"]
        else:  # the driver reloaded: the counter starts again from a small value
            after[node][dev]["tx_bytes"] = str(draw(st.integers(0, base[node, dev] - 1)))
    elif fault == "node-gone":
        del reading[node]
    elif fault == "read-cut-short":
        cut.add((when, node))
    texts = {
        when: {n: output(devs, (when, n) in cut) for n, devs in reading.items()}
        for when, reading in (("before", before), ("after", after))
    }
    empty = any(not devices[n] for n in nodes)
    return texts["before"], texts["after"], sent, EXPECTED.get(fault or ""), empty


def output(devs: dict[str, dict[str, str]], cut_short: bool) -> str:
    """What `read_script` prints for these devices' counter files (values as `cat` gives them)."""
    lines = ["noise before the marker", c.BEGIN]
    for dev, files in devs.items():
        lines.append(f"{c.DEVICE} {dev}")
        lines += [f"{c.UNREADABLE} {k}" if v == "UNREADABLE" else f"{k} {v}" for k, v in files.items()]
    lines += [] if devs else [c.NONE]
    return "\n".join(lines if cut_short else [*lines, c.END]) + "\n"


def verdict(require, log, before, after):
    found = c.deltas(
        {n: c.parse_reading(t) for n, t in before.items()}, {n: c.parse_reading(t) for n, t in after.items()}
    )
    return found, w.judge(require, log, "cause", found, PREDICTED)


@settings(max_examples=300, deadline=None)
@given(layouts(), st.sampled_from(["efa", "socket"]), st.sampled_from(["pass", "fail", "inconclusive"]))
def test_the_witness_passes_only_when_every_nic_of_every_node_was_read_and_carried_its_share(layout, require, log):
    before, after, sent, fault, empty = layout
    _, got = verdict(require, log, before, after)
    every_carried = all(p >= 60 for p in sent.values())
    none_carried = all(p < 60 for p in sent.values())
    read_whole = fault is None and not empty
    should_pass = read_whole and log == "pass" and (every_carried if require == "efa" else none_carried)
    assert got.ok == should_pass, f"{got.outcome}: {got.message} (fault {fault}, sent {sent})"
    assert got.ok == (got.outcome == w.PASS), f"ok and outcome disagree: {got}"


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_a_fault_in_either_reading_is_its_own_outcome_and_never_read_as_zero(layout):
    before, after, sent, fault, empty = layout
    found, got = verdict("efa", "pass", before, after)
    if fault is None and not empty:
        assert got.outcome in (w.PASS, w.FLAT), f"a whole read judged {got.outcome}: {got.message}"
        assert {(d.node, d.device): d.sent for d in found} == {k: p * PREDICTED // 100 for k, p in sent.items()}
        return
    assert not got.ok, f"a broken read passed: {got.message}"
    expected = {fault} | ({c.MISSING} if empty else set())
    expected.discard(None)
    assert got.outcome in expected, f"expected one of {expected}, got {got.outcome}: {got.message}"
    if len(expected) == 1:
        assert got.outcome == fault or (fault is None and got.outcome == c.MISSING), got.message
    unknown = [r for r in got.nics if r.outcome != c.OK]
    assert unknown or not found, f"no NIC row names what went wrong: {got.nics}"
    assert all(r.counted is None and r.ratio is None for r in unknown), f"an unread NIC counted as bytes: {unknown}"


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_libfabric_channels_contradict_exactly_the_nodes_where_every_nic_stayed_below_the_floor(layout):
    from workloads.nccl_check.records import Evidence
    from workloads.nccl_check.verdict import ChannelClaim

    before, after, sent, fault, empty = layout
    found, _ = verdict("efa", "pass", before, after)
    read = {d.node for d in found if d.outcome == c.OK}
    claims = [ChannelClaim(n, "libfabric", 2, Evidence("log", 1, f"{n} via NET/Libfabric")) for n in sorted(read)]
    got = w.cross_check(claims, found, PREDICTED)
    idle = {n for n in read if all(p < 60 for (m, d), p in sent.items() if m == n and (m, d) in _ok(found))}
    assert {x.node for x in got} == idle, f"contradictions on {[x.node for x in got]}, idle nodes {idle}"


def _ok(found):
    return {(d.node, d.device) for d in found if d.outcome == c.OK}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.one_of(st.none(), st.integers(0, 4)), st.booleans()), max_size=4))
def test_a_before_reading_serves_only_when_every_node_shows_a_device_and_all_it_advertises(nodes):
    from automation.efa_witness import Snapshot

    readings = {
        f"n{i}": c.NodeReading({f"efa_{j}": {"tx_bytes": 0} for j in range(found)}, advertised=adv, error="x" * err)
        for i, (found, adv, err) in enumerate(nodes)
    }
    whole = bool(nodes) and all(not err and found >= 1 and found >= (adv or 0) for found, adv, err in nodes)
    problems = Snapshot(0.0, readings).problems()
    assert (problems == []) == whole, f"{nodes}: {problems}"
    assert len(problems) == (sum(1 for f, a, e in nodes if e or f < max(1, a or 0)) or (0 if nodes else 1))
