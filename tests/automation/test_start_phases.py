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

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from automation.pipeline import PipelineResult
from automation.run_outcome import RunReport
from automation.start_phases import StartPhases, go_duration_s, observe, parse_pulled, start_phases
from infra.names import GPU_NODE_SELECTOR

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


# ---- The start's phases from event lists as the API returns them: several Pulled events per pod, in any order,
# repeated,
# some without a timestamp (issue 48); and each record's shape read field by field.
#
# Shapes, as in test_start_phases.py: core/v1 Event (``lastTimestamp``, ``eventTime`` for events.k8s.io-created ones,
# ``firstTimestamp``; kubernetes/api core/v1 types.go, Event), NodeCondition, ContainerStateRunning, and the kubelet's
# Pulled messages (pkg/kubelet/images/image_manager.go, EnsureImageExists). KubeRay 1.5.2 gives every worker an init
# container, wait-gcs-ready, with the Ray container's image (ray-project/kuberay ray-operator/controllers/ray/common/
# pod.go at v1.5.2), so a worker's cold start has two Pulled events: the init container's pull, then the Ray
# container's "already present".

T0 = datetime(2026, 12, 6, 5, 0, 0, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cold(seconds: int, size: int | None = 13_000_000_000) -> str:
    tail = f". Image size: {size} bytes." if size is not None else ""
    return f'Successfully pulled image "{IMAGE}" in {seconds}s ({seconds}s including waiting){tail}'


PRESENT = f'Container image "{IMAGE}" already present on machine'


def pulled_event(pod_name: str, message: str, at: str | None, field: str = "lastTimestamp", kind: str = "Pod") -> dict:
    event = {"reason": "Pulled", "message": message, "involvedObject": {"kind": kind, "name": pod_name}}
    if at is not None:
        event[field] = at
    return event


def pod_of(name: str, started: str | None, *, waiting_first: bool = False) -> dict:
    statuses = [{"name": "ray-worker", "state": {"running": {"startedAt": started}} if started else {}}]
    if waiting_first:
        statuses.insert(0, {"name": "sidecar", "state": {"waiting": {"reason": "ContainerCreating"}}})
    return {"metadata": {"name": name}, "status": {"containerStatuses": statuses}}


def node_of(created: str, conditions: list[dict]) -> dict:
    return {"metadata": {"name": "n", "creationTimestamp": created}, "status": {"conditions": conditions}}


def ready(at: str, status: str = "True", kind: str = "Ready") -> dict:
    return {"type": kind, "status": status, "lastTransitionTime": at}


# ---- a pod's several Pulled events ----------------------------------------------------------------------------
@pytest.mark.parametrize("order", [1, -1], ids=["init-first", "init-last"])
def test_the_init_containers_pull_counts_though_the_ray_container_found_the_image_present(order):
    events = [pulled_event("w", cold(190), stamp(200)), pulled_event("w", PRESENT, stamp(260))][::order]
    got = start_phases([], [pod_of("w", stamp(264))], events, None)
    assert (got.image_pull_s, got.image_bytes, got.pod_start_s) == (190.0, 13_000_000_000, 4.0), got


def test_a_pull_without_a_timestamp_keeps_the_pods_timed_pull_for_the_pod_start():
    events = [pulled_event("w", cold(190), stamp(200)), pulled_event("w", PRESENT, None)]
    got = start_phases([], [pod_of("w", stamp(210))], events, None)
    assert (got.image_pull_s, got.pod_start_s) == (190.0, 10.0), got


def test_a_pull_of_an_unstated_size_keeps_the_stated_one():
    events = [pulled_event("w", cold(190), stamp(200)), pulled_event("w", cold(5, size=None), stamp(205))]
    got = start_phases([], [pod_of("w", stamp(210))], events, None)
    assert (got.image_pull_s, got.image_bytes, got.pod_start_s) == (190.0, 13_000_000_000, 5.0), got


# Per pod: the Pulled events (seconds, size or None, time offset or None) it has, and its start offset or None.
_pull = st.tuples(
    st.integers(0, 600), st.one_of(st.none(), st.integers(1, 10**11)), st.one_of(st.none(), st.integers(0, 900))
)
_pods = st.dictionaries(
    st.sampled_from(["w-a", "w-b", "w-c", "head"]),
    st.tuples(st.lists(_pull, max_size=3), st.one_of(st.none(), st.integers(0, 1000))),
    max_size=4,
)


def _events(layout: dict) -> list[dict]:
    return [
        pulled_event(name, cold(s, size) if s else PRESENT, None if at is None else stamp(at))
        for name, (pulls, _) in layout.items()
        for s, size, at in pulls
    ]


@settings(max_examples=150, deadline=None)
@given(
    layout=_pods, dupes=st.lists(st.integers(0, 20), max_size=6), seed=st.integers(0, 2**16), step=st.integers(0, 2000)
)
def test_phases_do_not_depend_on_event_order_or_repeats_and_match_each_pods_records(layout, dupes, seed, step):
    events = _events(layout)
    noise = [pulled_event("idle-guard-1", cold(999), stamp(1)), pulled_event("w-a", cold(998), stamp(1), kind="Node")]
    listed = events + [events[i % len(events)] for i in dupes if events] + noise
    random.Random(seed).shuffle(listed)
    pods = [pod_of(name, None if start is None else stamp(start)) for name, (_, start) in layout.items()]
    got = start_phases([], pods, listed, T0 + timedelta(seconds=step))

    pulls = {n: p for n, (p, _) in layout.items() if p}
    sizes = [size for p in pulls.values() for s, size, _ in p if s and size is not None]
    pod_starts = [
        max(0.0, float(start - max(at for *_, at in pulls[n] if at is not None)))
        for n, (_, start) in layout.items()
        if start is not None and n in pulls and any(at is not None for *_, at in pulls[n])
    ]
    starts = [start for _, start in layout.values() if start is not None]
    want = StartPhases(
        image_pull_s=max((float(s) for p in pulls.values() for s, *_ in p), default=None),
        pod_start_s=max(pod_starts, default=None),
        first_step_s=float(step - max(starts)) if starts else None,
        image_bytes=max(sizes, default=None),
    )
    assert got == want, (layout, listed)


# ---- one record at a time -------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["lastTimestamp", "eventTime", "firstTimestamp"])
def test_a_pulled_event_is_timed_by_whichever_timestamp_it_carries(field):
    got = parse_pulled(pulled_event("w", PRESENT, "2026-12-06T05:01:02.250000Z", field))
    assert got.at == datetime(2026, 12, 6, 5, 1, 2, 250000, tzinfo=UTC), got


def test_the_last_timestamp_wins_over_the_first_of_a_repeated_event():
    event = pulled_event("w", PRESENT, stamp(50)) | {"firstTimestamp": stamp(10), "eventTime": stamp(20)}
    assert parse_pulled(event).at == T0 + timedelta(seconds=50)


def test_a_pulled_event_without_any_timestamp_has_no_time():
    assert parse_pulled(pulled_event("w", cold(3), None)).at is None


@pytest.mark.parametrize(
    "event",
    [
        {"reason": "Pulling", "message": cold(3)},
        {"reason": "Pulled", "message": f'Pulling image "{IMAGE}"'},
        {"reason": "Pulled"},
        {"message": cold(3)},
    ],
    ids=["other-reason", "other-message", "no-message", "no-reason"],
)
def test_events_that_state_no_pull_are_not_pulls(event):
    assert parse_pulled(event) is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1m", 60.0), ("12.345s", 12.345), ("1.5h", 5400.0), ("5µs", 5e-6), ("7us", 7e-6), ("9ns", 9e-9)],
)
def test_every_go_duration_unit_reads_as_its_seconds(text, seconds):
    assert go_duration_s(text) == pytest.approx(seconds, rel=1e-12), text


@pytest.mark.parametrize("text", ["", "3m12.5sX", "x3s", "3m 2s", "s"])
def test_a_go_duration_with_anything_around_it_is_refused(text):
    with pytest.raises(ValueError, match="not a Go duration"):
        go_duration_s(text)


def test_a_microtime_keeps_its_fraction_and_zone():
    event = pulled_event("p", f'Container image "{IMAGE}" already present on machine', "2026-12-06T05:01:02.123456Z")
    assert parse_pulled(event).at == datetime(2026, 12, 6, 5, 1, 2, 123456, tzinfo=UTC)


def test_a_node_joins_at_its_ready_true_condition_only():
    conditions = [ready(stamp(20), kind="MemoryPressure"), ready(stamp(30), status="False"), ready(stamp(50))]
    got = start_phases([node_of(stamp(0), conditions)], [], [], None)
    assert got.node_join_s == 50.0, got


def test_a_node_not_ready_yet_gives_no_join_and_the_slowest_ready_node_sets_it():
    nodes = [
        node_of(stamp(0), [ready(stamp(30), status="False")]),
        node_of(stamp(0), [ready(stamp(40))]),
        node_of(stamp(5), [ready(stamp(80))]),
    ]
    assert start_phases(nodes, [], [], None).node_join_s == 75.0
    assert start_phases(nodes[:1], [], [], None).node_join_s is None


def test_a_pod_starts_at_its_running_container_past_a_waiting_one():
    got = start_phases(
        [],
        [pod_of("w", stamp(100), waiting_first=True)],
        [pulled_event("w", cold(1), stamp(90))],
        T0 + timedelta(seconds=130),
    )
    assert (got.pod_start_s, got.first_step_s) == (10.0, 30.0), got


def test_a_running_container_without_a_start_time_has_not_started():
    p = {"metadata": {"name": "w"}, "status": {"containerStatuses": [{"state": {"running": {}}}]}}
    got = start_phases([], [p], [pulled_event("w", cold(1), stamp(90))], T0 + timedelta(seconds=130))
    assert (got.pod_start_s, got.first_step_s) == (None, None), got


def test_a_pull_timed_after_the_container_started_counts_as_no_wait():
    got = start_phases([], [pod_of("w", stamp(100))], [pulled_event("w", PRESENT, stamp(103))], None)
    assert got.pod_start_s == 0.0, got


def test_the_text_names_each_known_phase_in_order_in_whole_seconds():
    got = StartPhases(node_join_s=50.4, image_pull_s=None, pod_start_s=4.0, first_step_s=95.6, image_bytes=7)
    assert got.text() == "node join 50 s, pod start 4 s, first step 96 s"
    full = StartPhases(1.0, 2.0, 3.0, 4.0)
    assert full.text() == "node join 1 s, image pull 2 s, pod start 3 s, first step 4 s"


def test_the_dict_carries_every_phase_and_the_image_bytes():
    got = StartPhases(1.0, 2.0, 3.0, 4.0, 5).to_dict()
    assert got == {"node_join_s": 1.0, "image_pull_s": 2.0, "pod_start_s": 3.0, "first_step_s": 4.0, "image_bytes": 5}


class _Kube:
    """A stand-in for automation.kube.KubeApi's three list calls (its signatures), recording what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]:
        self.asked.append(("pods", namespace, label_selector))
        return [pod_of("w", stamp(100))]

    def list_nodes(self, label_selector: str = "") -> list[dict]:
        self.asked.append(("nodes", label_selector))
        return [node_of(stamp(0), [ready(stamp(50))])]

    def list_events(self, namespace: str) -> list[dict]:
        self.asked.append(("events", namespace))
        return [pulled_event("w", cold(30), stamp(96))]


def test_observe_reads_the_clusters_pods_the_gpu_nodes_and_the_namespaces_events() -> None:
    kube = _Kube()
    got = observe(kube, "ray", "rc", T0 + timedelta(seconds=160))  # type: ignore[arg-type]
    assert got == StartPhases(50.0, 30.0, 4.0, 60.0, 13_000_000_000), got
    assert sorted(kube.asked) == [("events", "ray"), ("nodes", GPU_NODE_SELECTOR), ("pods", "ray", "ray.io/cluster=rc")]


def test_objects_the_api_returns_before_their_status_is_filled_have_no_phase():
    pods = [{"metadata": {"name": "w"}}, {"metadata": {"name": "v"}, "status": {"phase": "Pending"}}]
    pods.append({"metadata": {"name": "u"}, "status": {"containerStatuses": [{"name": "ray-worker"}]}})
    nodes = [{"metadata": {"name": "n", "creationTimestamp": stamp(0)}}, node_of(stamp(0), [])]
    nodes.append({"metadata": {"name": "m", "creationTimestamp": stamp(0)}, "status": {}})
    events = [{"reason": "Pulled", "message": PRESENT, "lastTimestamp": stamp(1)}, pulled_event("w", cold(3), stamp(2))]
    got = start_phases(nodes, pods, events, T0)
    assert got == StartPhases(image_pull_s=3.0, image_bytes=13_000_000_000), got
