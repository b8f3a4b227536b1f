"""The idle guard's decision (infra/idle_guard_script.py, ``decide``): pure, one reason to act or not each."""

from __future__ import annotations

import pytest

from infra.idle_guard_script import decide

NOW = 1_764_950_400.0  # 2025-12-05T16:00:00Z, an arbitrary clock
MIN = 60.0


def job(status: str, end_min_ago: float | None = None) -> dict:
    """A job as Ray's GET /api/jobs/ lists it (JobDetails: status, end_time in ms)."""
    end = None if end_min_ago is None else int((NOW - end_min_ago * MIN) * 1000)
    return {"submission_id": "r1", "status": status, "end_time": end}


def at(jobs, desired=2, status="ACTIVE", changed_min_ago=120.0, idle_minutes=30, idle_nodes=0, lease=None):
    return decide(NOW, jobs, desired, status, NOW - changed_min_ago * MIN, idle_minutes, idle_nodes, lease)


def lease(minutes_left: float) -> dict:
    """The lease `run` writes (automation/scaling.py Lease) with ``minutes_left`` before it expires."""
    return {"run": "r9", "what": "starting", "until": NOW + minutes_left * MIN}


@pytest.mark.parametrize("status", ["RUNNING", "PENDING"])
def test_a_running_or_pending_job_keeps_the_nodes(status):
    d = at([job("SUCCEEDED", 90), job(status)])
    assert d.action == "keep" and status in d.reason, d


def test_idle_past_the_limit_scales_down_to_the_idle_count():
    d = at([job("SUCCEEDED", 31)], idle_nodes=1)
    assert (d.action, d.desired, d.target) == ("scale-down", 2, 1), d


def test_idle_within_the_limit_keeps_the_nodes():
    d = at([job("FAILED", 29)])
    assert d.action == "keep" and "29 of 30 minutes" in d.reason, d


def test_a_recent_scale_up_counts_as_activity_before_any_job_runs():
    d = at([], changed_min_ago=5)
    assert d.action == "keep", f"a run that just scaled the nodes up must get time to submit its job: {d}"


def test_no_job_ever_and_an_old_node_group_scales_down():
    assert at([], changed_min_ago=45).action == "scale-down"


def test_already_at_the_idle_count_does_nothing_so_it_scales_down_once():
    d = at([job("SUCCEEDED", 300)], desired=0)
    assert d.action == "nothing", d


def test_an_unreadable_job_api_keeps_the_nodes():
    assert at(None).action == "keep"


def test_a_node_group_that_is_updating_waits():
    assert at([], status="UPDATING").action == "wait"


def test_zero_minutes_turns_the_guard_off():
    assert at([], idle_minutes=0).action == "nothing"


def test_a_held_lease_keeps_an_idle_node_group_and_names_the_run():
    d = at([], changed_min_ago=300, lease=lease(5))
    assert d.action == "keep" and "run r9 starting" in d.reason, d


def test_an_expired_lease_is_ignored():
    assert at([], changed_min_ago=300, lease=lease(-1)).action == "scale-down"


def test_a_scale_down_past_an_expired_lease_names_the_run_that_left_it():
    d = at([], changed_min_ago=300, lease=lease(-1))
    assert "run r9's lease expired" in d.reason, d


def test_a_lease_without_a_readable_until_is_ignored():
    assert at([], changed_min_ago=300, lease={"run": "r9", "until": "soon"}).action == "scale-down"
