"""automation/efa_witness.py: the bytes the model predicts per NIC, and `status`'s line of the newest run's
counter witness (the files `automation run` leaves in ./runs/<id>)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from conftest import quiet_stack

from automation import efa_witness
from automation.job import cluster_job
from automation.pipeline import RunState
from workloads.nccl_check.counters import NodeReading
from workloads.summary import RunSummary
from workloads.throughput_model import nic_bytes_per_step

ONE_NIC = NodeReading({"rdmap0s31": {"tx_bytes": 0}})


def test_prediction_is_the_models_bytes_per_step_times_the_steps_spread_over_a_nodes_nics():
    job = cluster_job(quiet_stack("us-west-2"), "r1", None, None)
    two_nics = NodeReading({"efa_0": {"tx_bytes": 0}, "efa_1": {"tx_bytes": 0}})
    got = efa_witness.predicted_per_nic(job, 10, {"a": two_nics, "b": two_nics})
    assert got == nic_bytes_per_step(job, 4) * 10 / 2, f"got {got}"


def write_run(root, name, stack, outcome, mtime):
    run = root / name
    run.mkdir(parents=True)
    (run / "driver.json").write_text(json.dumps({"stack": stack}))
    path = run / efa_witness.COUNTERS_FILE
    path.write_text(json.dumps({"witnesses": {"outcome": outcome, "message": "m", "nics": []}}))
    os.utime(path, (mtime, mtime))


def test_status_line_is_the_newest_run_of_the_stack(tmp_path):
    write_run(tmp_path, "old", "us-west-2", "counters-flat", 100)
    write_run(tmp_path, "new", "us-west-2", "pass", 200)
    write_run(tmp_path, "other", "us-east-2", "reset", 300)
    got = efa_witness.last_witness(tmp_path, "us-west-2")
    assert (got["run"], got["outcome"]) == ("new", "pass"), f"expected run new's pass, got {got}"


def test_status_line_says_why_when_no_run_kept_its_counters(tmp_path):
    got = efa_witness.last_witness(tmp_path, "us-west-2")
    assert isinstance(got, str) and "no run of stack us-west-2" in got, f"got {got!r}"


class Unreachable:
    """A target whose cluster does not answer the counter read."""

    def efa_counters(self):
        raise efa_witness.DriverError("list pods in ray: connection refused")


def test_a_read_after_the_job_that_fails_is_unreadable_not_an_error_of_check():
    before = efa_witness.Snapshot(0.0, {"n": ONE_NIC})
    record = efa_witness.weigh(Unreachable(), before, None, 10, ("efa", "pass", "EFA"))
    assert (record.witnesses.outcome, record.witnesses.ok) == ("unreadable", False), record.witnesses.message


class LocalGpus:
    """A local target with GPUs (automation/targets/local.py's answers): any transport, no EFA."""

    def nccl_expectation(self):
        from automation.targets.local import LOCAL_GPU_NOTE

        return "any", LOCAL_GPU_NOTE

    def checked_run_id(self):
        return "r1"

    def nccl_logs(self, run_id, dest):
        import shutil

        from conftest import FIXTURES

        dest.mkdir(parents=True)  # under a folder named after the run, as the local target's logs are
        return [Path(shutil.copy(FIXTURES / "nccl" / "single_node_p2p_cumem_nccltests252.log", dest))]

    def efa_counters(self):
        return None

    def kept_counters(self, job_id):  # nothing outlives a local run (automation/targets/local.py)
        return None


def test_local_check_says_the_counter_witness_does_not_apply():
    from automation.steps import check

    r = check.run(LocalGpus(), RunState())
    outcome = r.data.counters["witnesses"]["outcome"]
    assert (r.status, outcome) == ("skip", "not-applicable"), f"got {r.status}, {outcome}: {r.summary}"


def test_a_resumed_run_is_predicted_for_the_steps_it_ran_after_resuming():
    got = efa_witness.steps_run(RunSummary(steps=100, resumed_from_step=60), None)
    assert got == 40, f"a job resumed at step 60 of 100 ran 40 steps, got {got}"


class PodsOnNodes(LocalGpus):
    """A cluster target whose worker pods run on named nodes, with the EFA log of a real two-node run."""

    def nccl_expectation(self):
        return "efa", ""

    def nccl_logs(self, run_id, dest):
        import shutil

        from conftest import FIXTURES

        dest.mkdir(parents=True)
        return [Path(shutil.copy(FIXTURES / "nccl" / "efa_unprefixed_ofi1.20.log", dest / "nccl.r1.rank0.h.1.log"))]

    def host_nodes(self):
        return {"ray-efa-worker-a": "ip-10-30-1-5.us-west-2.compute.internal"}


def test_check_hands_the_cross_check_the_pods_nodes_when_the_log_claims_channels(monkeypatch):
    from automation.steps import check

    seen = {}

    def weigh(target, before, job, steps, log, claims=(), names=None):
        seen.update(claims=len(claims), names=names)
        after = efa_witness.Snapshot(0.0, None)
        return efa_witness.CounterRecord(None, after, efa_witness.not_applicable("test", log[1]), steps)

    monkeypatch.setattr(check.efa_witness, "weigh", weigh)
    check.run(PodsOnNodes(), RunState())
    want = {"ray-efa-worker-a": "ip-10-30-1-5.us-west-2.compute.internal"}
    assert seen["claims"] > 0 and seen["names"] == want, f"expected the log's claims with the pods' nodes, got {seen}"
