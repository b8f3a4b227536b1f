"""Properties of the idle guard's decision (infra/idle_guard_script.py, ``decide``) over job lists of any length,
order and mix, and the limits it enforces, on both sides.

Ray's job list (GET /api/jobs/) holds JobDetails with ``status`` one of PENDING, RUNNING, STOPPED, SUCCEEDED,
FAILED and ``end_time`` in milliseconds since the epoch
(https://docs.ray.io/en/latest/cluster/running-applications/job-submission/doc/ray.job_submission.JobStatus.html,
https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html): the strategies below
draw only such jobs.
"""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from infra.idle_guard_script import decide

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)
NOW = 1_764_950_400.0  # 2025-12-05T16:00:00Z, an arbitrary clock
DAY_S = 86_400.0

ACTIVE = ["PENDING", "RUNNING"]  # Ray's non-terminal statuses (JobStatus docs above)
DONE = ["STOPPED", "SUCCEEDED", "FAILED"]  # Ray's terminal statuses


def finished(seconds_ago: float) -> dict:
    return {"submission_id": "done", "status": "SUCCEEDED", "end_time": int((NOW - seconds_ago) * 1000)}


finished_job = st.builds(
    lambda status, ago, sid: {"submission_id": sid, "status": status, "end_time": int((NOW - ago) * 1000)},
    st.sampled_from(DONE),
    st.floats(min_value=1.0, max_value=30 * DAY_S),
    st.text("abcdef0123456789", min_size=1, max_size=8),
)
finished_jobs = st.lists(finished_job, max_size=12)
active_job = st.builds(
    lambda status, sid: {"submission_id": sid, "status": status, "end_time": None},
    st.sampled_from(ACTIVE),
    st.text("abcdef0123456789", min_size=1, max_size=8),
)
idle_minutes = st.integers(min_value=1, max_value=24 * 60)
group = st.tuples(st.integers(min_value=0, max_value=16), st.integers(min_value=0, max_value=16)).filter(
    lambda t: t[0] > t[1]
)  # (desired, idle_nodes) with nodes above the idle count: the only case where the guard may act


@PROPERTY
@given(before=finished_jobs, after=finished_jobs, active=active_job, minutes=idle_minutes, sizes=group)
def test_an_active_job_anywhere_in_the_list_keeps_the_nodes(before, after, active, minutes, sizes):
    desired, idle_nodes = sizes
    jobs = [*before, active, *after]
    d = decide(NOW, jobs, desired, "ACTIVE", NOW - 30 * DAY_S, minutes, idle_nodes)
    assert d.action == "keep", f"a {active['status']} job at position {len(before)} of {len(jobs)}: got {d}"


@PROPERTY
@given(jobs=finished_jobs, minutes=idle_minutes, sizes=group, data=st.data())
def test_a_scale_up_newer_than_the_idle_window_keeps_the_nodes(jobs, minutes, sizes, data):
    desired, idle_nodes = sizes
    changed_ago = data.draw(st.floats(min_value=0.0, max_value=minutes * 60.0), label="changed_ago")
    assume(changed_ago < minutes * 60.0)
    d = decide(NOW, jobs, desired, "ACTIVE", NOW - changed_ago, minutes, idle_nodes)
    assert d.action == "keep", f"group changed {changed_ago:.0f} s ago, window {minutes} min: got {d}"


@PROPERTY
@given(jobs=finished_jobs, minutes=idle_minutes, sizes=group, data=st.data())
def test_a_job_that_ended_inside_the_window_keeps_the_nodes_wherever_it_is_listed(jobs, minutes, sizes, data):
    desired, idle_nodes = sizes
    ago = data.draw(st.floats(min_value=1.0, max_value=minutes * 60.0 - 1.0), label="recent_end_ago")
    at = data.draw(st.integers(min_value=0, max_value=len(jobs)), label="position")
    listed = [*jobs[:at], finished(ago), *jobs[at:]]
    d = decide(NOW, listed, desired, "ACTIVE", NOW - 30 * DAY_S, minutes, idle_nodes)
    assert d.action == "keep", f"a job ended {ago:.0f} s ago at position {at} of {len(listed)}: got {d}"


@PROPERTY
@given(
    jobs=st.one_of(st.none(), st.lists(st.one_of(active_job, finished_job), max_size=12)),
    desired=st.integers(min_value=0, max_value=16),
    idle_nodes=st.integers(min_value=0, max_value=16),
    status=st.sampled_from(["ACTIVE", "UPDATING", "CREATING", "DEGRADED", "DELETING"]),
    changed_ago=st.floats(min_value=0.0, max_value=30 * DAY_S),
    minutes=st.integers(min_value=-5, max_value=24 * 60),
)
def test_a_scale_down_only_ever_lowers_the_node_count(jobs, desired, idle_nodes, status, changed_ago, minutes):
    d = decide(NOW, jobs, desired, status, NOW - changed_ago, minutes, idle_nodes)
    if d.action == "scale-down":
        assert d.target < d.desired == desired, f"a scale-down from {desired} to {d.target}: {d}"
        assert d.target == idle_nodes, f"a scale-down to {d.target}, not the stack's {idle_nodes}: {d}"


@PROPERTY
@given(desired=st.integers(min_value=0, max_value=16), idle_nodes=st.integers(min_value=0, max_value=16))
def test_a_job_api_that_cannot_be_read_never_scales_down(desired, idle_nodes):
    d = decide(NOW, None, desired, "ACTIVE", NOW - 30 * DAY_S, 30, idle_nodes)
    assert d.action != "scale-down", f"Ray's job list unreadable, {desired} nodes, idle {idle_nodes}: got {d}"


# ---- both sides of each limit; the numbers are the stack's, written here (Pulumi.yaml: gpuIdleMinutes) ----
IDLE_MINUTES = 30  # an example window of the stack key gpuIdleMinutes
WINDOW_S = 30 * 60  # the same window in seconds: decide compares minutes, Ray's end_time is in ms


def test_a_group_idle_for_exactly_the_window_scales_down():
    d = decide(NOW, [finished(WINDOW_S)], 2, "ACTIVE", NOW - WINDOW_S, IDLE_MINUTES, 0)
    assert d.action == "scale-down", f"idle exactly {IDLE_MINUTES} min (the limit is reached): got {d}"


def test_a_group_idle_one_second_short_of_the_window_is_kept():
    d = decide(NOW, [finished(WINDOW_S - 1)], 2, "ACTIVE", NOW - 2 * WINDOW_S, IDLE_MINUTES, 0)
    assert d.action == "keep", f"the last job ended {WINDOW_S - 1} s ago, window {WINDOW_S} s: got {d}"


def test_end_time_is_read_in_milliseconds_not_seconds():
    # a job that ended 10 minutes ago: read as seconds, its end_time (ms) would be ~55,000 years ahead
    d = decide(NOW, [finished(10 * 60)], 2, "ACTIVE", NOW - 2 * WINDOW_S, IDLE_MINUTES, 0)
    assert d.action == "keep" and "10 of 30 minutes" in d.reason, f"expected kept at 10 of 30 minutes, got {d}"


def test_a_group_already_at_the_idle_count_is_left_alone():
    d = decide(NOW, [], 1, "ACTIVE", NOW - 2 * WINDOW_S, IDLE_MINUTES, 1)
    assert d.action == "nothing", f"1 node, the stack keeps 1: got {d}"


def test_a_group_one_node_above_the_idle_count_scales_down():
    d = decide(NOW, [], 2, "ACTIVE", NOW - 2 * WINDOW_S, IDLE_MINUTES, 1)
    assert (d.action, d.target) == ("scale-down", 1), f"2 nodes, the stack keeps 1: got {d}"


def test_one_idle_minute_is_a_working_guard_and_zero_turns_it_off():
    on = decide(NOW, [], 2, "ACTIVE", NOW - 2 * 60, 1, 0)
    off = decide(NOW, [], 2, "ACTIVE", NOW - 2 * 60, 0, 0)
    assert (on.action, off.action) == ("scale-down", "nothing"), f"1 minute: {on}; 0 minutes: {off}"


# ---- which field of EKS's answer counts as the group's last change (run_once) ---------------------------------
class _Eks:
    """EKS's DescribeNodegroup answer (https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html:
    createdAt, modifiedAt as timestamps, scalingConfig.desiredSize, status), and the scale-down calls made."""

    def __init__(self, created_ago_s: float, modified_ago_s: float | None):
        from datetime import UTC, datetime

        def at(ago: float) -> datetime:
            return datetime.fromtimestamp(NOW - ago, UTC)

        self.group = {"createdAt": at(created_ago_s), "status": "ACTIVE", "scalingConfig": {"desiredSize": 2}}
        if modified_ago_s is not None:
            self.group["modifiedAt"] = at(modified_ago_s)
        self.updates: list[dict] = []

    def describe_nodegroup(self, **kw):
        return {"nodegroup": self.group}

    def update_nodegroup_config(self, **kw):
        self.updates.append(kw)


class _Kube:
    """The guard's Kubernetes side: events and the record go nowhere, and no `run` holds a lease."""

    def event(self, *a):
        pass

    def lease(self, name):
        return None

    def record(self, *a):
        pass


ENV = {
    "CLUSTER_NAME": "ray-efa-eks",
    "NODEGROUP_NAME": "gpu-ng",
    "IDLE_MINUTES": "30",
    "IDLE_NODES": "0",
    "RAY_JOBS_URL": "http://ray-head:8265/api/jobs/",
    "RECORD_NAME": "idle-guard-record",
}


def _updates(eks: _Eks) -> list[dict]:
    from infra.idle_guard_script import run_once

    rc = run_once(ENV, eks, _Kube(), None, jobs_of=lambda url: [], clock=lambda: NOW)
    assert rc == 0, "the guard's run failed, so its decision was never made"
    return eks.updates


def test_a_scale_up_minutes_ago_on_a_group_created_long_ago_keeps_the_nodes():
    # `run` scaled the group up 5 minutes ago (modifiedAt); it was created 30 days ago (createdAt)
    assert _updates(_Eks(created_ago_s=30 * DAY_S, modified_ago_s=5 * 60)) == [], "scaled down a fresh scale-up"


def test_a_group_never_modified_counts_from_its_creation():
    got = _updates(_Eks(created_ago_s=2 * WINDOW_S, modified_ago_s=None))
    assert got == [{"clusterName": "ray-efa-eks", "nodegroupName": "gpu-ng", "scalingConfig": {"desiredSize": 0}}], got
