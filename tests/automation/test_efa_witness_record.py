"""What automation/efa_witness.py keeps with a run, pinned whole: each way `weigh` ends (the read after the job
failed, no EFA there, no reading before, both readings), the record written as runs/<id>/efa_counters.json, the
prediction per NIC, and the status line read back from the newest record."""

from __future__ import annotations

import json
import os

from conftest import quiet_stack

from automation import efa_witness as ew
from automation.job import cluster_job
from workloads.nccl_check import witnesses as w
from workloads.nccl_check.counters import NodeReading
from workloads.nccl_check.records import Evidence
from workloads.nccl_check.verdict import ChannelClaim
from workloads.throughput_model import nic_bytes_per_step

JOB = cluster_job(quiet_stack("us-west-2"), "r1", None, None)  # 8 workers of 1 GPU: 4 GPUs a node on 2 nodes


def nodes(sent: int) -> dict[str, NodeReading]:
    return {n: NodeReading({"efa_0": {"tx_bytes": sent}}) for n in ("ip-10-0-1-5", "ip-10-0-1-6")}


class Reads:
    """A target whose counter read answers `after` (Target.efa_counters: None where there is no EFA)."""

    def __init__(self, after):
        self.after = after

    def efa_counters(self):
        if isinstance(self.after, Exception):
            raise self.after
        return self.after


BEFORE = ew.Snapshot(1.0, nodes(0))
LOG = ("efa", "pass", "EFA")


def test_a_failed_read_after_the_job_keeps_the_before_reading_the_steps_and_the_error():
    record = ew.weigh(Reads(ew.DriverError("connection refused")), BEFORE, JOB, 7, LOG)
    assert (record.before, record.after.nodes, record.steps) == (BEFORE, {}, 7), record
    assert isinstance(record.after.taken_at, float), record.after  # a time, so the record stores and reads back
    assert record.witnesses == w.Witnesses(
        "unreadable", False, "counter witness unreadable: the read after the job failed: connection refused"
    ), record.witnesses


def test_no_efa_where_the_job_ran_keeps_both_reads_and_the_logs_verdict():
    record = ew.weigh(Reads(None), BEFORE, JOB, 7, LOG)
    assert (record.before, record.after.nodes, record.steps) == (BEFORE, None, 7), record
    assert record.witnesses == w.not_applicable(ew.NO_EFA_HERE, "pass"), record.witnesses


def test_no_reading_before_the_job_is_judged_absent_whether_missing_or_from_a_target_without_efa():
    for before in (None, ew.Snapshot(1.0, None)):
        record = ew.weigh(Reads(nodes(5)), before, JOB, 7, LOG)
        assert (record.before, record.steps, record.witnesses.outcome) == (before, 7, w.NO_BEFORE), record
        assert record.witnesses.log_verdict == "pass", record.witnesses


def test_both_readings_are_judged_with_the_checks_requirement_cause_and_the_models_prediction():
    per_nic = nic_bytes_per_step(JOB, 4) * 10
    moved = ew.weigh(Reads(nodes(int(per_nic))), BEFORE, JOB, 10, LOG)
    assert (moved.witnesses.outcome, moved.steps) == (w.PASS, 10), moved.witnesses.message
    socket = ew.weigh(Reads(nodes(int(per_nic))), BEFORE, JOB, 10, ("socket", "pass", "sockets"))
    assert socket.witnesses.outcome == w.DISAGREE, socket.witnesses.message
    failed = ew.weigh(Reads(nodes(int(per_nic))), BEFORE, JOB, 10, ("efa", "fail", "no channel lines"))
    assert "(no channel lines)" in failed.witnesses.message, failed.witnesses.message


def test_without_steps_or_a_job_there_is_no_prediction():
    for job, steps in ((JOB, None), (None, 10)):
        record = ew.weigh(Reads(nodes(10**12)), BEFORE, job, steps, LOG)
        assert record.witnesses.outcome == w.NO_PREDICTION, (job, steps, record.witnesses.message)


def test_the_cross_check_gets_the_logs_claims_and_where_each_log_host_ran():
    claim = ChannelClaim("pod-a", "libfabric", 2, Evidence("f.log", 3, "pod-a via NET/Libfabric"))
    record = ew.weigh(Reads(nodes(0)), BEFORE, JOB, 10, LOG, [claim], {"pod-a": "ip-10-0-1-5"})
    assert [(c.kind, c.node) for c in record.witnesses.contradictions] == [(w.LIBFABRIC_IDLE, "ip-10-0-1-5")]


def test_the_stored_record_holds_both_readings_each_delta_and_the_verdict(tmp_path):
    after = ew.Snapshot(2.0, nodes(9))
    verdict = w.not_applicable("x")
    record = ew.CounterRecord(BEFORE, after, verdict, 10).to_dict()
    assert record == {
        "steps": 10,
        "before": BEFORE.to_dict(),
        "after": after.to_dict(),
        "deltas": [
            {"node": n, "device": "efa_0", "outcome": "ok", "moved": {"tx_bytes": 9}, "why": ""}
            for n in ("ip-10-0-1-5", "ip-10-0-1-6")
        ],
        "witnesses": verdict.to_dict(),
    }
    assert ew.CounterRecord(None, after, verdict).to_dict()["before"] is None
    path = ew.write(tmp_path, record)
    assert path.read_text() == json.dumps(record, indent=2) + "\n"


def test_a_snapshot_reads_back_the_same_and_takes_the_clocks_time():
    snap = ew.snapshot(Reads(nodes(3)), clock=lambda: 5.0)
    assert snap == ew.Snapshot(5.0, nodes(3))
    assert ew.Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap
    assert ew.Snapshot.from_dict({"taken_at": 1, "nodes": None}) == ew.Snapshot(1.0, None)


def test_a_snapshot_of_no_node_cannot_be_a_first_half():
    assert ew.Snapshot(0.0, {}).problems() == ["no GPU node to read"]


def test_the_prediction_spreads_over_the_node_with_most_nics():
    one, two = NodeReading({"efa_0": {}}), NodeReading({"efa_0": {}, "efa_1": {}})
    got = ew.predicted_per_nic(JOB, 10, {"a": one, "b": two})
    assert got == nic_bytes_per_step(JOB, 4) * 10 / 2, got


def write_run(root, name, witnesses):
    run = root / name
    run.mkdir(parents=True)
    (run / "driver.json").write_text(json.dumps({"stack": "s"}))
    (run / ew.COUNTERS_FILE).write_text(witnesses if isinstance(witnesses, str) else json.dumps(witnesses))
    return run / ew.COUNTERS_FILE


def test_the_status_line_gives_the_newest_runs_outcome_line_and_ratio_per_nic_skipping_damaged_runs(tmp_path):
    nic = {"node": "a", "device": "efa_0", "ratio": 0.9}
    ok = write_run(tmp_path, "ok", {"witnesses": {"outcome": "pass", "message": "m", "nics": [nic]}})
    os.utime(ok, (100, 100))
    for i in range(8):  # damaged runs all around it in the folder's order: none may end the search
        os.utime(write_run(tmp_path, f"damaged{i}", "{"), (50, 50))
    got = ew.last_witness(tmp_path, "s")
    assert got == {"run": "ok", "outcome": "pass", "message": "m", "ratio_per_nic": {"a/efa_0": 0.9}}, got


def test_the_status_line_of_a_missing_runs_folder_says_why(tmp_path):
    got = ew.last_witness(tmp_path / "none", "s")
    assert got == f"no run of stack s with {ew.COUNTERS_FILE} under {tmp_path / 'none'}", got
