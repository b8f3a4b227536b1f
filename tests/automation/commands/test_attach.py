"""Runs that outlive the terminal (issue 35): `run --stack` on a fake clock with a 3-hour job, a dropped exec
stream and an expired token; `run --detach` then `attach`; Ctrl-C while following; `--timeout`.

The world: moto's EKS node group (the scale-down is real), the recorded cluster behind the fake Kubernetes API
(tests/fixtures/k8s/), and the head pod's job server of tests/support/_ray_jobs.py, which prints what
Ray 2.58's job CLI prints and runs its job on the same fake clock the driver waits on. The steps before
`submit` (preflight, preview, up, verify) stand in, each passing (tests/automation/commands/test_run_steps.py
runs them); submit, train, check, the report and the scale-down are the real ones. Hours run in well under a
second: nothing sleeps.
"""

from __future__ import annotations

import re

import boto3
import pytest
from _attach_world import HOURS, REF, RUN_BUCKET, STEPS, World, cli_on, doc_of, step
from _ray_jobs import Clock, FakeRayJobs, Fault, JobScript, train_lines
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION

from automation import cli
from automation.kube import ExecResult
from automation.ray_head import HeadJobs
from automation.scaling import sizes
from workloads.config import TrainConfig


@pytest.fixture
def world(moto_eks):
    return World(moto_eks)


# ---- a 3-hour job through `run --stack`, with two dropped streams and an expired token ------------------------
@pytest.fixture
def faulty(moto_eks):
    return World(
        moto_eks,
        faults=[
            Fault(3600, "drop", "logs", after_lines=3),
            Fault(5400, "expired-token", "status"),
            Fault(7200, "drop", "status"),
        ],
    )


def test_a_three_hour_job_passes_through_two_drops_and_an_expired_token(faulty, capsys, monkeypatch):
    got = cli_on(faulty, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    doc = doc_of(capsys)
    assert (got["rc"], len(faulty.jobs.failures)) == (0, 3), f"expected exit 0 after 3 faults, got {got}, {doc}"
    assert step(doc, "follow")["status"] == "pass", step(doc, "follow")["summary"]


@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_every_log_line_of_the_three_hour_job_is_shown_once_in_order(faulty, capsys, monkeypatch):
    cli_on(faulty, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    want = list(train_lines(STEPS))
    assert faulty.shown == want, f"expected {len(want)} lines once each, got {len(faulty.shown)}"


@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_the_lost_connection_is_said_once(faulty, capsys, monkeypatch):
    cli_on(faulty, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    said = [n for n in faulty.notes if "lost the connection to the job server" in n]
    assert len(said) == 1, f"expected one line about the lost connection, got {said}"


def test_the_gpu_nodes_scale_down_only_after_the_job_ended(faulty, capsys, monkeypatch):
    cli_on(faulty, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    ended = faulty.jobs.jobs["r1"].ended_at
    assert [(size, states) for _, size, states in faulty.scaled] == [(0, ("SUCCEEDED",))], faulty.scaled
    assert faulty.scaled[0][0] >= ended >= HOURS * 3600, f"scaled at {faulty.scaled[0][0]}, job ended {ended}"


# ---- one job per submit: a dropped `ray job submit` stream is followed by `ray job status <submission id>` ---------
def submits(world: World) -> list[str | None]:
    return [r.job_id for r in world.jobs.requests if r.action == "submit"]


def test_a_submit_stream_dropped_after_acceptance_follows_the_one_job(moto_eks, capsys, monkeypatch):
    world = World(moto_eks, faults=[Fault(0, "drop", "submit", reached=True)])
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    train = step(doc_of(capsys), "follow")
    said = (got["rc"], submits(world), list(world.jobs.jobs), train["status"])
    assert said == (0, ["r1"], ["r1"], "pass"), f"expected one submit, one job r1 followed to a pass, got {said}"


def test_a_submit_stream_dropped_before_acceptance_resubmits_once_with_the_same_id(moto_eks, capsys, monkeypatch):
    world = World(moto_eks, faults=[Fault(0, "drop", "submit", reached=False)])
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    asked = [r.action for r in world.jobs.requests][:3]
    said = (got["rc"], asked, submits(world), list(world.jobs.jobs))
    want = (0, ["submit", "status", "submit"], ["r1", "r1"], ["r1"])
    assert said == want, f"expected submit, status (not found), submit again as r1, one job: got {said}"


def test_a_submit_whose_status_cannot_be_asked_fails_naming_the_id_and_the_check(moto_eks, capsys, monkeypatch):
    world = World(moto_eks, faults=[Fault(0, "drop", "submit"), Fault(0, "drop", "status")])
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    summary = step(doc_of(capsys), "submit")["summary"]
    check = "kubectl -n ray exec ray-efa-head-"
    said = (got["rc"], submits(world), "job r1 may be queued" in summary, check in summary)
    assert said == (1, ["r1"], True, True), f"expected exit 1 after one submit, naming r1 and {check}…: {summary}"


def test_a_resubmit_refused_as_existing_returns_the_job_the_first_submit_queued_late():
    jobs = FakeRayJobs(Clock(), lambda job_id: JobScript(("x",), run_s=10), [Fault(0, "drop", "submit", reached=False)])

    def pod_exec(pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600):
        if stdin is not None:  # the workloads/ upload
            return ExecResult(0, "", "")
        if command[2] == "submit" and any(r.action == "status" for r in jobs.requests):
            jobs.answer(pod, command)  # the first submit, held up on its way, reaches the server only now
        return jobs.answer(pod, command, on_line)

    job_id = HeadJobs(pod_exec, "head-0", "ray").submit(TrainConfig(run_id="r1"), {}, "r1")
    said = (job_id, [r.action for r in jobs.requests], list(jobs.jobs))
    assert said == ("r1", ["submit", "status", "submit", "submit"], ["r1"]), f"expected job r1 once, got {said}"


# ---- run --detach, then attach from a second invocation ------------------------------------------------------
@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_detach_submits_exits_zero_and_keeps_the_nodes(world, capsys, monkeypatch):
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--detach"])
    doc = doc_of(capsys)
    said = (got["rc"], world.job_states(), sizes(world.eks, REF)["desiredSize"])
    assert said == (0, ("PENDING",), 2), f"expected exit 0, the job queued and 2 nodes, got {said}"
    assert "python -m automation attach --stack us-west-2 r1" in step(doc, "submit")["summary"], doc["steps"]


def test_attach_after_detach_gives_the_result_and_report_of_one_run(moto_eks, capsys, monkeypatch):
    one = World(moto_eks)
    cli_on(one, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    whole = doc_of(capsys)
    moto_eks.update_nodegroup_config(
        clusterName=MOTO_CLUSTER, nodegroupName=MOTO_NODEGROUP, scalingConfig={"desiredSize": 2}
    )
    two = World(moto_eks)
    cli_on(two, monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--detach"])
    capsys.readouterr()
    got = cli_on(two, monkeypatch, ["attach", "--stack", "us-west-2", "r1"])
    attached = doc_of(capsys)

    def outcome(doc: dict) -> list:  # check's data names its temporary folder: its verdict is compared
        train, check = step(doc, "follow"), step(doc, "check")
        # The start's phases are compared below: attach did not see the job start, so its first step is unknown.
        job = {k: v for k, v in train["data"].items() if k != "start"}
        return [train["status"], train["summary"], job, check["status"], check["summary"], doc["ok"]]

    same = [a == b for a, b in zip(outcome(attached), outcome(whole), strict=True)]
    assert (got["rc"], same) == (0, [True] * 6), f"attach differs from one run (train, check, ok): {got}, {same}"
    one_start, two_start = step(whole, "follow")["data"]["start"], step(attached, "follow")["data"]["start"]
    assert two_start == {**one_start, "first_step_s": None}, f"start phases: run {one_start}, attach {two_start}"
    assert [r["ok"] for r in two.reports] == [r["ok"] for r in one.reports] == [True], (two.reports, one.reports)
    assert two.shown == one.shown and sizes(moto_eks, REF)["desiredSize"] == 0, "same lines, nodes down after"


@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_attach_without_a_run_follows_the_newest_job(world, capsys, monkeypatch):
    cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--detach"])
    newest = f"/tmp/ray-efa-eks/src/{next(iter(world.jobs.jobs))}"
    answer = world.exec

    def with_listing(pod, namespace, command, **kw):  # the head pod's src/ holds one folder per submitted job
        if command[:2] == ["sh", "-c"] and "ls -1t /tmp/ray-efa-eks/src" in command[2]:
            return ExecResult(0, newest.rsplit("/", 1)[1] + "\n", "")
        return answer(pod, namespace, command, **kw)

    world.exec = with_listing
    capsys.readouterr()
    got = cli_on(world, monkeypatch, ["attach", "--stack", "us-west-2"])
    doc = doc_of(capsys)
    assert (got["rc"], step(doc, "attach")["data"]["job_id"]) == (0, "r1"), doc["steps"]


@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_attach_to_a_job_the_server_does_not_know_is_refused(world, capsys, monkeypatch):
    got = cli_on(world, monkeypatch, ["attach", "--stack", "us-west-2", "nosuch"])
    err = capsys.readouterr().err
    assert got["rc"] == 2 and "has no job 'nosuch'" in err, f"expected exit 2 naming the job, got {got}: {err}"
    assert world.scaled == [], f"nothing may scale after a failed attach, got {world.scaled}"


# ---- Ctrl-C while following ----------------------------------------------------------------------------------
@pytest.mark.parametrize("interactive", [False, True], ids=["no-terminal", "terminal-answers-no"])
def test_ctrl_c_while_following_leaves_the_job_and_the_nodes(world, capsys, monkeypatch, interactive):
    world.interrupt_at = 3600
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"], interactive=interactive)
    err = " ".join(capsys.readouterr().err.split())
    stops = [r for r in world.jobs.requests if r.action == "stop"]
    said = (got["rc"], world.job_states(), stops, sizes(world.eks, REF)["desiredSize"])
    assert said == (130, ("RUNNING",), [], 2), f"expected exit 130, the job running, no stop, 2 nodes: {said}"
    assert "attach --stack us-west-2 r1" in err, f"expected the attach command in: {err}"


@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_ctrl_c_then_yes_stops_the_job_and_then_scales_down(world, capsys, monkeypatch):
    world.interrupt_at = 3600
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"], interactive=True, answer=True)
    stops = [r.job_id for r in world.jobs.requests if r.action == "stop"]
    said = (got["rc"], stops, [(size, states) for _, size, states in world.scaled])
    assert said == (130, ["r1"], [(0, ("STOPPED",))]), f"expected the job stopped, then 0 nodes: {said}"


# ---- --timeout -----------------------------------------------------------------------------------------------
@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_timeout_stops_the_job_with_ray_job_stop_and_says_so(world, capsys, monkeypatch):
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--timeout", "3600"])
    doc = doc_of(capsys)
    stops = [(r.job_id, r.option("--no-wait")) for r in world.jobs.requests if r.action == "stop"]
    said = (got["rc"], stops, world.job_states())
    assert said == (1, [("r1", "")], ("STOPPED",)), f"expected exit 1 after one `ray job stop`, got {said}"
    assert "stopped by --timeout 3600 s" in step(doc, "follow")["summary"], step(doc, "follow")["summary"]


@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_a_job_server_that_stops_answering_fails_train_and_keeps_the_nodes(world, capsys, monkeypatch):
    world.jobs.gone_at = 3600  # e.g. the API server unreachable from here for good
    got = cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes"])
    train = step(doc_of(capsys), "follow")
    said = (got["rc"], train["data"]["status"], world.scaled, sizes(world.eks, REF)["desiredSize"])
    assert said == (1, "UNKNOWN", [], 2), f"expected exit 1, the job UNKNOWN and the nodes kept, got {said}"
    assert re.search(r"no answer from the Ray job server for 18\d\d s", train["summary"]), train["summary"]
    assert "attach --stack us-west-2 r1" in train["summary"], train["summary"]


@pytest.mark.parametrize(
    "argv, why",
    [(["attach"], "its Ray cluster lives only for one run"), (["run", "--detach"], "no job could outlive it")],
    ids=["attach", "run-detach"],
)
def test_the_local_target_cannot_be_left_and_says_why(capsys, argv, why):
    rc = cli.main(argv)
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and why in err, f"expected exit 2 saying {why!r}, got {rc}: {err}"


def test_attach_judges_the_counters_the_detached_run_kept_in_the_run_bucket(world, capsys, monkeypatch):
    cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--detach"])
    counters = step(doc_of(capsys), "counters")
    kept = f"s3://{RUN_BUCKET}/us-west-2/runs/r1/efa_counters_before.json"
    assert kept in counters["summary"], f"expected the reading kept at {kept}: {counters['summary']}"
    cli_on(world, monkeypatch, ["attach", "--stack", "us-west-2", "r1"])
    check = step(doc_of(capsys), "check")
    witness = check["data"]["counters"]["witnesses"]
    assert (check["status"], witness["outcome"]) == ("pass", "pass"), f"attach's check: {check['summary']}"


@pytest.mark.slow  # a moto world per test: the default tier keeps the 3-hour job, detach+attach and Ctrl-C
def test_attach_without_a_kept_reading_is_no_pass(world, capsys, monkeypatch):
    cli_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes", "--detach"])
    capsys.readouterr()
    s3 = boto3.client("s3", region_name=MOTO_REGION)
    s3.delete_object(Bucket=RUN_BUCKET, Key="us-west-2/runs/r1/efa_counters_before.json")
    cli_on(world, monkeypatch, ["attach", "--stack", "us-west-2", "r1"])
    check = step(doc_of(capsys), "check")
    assert check["status"] == "fail", f"no reading before the job must not pass the counter witness: {check}"
