"""The phases of a start, derived from recorded-shape API objects.

Shapes: a Node's ``Ready`` condition and a Pod's ``containerStatuses[].state.running.startedAt`` as the core v1 API
serves them (kubernetes/api core/v1 types.go, NodeCondition and ContainerStateRunning); the ``Pulled`` event messages
are the kubelet's (pkg/kubelet/images/image_manager.go, EnsureImageExists: "Successfully pulled image %q in %v (%v
including waiting). Image size: %v bytes." since 1.30, without the size before; "Container image %q already present
on machine" for a cached image). The times below are one invented cold start, consistent with itself: the node
registers, turns Ready 50 s later, the pod pulls 13 GB for 3m12.5s, starts 4 s after the pull, and the first step
comes 95 s after the last Ray container starts.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from automation.pipeline import PipelineResult
from automation.run_report import RunReport
from automation.start_phases import go_duration_s, parse_pulled, start_phases

IMAGE = "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1"


def node(name, created, ready):
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready}]},
    }


def pod(name, started):
    running = {"running": {"startedAt": started}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {"metadata": {"name": name}, "status": {"containerStatuses": [{"name": "ray-worker", "state": running}]}}


def pulled(pod_name, message, at):
    return {
        "reason": "Pulled",
        "message": message,
        "lastTimestamp": at,
        "involvedObject": {"kind": "Pod", "name": pod_name},
    }


COLD_MSG = f'Successfully pulled image "{IMAGE}" in 3m12.5s (3m14.1s including waiting). Image size: 13000000000 bytes.'
NODES = [node("ip-10-0-1-5", "2026-12-06T05:00:00Z", "2026-12-06T05:00:50Z")]
PODS = [pod("ray-gpu-workers-abc", "2026-12-06T05:04:30Z"), pod("ray-head-xyz", "2026-12-06T04:50:00Z")]
EVENTS = [pulled("ray-gpu-workers-abc", COLD_MSG, "2026-12-06T05:04:26Z")]
FIRST_STEP = datetime(2026, 12, 6, 5, 6, 5, tzinfo=UTC)


@pytest.mark.parametrize(("text", "seconds"), [("3m12.5s", 192.5), ("850ms", 0.85), ("1h0m2s", 3602.0), ("0s", 0.0)])
def test_go_durations_read_as_seconds(text, seconds):
    assert go_duration_s(text) == pytest.approx(seconds), text


def test_a_string_that_is_no_go_duration_is_refused():
    with pytest.raises(ValueError):
        go_duration_s("3 minutes")


def test_pulled_event_gives_the_pull_time_and_image_bytes():
    pull = parse_pulled(EVENTS[0])
    assert (pull.seconds, pull.image_bytes) == (192.5, 13_000_000_000), pull


def test_pre_1_30_pulled_message_without_size_still_gives_the_time():
    pull = parse_pulled(
        pulled("p", f'Successfully pulled image "{IMAGE}" in 41.2s (41.2s including waiting)', "2026-12-06T05:00:00Z")
    )
    assert (pull.seconds, pull.image_bytes) == (41.2, None), pull


def test_an_image_already_on_the_node_is_a_pull_of_zero_seconds():
    pull = parse_pulled(pulled("p", f'Container image "{IMAGE}" already present on machine', "2026-12-06T05:00:00Z"))
    assert pull.seconds == 0.0, pull


def test_cold_start_phases_come_from_node_event_pod_and_first_step():
    got = start_phases(NODES, PODS, EVENTS, FIRST_STEP).to_dict()
    want = {"node_join_s": 50.0, "image_pull_s": 192.5, "pod_start_s": 4.0, "first_step_s": 95.0}
    assert {k: got[k] for k in want} == want, got


def test_pulls_of_pods_outside_the_ray_cluster_are_ignored():
    other = pulled("idle-guard-123", COLD_MSG.replace("3m12.5s", "9m0s"), "2026-12-06T05:04:26Z")
    got = start_phases(NODES, PODS, [*EVENTS, other], FIRST_STEP)
    assert got.image_pull_s == 192.5, got


def test_a_start_without_records_reports_no_phase():
    got = start_phases([], [pod("ray-gpu-workers-abc", None)], [], None)
    assert got.text() == "n/a", got


def test_report_metrics_carry_each_start_phase():
    start = start_phases(NODES, PODS, EVENTS, FIRST_STEP).to_dict()
    metrics = RunReport("aws", "us-west-2", PipelineResult(steps=()), start=start).metrics()
    got = {k: metrics.get(f"start_{k}") for k in ("node_join_s", "image_pull_s", "pod_start_s", "first_step_s")}
    assert got == {"node_join_s": 50.0, "image_pull_s": 192.5, "pod_start_s": 4.0, "first_step_s": 95.0}, metrics
