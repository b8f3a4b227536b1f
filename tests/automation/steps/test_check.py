"""automation/steps/check.py: how the NCCL verdict and the EFA counter witness become the `check` step's
result, and what the step hands the NCCL check and the witness.

The rules are the module's docstrings: on a target with EFA only a log's pass proves EFA, and with the
counter witness only when both pass; locally a pass or an inconclusive log is a skip that says it is no
EFA proof; every other verdict fails, naming the verdict, the requirement and the cause, with at most ten
lines of evidence. Logs are real NCCL output from tests/fixtures/nccl (its README says where each comes
from); the targets are stand-ins with the `Target` protocol's methods (automation/targets/__init__.py)."""

from __future__ import annotations

import dataclasses
import shutil
import types
from pathlib import Path

import pytest
from conftest import FIXTURES

from automation.cli import build_parser, parse
from automation.commands.run_steps import open_target
from automation.efa_witness import CounterRecord, Snapshot
from automation.errors import DriverError
from automation.pipeline import Finding, RunState, StepResult, TrainOutcome, TransportVerdict
from automation.steps import check
from automation.steps.check import CPU_SKIP_REASON, assert_transport, before_of, check_result, with_counters
from workloads.config import TrainConfig
from workloads.nccl_check.counters import NodeReading
from workloads.nccl_check.witnesses import Witnesses, not_applicable
from workloads.summary import RunSummary

EFA_LOG = FIXTURES / "nccl" / "efa_unprefixed_ofi1.20.log"  # aws-ofi-nccl 1.20 over EFA, two nodes
SOCKET_LOG = FIXTURES / "nccl" / "socket_cluster_nccl952.log"  # NCCL over NET/Socket between two hosts
NOTE = "local GPUs: no EFA to prove"
CAUSE = "the cause the NCCL check gave"
NCCL = "NCCL transport"


def verdict(name: str, evidence: tuple[str, ...] = ()) -> TransportVerdict:
    return TransportVerdict(name, "efa", CAUSE, evidence)


# (log verdict, note) -> (status, summary, the NCCL finding's status, detail and fix). `note` is what a
# target that cannot prove EFA says (automation/targets/local.py); the cloud target gives none.
CHECK_RESULTS = {
    "not applicable: skip with its reason": (
        ("not-applicable", ""),
        ("skip", CAUSE, "skip", CAUSE, ""),
    ),
    "not applicable with a note: the reason alone": (
        ("not-applicable", NOTE),
        ("skip", CAUSE, "skip", CAUSE, ""),
    ),
    "cloud pass: NCCL over the requirement": (
        ("pass", ""),
        ("pass", f"NCCL over efa: {CAUSE}", "pass", CAUSE, ""),
    ),
    "local pass: a skip naming the note": (
        ("pass", NOTE),
        ("skip", f"pass: {CAUSE} ({NOTE})", "skip", f"{CAUSE} ({NOTE})", ""),
    ),
    "local inconclusive: a skip naming the note": (
        ("inconclusive", NOTE),
        ("skip", f"inconclusive: {CAUSE} ({NOTE})", "skip", f"{CAUSE} ({NOTE})", ""),
    ),
    "cloud fail: the cause is the fix": (
        ("fail", ""),
        ("fail", f"NCCL check fail (require=efa): {CAUSE}", "fail", CAUSE, CAUSE),
    ),
    "local fail: still a fail, the note in the detail": (
        ("fail", NOTE),
        ("fail", f"NCCL check fail (require=efa): {CAUSE}", "fail", f"{CAUSE} ({NOTE})", CAUSE),
    ),
    "cloud inconclusive: a fail": (
        ("inconclusive", ""),
        ("fail", f"NCCL check inconclusive (require=efa): {CAUSE}", "fail", CAUSE, CAUSE),
    ),
    "local bad input: a fail": (
        ("bad-input", NOTE),
        ("fail", f"NCCL check bad-input (require=efa): {CAUSE}", "fail", f"{CAUSE} ({NOTE})", CAUSE),
    ),
}


@pytest.mark.parametrize("given, want", CHECK_RESULTS.values(), ids=CHECK_RESULTS.keys())
def test_a_verdict_maps_to_the_step_result_its_rule_names(given, want):
    (name, note), (status, summary, nccl_status, detail, fix) = given, want
    v = verdict(name)
    expected = StepResult("check", status, summary, (Finding(NCCL, nccl_status, detail, fix),), v)
    got = check_result(v, note)
    assert got == expected, f"expected {expected}, got {got}"


def test_a_failing_verdict_cites_its_first_ten_evidence_lines_each_as_a_failing_finding():
    lines = tuple(f"rank{i}.log:{i}: via NET/Socket/0" for i in range(12))
    got = [(f.check, f.status, f.detail) for f in check_result(verdict("fail", lines)).findings[1:]]
    assert got == [("evidence", "fail", line) for line in lines[:10]], f"got {got}"


def test_the_cpu_skip_carries_a_counter_witness_that_does_not_apply():
    got = check.not_applicable_on_cpu()
    witness = got.counters["witnesses"] if got.counters else {}
    assert (got.verdict, got.require, got.cause, witness.get("outcome")) == (
        "not-applicable",
        None,
        CPU_SKIP_REASON,
        "not-applicable",
    ), f"got {got}"
    assert "no EFA device" in witness["message"], f"expected the witness to say why, got {witness['message']!r}"


# ---- with_counters: both witnesses ---------------------------------------------------------------

NO_READING = Snapshot(0.0, None)
READ = Snapshot(1.0, {"ip-10-0-1-5": NodeReading({"rdmap0s31": {"tx_bytes": 7}})})
AGREE = Witnesses("pass", True, "both witnesses say EFA")
FLAT = Witnesses("counters-flat", False, "the log says EFA, the NIC did not carry it")


def record(w: Witnesses) -> CounterRecord:
    return CounterRecord(NO_READING, READ, w, 10)


def test_where_the_counter_witness_does_not_apply_the_log_alone_decides_and_the_record_is_kept():
    rec = CounterRecord(None, NO_READING, not_applicable("no EFA here", "pass"), 10)
    v = verdict("pass")
    got = with_counters(v, rec)
    kept = dataclasses.replace(v, counters=rec.to_dict())
    assert got == check_result(kept), f"expected the log's own pass with the record, got {got}"


def test_a_log_pass_and_a_counter_pass_pass_together_naming_both():
    v = verdict("pass")
    got = with_counters(v, record(AGREE), NOTE)
    kept = dataclasses.replace(v, counters=record(AGREE).to_dict())
    findings = (Finding(NCCL, "pass", CAUSE), Finding("EFA counters", "pass", AGREE.message, ""))
    expected = StepResult("check", "pass", f"NCCL over efa, and {AGREE.message}", findings, kept)
    assert got == expected, f"expected {expected}, got {got}"


def test_a_log_pass_over_flat_counters_fails_naming_the_counter_witness_first():
    v = verdict("pass")
    got = with_counters(v, record(FLAT))
    kept = dataclasses.replace(v, counters=record(FLAT).to_dict())
    findings = (Finding("EFA counters", "fail", FLAT.message, FLAT.message), Finding(NCCL, "pass", CAUSE))
    summary = f"NCCL check pass (require=efa), counter witness counters-flat: {FLAT.message}"
    expected = StepResult("check", "fail", summary, findings, kept)
    assert got == expected, f"expected {expected}, got {got}"


def test_a_log_fail_fails_with_the_counters_and_the_logs_evidence():
    v = verdict("fail", ("rank0.log:3: via NET/Socket/0",))
    no_move = Witnesses("not-efa", False, "the log says sockets and the counters agree")
    got = with_counters(v, record(no_move))
    kept = dataclasses.replace(v, counters=record(no_move).to_dict())
    findings = (
        Finding("EFA counters", "fail", no_move.message, no_move.message),
        Finding(NCCL, "fail", CAUSE, CAUSE),
        Finding("evidence", "fail", "rank0.log:3: via NET/Socket/0"),
    )
    summary = f"NCCL check fail (require=efa), counter witness not-efa: {no_move.message}"
    expected = StepResult("check", "fail", summary, findings, kept)
    assert got == expected, f"expected {expected}, got {got}"


# ---- assert_transport: the NCCL check over the logs ---------------------------------------------


def test_the_requirement_reaches_the_nccl_check():
    got = assert_transport([SOCKET_LOG], "socket", run_id=None)
    assert (got.verdict, got.require) == ("pass", "socket"), f"a socket run required socket: got {got.verdict}"


def test_the_run_id_reaches_the_nccl_check_so_another_runs_logs_prove_nothing():
    got = assert_transport([EFA_LOG], "efa", run_id="r9")
    assert got.verdict == "bad-input" and "r9" in got.cause, f"expected run r9's logs missing, got {got.verdict}"


def test_the_verdict_counts_the_files_and_cites_each_evidence_line_by_file_name(tmp_path):
    paths = [Path(shutil.copy(EFA_LOG, tmp_path / "a.log")), Path(shutil.copy(EFA_LOG, tmp_path / "b.log"))]
    got = assert_transport(paths, "efa", run_id=None)
    cited = tuple(
        f"{Path(e['file']).name}:{e['line']}: {e['text']} ({e['why']})" for e in (got.report or {})["evidence"]
    )
    assert (got.files, got.evidence) == (2, cited) and cited, f"got {got.files} files, evidence {got.evidence}"
    assert all(line.startswith(("a.log:", "b.log:")) for line in got.evidence), f"got {got.evidence}"


# ---- before_of: the reading before the job -------------------------------------------------------


class Kept:
    """A target that kept a reading for run `run_id` (`kept_counters`), recording what it was asked."""

    def __init__(self, kept: dict | None):
        self.kept = kept
        self.asked: list = []

    def kept_counters(self, job_id):
        self.asked.append(job_id)
        return self.kept


def test_the_counters_step_of_this_command_gives_the_reading_before():
    target = Kept(READ.to_dict())
    got = before_of(RunState(counters=StepResult("counters", "pass", "", (), READ)), target, "r1")
    assert (got, target.asked) == (READ, []), f"expected this command's reading, got {got}, asked {target.asked}"


@pytest.mark.parametrize("counters_step", [None, StepResult("counters", "skip", "no EFA here")])
def test_without_a_reading_of_this_command_the_one_kept_for_the_run_is_read(counters_step):
    target = Kept(READ.to_dict())
    prior = RunState(counters=counters_step)
    got = before_of(prior, target, "r1")
    assert (got, target.asked) == (READ, ["r1"]), f"expected run r1's kept reading, got {got}, asked {target.asked}"


@pytest.mark.parametrize("kept", [None, {"nodes": {}}, {"taken_at": "soon"}], ids=["none", "no-time", "bad-time"])
def test_no_kept_reading_or_one_this_version_cannot_read_is_no_reading(kept):
    got = before_of(RunState(), Kept(kept), "r1")
    assert got is None, f"expected no reading, got {got}"


# ---- run: the step ---------------------------------------------------------------------------------


class Cluster:
    """A target with EFA whose run `job-7` left the two-node EFA log; it records what the step asks."""

    def __init__(self, host_nodes=None):
        self.asked: list[tuple] = []
        self._host_nodes = host_nodes

    def nccl_expectation(self):
        return "efa", ""

    def checked_run_id(self):
        return "job-7"

    def nccl_logs(self, run_id, dest):
        self.asked.append(("nccl_logs", run_id, dest.name))
        dest.mkdir(parents=True)
        return [Path(shutil.copy(EFA_LOG, dest / "nccl.rank0.log"))]

    def kept_counters(self, job_id):
        self.asked.append(("kept_counters", job_id))
        return READ.to_dict()

    def host_nodes(self):
        if isinstance(self._host_nodes, Exception):
            raise self._host_nodes
        return self._host_nodes or {}


@pytest.fixture
def weighed(monkeypatch):
    """What the step hands the counter witness (efa_witness.weigh), answered with a witness that agrees."""
    seen: dict = {}

    def weigh(target, before, job, steps, log, claims=(), names=None):
        seen.update(before=before, job=job, steps=steps, log=log, claims=len(claims), names=names)
        return record(AGREE)

    monkeypatch.setattr(check.efa_witness, "weigh", weigh)
    return seen


def test_a_target_without_nccl_skips_and_reads_no_logs():
    class Cpu(Cluster):
        def nccl_expectation(self):
            return None, ""

    target = Cpu()
    got = check.run(target, RunState())
    assert (got, target.asked) == (check_result(check.not_applicable_on_cpu()), []), f"got {got}, {target.asked}"


def test_without_a_job_of_this_command_the_run_the_target_names_is_read_and_weighed(weighed):
    target = Cluster({"host-a": "node-a"})
    got = check.run(target, RunState())
    asked = (target.asked, weighed["before"], weighed["job"], weighed["steps"])
    assert asked == ([("nccl_logs", "job-7", "job-7"), ("kept_counters", "job-7")], READ, None, None), (
        f"expected run job-7's logs and kept reading, no job, no steps; got {asked}"
    )
    assert (got.data.report or {})["run_id"] == "job-7", f"expected the check scoped to job-7, got {got.data.report}"


# (the train step's summary, the job's steps) -> the steps the witness is told the job ran
STEPS_RUN = {
    "a resumed job counts the steps after the resume": (RunSummary(steps=100, resumed_from_step=60), 100, 40),
    "without a summary the job's own steps": (None, 30, 30),
}


@pytest.mark.parametrize("summary, job_steps, steps", STEPS_RUN.values(), ids=STEPS_RUN.keys())
def test_the_job_this_command_trained_is_the_run_checked_and_weighed(weighed, summary, job_steps, steps):
    target, job = Cluster({"host-a": "node-a"}), TrainConfig(steps=job_steps)
    trained = StepResult("follow", "pass", "", (), TrainOutcome("raysubmit_9", "SUCCEEDED", summary, job=job))
    got = check.run(target, RunState(follow=trained))
    seen = (target.asked[0], weighed["job"], weighed["steps"])
    assert seen == (("nccl_logs", "raysubmit_9", "raysubmit_9"), job, steps), f"got {seen}"
    assert got.status == "pass" and (got.data.report or {})["run_id"] == "raysubmit_9", f"got {got}"


def test_the_witness_gets_the_logs_verdict_its_channel_claims_and_the_pods_nodes(weighed):
    check.run(Cluster({"host-a": "node-a"}), RunState())
    got = (weighed["log"][:2], weighed["claims"] > 0, weighed["names"])
    assert got == (("efa", "pass"), True, {"host-a": "node-a"}), f"got {got}"


def test_pods_that_are_gone_leave_the_cross_check_no_node_names(weighed):
    got = check.run(Cluster(DriverError("pods gone")), RunState())
    assert (got.status, weighed["names"]) == ("pass", {}), f"got {got.status}, names {weighed['names']}"


# ---- The AWS run requires EFA: the target the CLI builds for `run --stack` asks the NCCL check for efa,
# and the check step fails a run whose logs show a socket fallback or prove nothing. Real NCCL logs
# from tests/fixtures/nccl (its README says where each comes from); no cluster, no Ray.


def test_the_cli_builds_the_aws_run_with_efa_required(repo_root):
    args = parse(build_parser(), ["run", "--stack", "us-west-2", "--project-dir", str(repo_root)])
    ui = types.SimpleNamespace(log=print, progress=print, note=print)
    target = open_target(args, ui, deps=object())  # deps given: nothing of the outside world is built
    assert target.run.require == "efa", f"expected the AWS run's NCCL check to require efa, got {target.run.require!r}"


def test_socket_fallback_fails_the_check_step_when_efa_is_required():
    result = check_result(assert_transport([SOCKET_LOG], "efa", run_id=None))
    assert result.status == "fail", f"expected the check to fail on a socket fallback, got {result.status}: {result}"


def test_logs_without_nccl_transport_lines_fail_the_check_step_when_efa_is_required(tmp_path):
    empty = tmp_path / "rank0.log"
    empty.write_text("[train] step 1/2 loss 6.9\n")
    v = assert_transport([empty], "efa", run_id=None)
    result = check_result(v)
    assert result.status == "fail", f"expected a {v.verdict} verdict to fail the AWS check, got {result.status}"


def test_efa_logs_pass_the_check_step():
    result = check_result(assert_transport([EFA_LOG], "efa", run_id=None))
    assert result.status == "pass", f"expected the check to pass on EFA logs, got {result.status}: {result.reason}"
