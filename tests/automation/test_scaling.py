"""The driver's scaling of the GPU node group (automation/scaling.py), in process: the size bounds, the waits on a
busy group with their backoff and limits, the nodes' Ready wait, the Ray job check before a scale-down, the idle
guard's lease, and the lines `run` and `status` print.

The EKS stand-in answers as EKS's API reference says: DescribeNodegroup gives ``status`` (CREATING | ACTIVE |
UPDATING | DELETING | CREATE_FAILED | DELETE_FAILED | DEGRADED) and ``scalingConfig`` (minSize, maxSize,
desiredSize) (https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html); UpdateNodegroupConfig on a
busy group answers ResourceInUseException
(https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateNodegroupConfig.html#API_UpdateNodegroupConfig_Errors).
The waits' numbers are written here from the module's documented policy (a 10 s poll, 20-minute bounds, backoff
5, 10, 20, 40, 60 s with the last repeating, a lease of 20 minutes renewed at most once a minute).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from _cloud_fakes import START, FakeClock  # a clock that moves only when slept on
from botocore.exceptions import ClientError, EndpointConnectionError

from automation.aws_clients import Paginator
from automation.errors import DriverError
from automation.kube import ExecResult
from automation.scaling import (
    EksWait,
    Lease,
    NodeGroupRef,
    Scaled,
    active_job,
    after_run,
    guard_record,
    head_jobs,
    job_keeps_nodes,
    live_desired_size,
    nodegroup_ref,
    now_running,
    ready_after,
    ready_count,
    scale_up,
    scale_up_for_run,
    set_desired,
    wait_ready,
)

POLL_S = 10.0
WAIT_S = 1200.0  # both bounds: the busy group and the nodes' Ready
LEASE_S = 20 * 60.0
REF = NodeGroupRef("ray-efa-eks", "gpu-ng")


def refused(code: str, op: str = "UpdateNodegroupConfig") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, op)


class Eks:
    """A node group: ``statuses`` are described in turn (the last repeats), ``refusals`` ResourceInUseExceptions
    come before an update is taken, and a taken size is reported after ``lag`` more describes."""

    def __init__(self, desired=0, lo=0, hi=4, statuses=("ACTIVE",), refusals=0, lag=0, error=None):
        self.desired, self.lo, self.hi = desired, lo, hi
        self.statuses, self.refusals, self.lag, self.error = list(statuses), refusals, lag, error
        self.updates: list[dict] = []

    def describe_nodegroup(self, clusterName, nodegroupName):  # noqa: N803 - boto3's names
        assert (clusterName, nodegroupName) == ("ray-efa-eks", "gpu-ng"), (clusterName, nodegroupName)
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        reported = self.desired
        if self.updates and self.lag > 0:
            self.lag -= 1
            reported = self.before
        group = {"scalingConfig": {"desiredSize": reported, "minSize": self.lo, "maxSize": self.hi}}
        if status is not None:
            group["status"] = status
        return {"nodegroup": group}

    def update_nodegroup_config(self, **kw):
        if self.error:
            raise self.error
        if self.refusals:
            self.refusals -= 1
            raise refused("ResourceInUseException")
        self.updates.append(kw)
        self.before, self.desired = self.desired, kw["scalingConfig"]["desiredSize"]

    # The rest of the driver's EKS protocol (automation/aws_clients.py), which scaling never calls.
    def list_nodegroups(self, *, clusterName: str) -> dict:  # noqa: N803
        raise AssertionError(f"scaling listed the node groups of {clusterName}")

    def delete_nodegroup(self, *, clusterName: str, nodegroupName: str) -> dict:  # noqa: N803
        raise AssertionError(f"scaling deleted the node group {nodegroupName}")

    def describe_cluster_versions(self, *, clusterVersions: list[str], includeAll: bool) -> dict:  # noqa: N803
        raise AssertionError(f"scaling asked for the cluster versions {clusterVersions}")

    def get_paginator(self, operation_name: str) -> Paginator:
        raise AssertionError(f"scaling asked for the {operation_name} paginator")


def scale(eks: Eks, desired: int, timeout_s: float = WAIT_S):
    clock = FakeClock()
    said: list[str] = []
    got = set_desired(eks, REF, desired, said.append, clock.clock(), timeout_s)
    return got, clock, said


# ---- the stack's node group ------------------------------------------------------------------------------------
@pytest.mark.parametrize("outputs", [{"cluster_name": "c"}, {"nodegroup_name": "n"}, {}])
def test_a_stack_without_a_cluster_or_node_group_is_refused_with_up(outputs):
    with pytest.raises(DriverError) as e:
        nodegroup_ref(outputs, "us-west-2")
    assert e.value.exit_code == 2 and "`python -m automation up --stack us-west-2`" in str(e.value), e.value


def test_the_node_group_ref_names_the_outputs_cluster_and_node_group():
    got = nodegroup_ref({"cluster_name": "c", "nodegroup_name": "n", "region": "us-east-2"}, "s")
    assert got == NodeGroupRef("c", "n"), got


# ---- set_desired: bounds, waits, refusals ----------------------------------------------------------------------
@pytest.mark.parametrize("desired", [0, 4])
def test_a_size_on_either_end_of_the_groups_range_is_taken(desired):
    got, _, _ = scale(Eks(desired=2, lo=0, hi=4), desired)
    assert (got.before, got.after) == (2, desired), got


@pytest.mark.parametrize("desired", [5, 0])
def test_a_size_just_outside_the_groups_range_is_refused_naming_the_range(desired):
    eks = Eks(desired=2, lo=1, hi=4)
    with pytest.raises(DriverError) as e:
        scale(eks, desired)
    assert e.value.exit_code == 2 and eks.updates == [], (e.value, eks.updates)
    assert str(e.value) == (
        f"--gpu-nodes {desired} is outside node group gpu-ng's 1..4: pass a count within it (the maximum is "
        "gpuNodeCount; `up` applies a new one)"
    ), e.value


def test_a_group_already_at_the_size_is_not_updated():
    eks = Eks(desired=2, statuses=("UPDATING",))
    got, clock, _ = scale(eks, 2)
    assert (eks.updates, clock.slept, got) == ([], [], Scaled("gpu-ng", 2, 2)), (eks.updates, clock.slept, got)


def test_an_update_names_the_cluster_group_and_size():
    eks = Eks(desired=0)
    got, clock, _ = scale(eks, 2)
    assert eks.updates == [
        {"clusterName": "ray-efa-eks", "nodegroupName": "gpu-ng", "scalingConfig": {"desiredSize": 2}}
    ]
    assert (got.before, got.after, got.waited, got.waited_for, clock.slept) == (0, 2, 0.0, "", []), got


def test_a_busy_group_is_waited_out_every_ten_seconds_and_the_wait_is_told():
    eks = Eks(desired=0, statuses=("UPDATING", "UPDATING", "ACTIVE"))
    got, clock, said = scale(eks, 2)
    assert clock.slept == [POLL_S, POLL_S], clock.slept
    assert said == [
        "node group gpu-ng is UPDATING: waiting to scale it (0 s of 1200)",
        "node group gpu-ng is UPDATING: waiting to scale it (10 s of 1200)",
    ], said
    assert (got.waited, got.waited_for) == (20.0, "UPDATING"), got
    assert "(waited 20 s for the node group to leave UPDATING)" in got.text(), got.text()


def test_a_group_described_without_a_status_is_taken_as_active():
    got, clock, _ = scale(Eks(desired=0, statuses=(None,)), 2)
    assert (got.after, clock.slept) == (2, []), (got, clock.slept)


@pytest.mark.parametrize("status", ["DELETING", "CREATE_FAILED", "DELETE_FAILED"])
def test_a_group_being_deleted_or_failed_is_refused_at_once(status):
    eks = Eks(desired=0, statuses=(status,))
    with pytest.raises(DriverError, match=f"node group gpu-ng is {status}: EKS takes no size change") as e:
        scale(eks, 2)
    assert "aws eks describe-nodegroup --cluster-name ray-efa-eks --nodegroup-name gpu-ng" in str(e.value)
    assert eks.updates == [], eks.updates


def test_a_group_busy_to_the_bound_is_given_up_on_naming_the_status_and_the_time():
    eks = Eks(desired=0, statuses=("CREATING",))
    with pytest.raises(DriverError) as e:
        scale(eks, 2)
    assert "node group gpu-ng is still CREATING after 1200 s" in str(e.value), e.value
    assert eks.updates == [], eks.updates


def test_a_group_that_turns_active_at_the_bound_is_scaled():
    # looks at 0, 10, ..., 1190 s find it busy; the look at 1200 s finds it ACTIVE, which no bound refuses
    eks = Eks(desired=0, statuses=("UPDATING",) * 120 + ("ACTIVE",))
    got, clock, _ = scale(eks, 2)
    assert (got.after, len(clock.slept)) == (2, 120), (got, len(clock.slept))


def test_refusals_back_off_5_10_20_40_60_then_60_again():
    eks = Eks(desired=0, refusals=7)
    got, clock, said = scale(eks, 2)
    assert clock.slept == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, 60.0], clock.slept
    assert said[0] == "EKS answered ResourceInUseException for node group gpu-ng: again in 5 s", said
    assert (got.waited_for, got.waited) == ("ResourceInUseException", 255.0), got


def test_refusals_past_the_bound_are_raised_as_a_refusal():
    eks = Eks(desired=0, refusals=100)
    with pytest.raises(DriverError, match="EKS refused to scale node group gpu-ng to 2: ResourceInUseException"):
        scale(eks, 2, timeout_s=100.0)


def test_a_refusal_that_comes_exactly_at_the_bound_is_raised():
    # refused at 0, 5, 15, 35 and 75 s (backoff 5, 10, 20, 40): the fifth comes as the 75 s bound is reached
    eks = Eks(desired=0, refusals=5)
    with pytest.raises(DriverError, match="ResourceInUseException"):
        scale(eks, 2, timeout_s=75.0)


def test_a_group_another_hand_scaled_while_it_was_busy_is_not_updated_again():
    class ScaledMeanwhile(Eks):
        def describe_nodegroup(self, **kw):
            got = super().describe_nodegroup(**kw)
            self.desired = 2  # after the first look, someone else's update to 2 lands
            return got

    eks = ScaledMeanwhile(desired=0, statuses=("UPDATING", "ACTIVE"))
    got, clock, _ = scale(eks, 2)
    assert (eks.updates, got.before, got.after, got.waited_for) == ([], 2, 2, "UPDATING"), (eks.updates, got)


def test_another_refusal_is_not_retried_and_names_its_code():
    eks = Eks(desired=0, error=refused("AccessDeniedException"))
    with pytest.raises(DriverError, match="EKS refused to scale node group gpu-ng to 2: AccessDeniedException"):
        scale(eks, 2)


def test_an_unreachable_eks_is_said_so():
    eks = Eks(desired=0, error=EndpointConnectionError(endpoint_url="https://eks.us-west-2.amazonaws.com"))
    with pytest.raises(DriverError, match="EKS could not be reached to scale node group gpu-ng: Could not connect"):
        scale(eks, 2)


class DeletingEks(Eks):
    """A node group being deleted: DELETING for ``polls`` describes, then DescribeNodegroup's ResourceNotFoundException
    (https://docs.aws.amazon.com/eks/latest/APIReference/API_DescribeNodegroup.html#API_DescribeNodegroup_Errors)."""

    def __init__(self, polls: int):
        super().__init__(statuses=("DELETING",))
        self.polls = polls

    def describe_nodegroup(self, clusterName, nodegroupName):  # noqa: N803 - boto3's names
        if self.polls == 0:
            raise refused("ResourceNotFoundException", "DescribeNodegroup")
        self.polls -= 1
        return super().describe_nodegroup(clusterName, nodegroupName)


def test_a_node_group_being_deleted_is_waited_for_until_gone_each_poll_said():
    clock, said = FakeClock(), []
    EksWait(DeletingEks(2), REF, clock.clock(), said.append, clock.now(), WAIT_S).gone()
    assert said == [
        "node group gpu-ng is DELETING: waiting for EKS to delete it (0 s of 1200)",
        "node group gpu-ng is DELETING: waiting for EKS to delete it (10 s of 1200)",
    ], said


def test_a_node_group_not_gone_at_the_bound_names_its_status():
    clock = FakeClock()
    with pytest.raises(DriverError, match=r"^node group gpu-ng is still DELETING after 1200 s$"):
        EksWait(DeletingEks(10**6), REF, clock.clock(), lambda s: None, clock.now(), WAIT_S).gone()


def test_a_new_size_reported_late_is_waited_for():
    eks = Eks(desired=0, lag=2)
    got, clock, said = scale(eks, 2)
    assert clock.slept == [POLL_S, POLL_S], clock.slept
    assert said == [
        "waiting for EKS to report node group gpu-ng at 2, says 0 (0 s of 1200)",
        "waiting for EKS to report node group gpu-ng at 2, says 0 (10 s of 1200)",
    ], said


def test_a_new_size_never_reported_is_given_up_on_at_the_bound():
    eks = Eks(desired=0, lag=10_000)
    with pytest.raises(DriverError) as e:
        scale(eks, 2)
    assert "EKS took the new size 2 of node group gpu-ng but still reports 0 after 1200 s" in str(e.value), e.value


# ---- what a scale says -----------------------------------------------------------------------------------------
def test_a_scale_up_says_from_to_and_each_nodes_time():
    s = Scaled("gpu-ng", 0, 2, 301.4, (("ip-10-0-1-1", 290.0), ("ip-10-0-1-2", 301.4)))
    assert s.text() == (
        "GPU node group gpu-ng scaled from 0 to 2 node(s), the nodes were Ready after 301 s "
        "(ip-10-0-1-1 290 s, ip-10-0-1-2 301 s)"
    ), s.text()


def test_an_unchanged_group_says_it_was_already_there():
    assert Scaled("gpu-ng", 2, 2).text() == "GPU node group gpu-ng already at 2 node(s)"


def test_a_scale_as_json_holds_every_field():
    s = Scaled("gpu-ng", 0, 2, 30.0, (("n1", 29.0),), 12.5, "UPDATING")
    assert s.to_dict() == {
        "nodegroup": "gpu-ng",
        "before": 0,
        "after": 2,
        "seconds": 30.0,
        "per_node": {"n1": 29.0},
        "waited": 12.5,
        "waited_for": "UPDATING",
    }, s.to_dict()


# ---- the live size before `up` ---------------------------------------------------------------------------------
OUTPUTS = {"cluster_name": "ray-efa-eks", "nodegroup_name": "gpu-ng", "region": "us-west-2"}


def test_the_live_size_is_eks_desired_size():
    assert live_desired_size(Eks(desired=3), OUTPUTS, "s") == 3


def test_a_live_size_of_a_group_without_its_cluster_names_the_stack():
    with pytest.raises(DriverError, match="stack us-west-2 exports no cluster_name"):
        live_desired_size(Eks(), {"nodegroup_name": "gpu-ng"}, "us-west-2")


def test_a_stack_without_a_node_group_has_no_live_size():
    assert live_desired_size(Eks(), {"cluster_name": "c"}, "s") is None


class FailingDescribe:
    def __init__(self, error):
        self.error = error

    def describe_nodegroup(self, **kw):
        raise self.error


def test_a_node_group_eks_does_not_know_has_no_live_size():
    assert (
        live_desired_size(FailingDescribe(refused("ResourceNotFoundException", "DescribeNodegroup")), OUTPUTS, "s")
        is None
    )


@pytest.mark.parametrize(
    "error, words",
    [
        (
            refused("AccessDeniedException", "DescribeNodegroup"),
            "EKS refused to describe node group gpu-ng before `up`",
        ),
        (EndpointConnectionError(endpoint_url="https://eks"), "EKS could not be reached to read node group gpu-ng"),
    ],
)
def test_a_live_size_that_cannot_be_read_stops_up(error, words):
    with pytest.raises(DriverError, match=words):
        live_desired_size(FailingDescribe(error), OUTPUTS, "s")


# ---- the nodes -------------------------------------------------------------------------------------------------
def node(name: str, ready: str = "True", at: str = "2026-12-06T05:05:00Z", kind: str = "Ready") -> dict:
    """A Node as the API lists it: the Ready condition with its lastTransitionTime."""
    cond = {"type": kind, "status": ready, "lastTransitionTime": at}
    return {"metadata": {"name": name}, "status": {"conditions": [cond]}}


def test_only_nodes_whose_ready_condition_is_true_count():
    nodes = [node("a"), node("b", ready="False"), node("c", kind="MemoryPressure"), {"metadata": {"name": "d"}}]
    assert ready_count(nodes) == 1


def test_the_nodes_wait_returns_once_enough_are_ready_and_tells_each_poll():
    clock, said = FakeClock(), []
    answers = iter([[node("a", "False")], [node("a")], [node("a"), node("b")]])
    got = wait_ready(lambda: next(answers), 2, on_progress=said.append, clock=clock.clock())
    assert (got, clock.slept) == (20.0, [POLL_S, POLL_S]), (got, clock.slept)
    assert said == ["waiting for GPU nodes: 0 of 2 Ready after 0 s", "waiting for GPU nodes: 1 of 2 Ready after 10 s"]


def test_the_nodes_wait_gives_up_at_its_bound_with_the_count_and_where_to_look():
    clock = FakeClock()
    with pytest.raises(DriverError) as e:
        wait_ready(lambda: [node("a")], 2, clock=clock.clock())
    assert str(e.value) == (
        "1 of 2 GPU nodes Ready after 1200 s: the node group may lack capacity in its AZ; `python -m automation "
        "status --stack STACK` and `python -m automation capacity` say more"
    ), e.value


def test_more_ready_nodes_than_asked_end_the_wait():
    clock = FakeClock()
    assert wait_ready(lambda: [node("a"), node("b"), node("c")], 2, clock=clock.clock()) == 0.0


def test_each_node_ready_since_the_scale_is_timed_to_a_tenth_and_older_ones_left_out():
    started = datetime(2026, 12, 6, 4, 59, 59, 960_000, tzinfo=UTC)  # the driver's clock has sub-seconds
    nodes = [
        node("b", at="2026-12-06T05:05:00Z"),
        node("a", at="2026-12-06T05:00:00Z"),  # turned Ready at the very start: counted
        node("old", at="2026-12-06T04:59:59Z"),  # 0.04 s before the scale
        node("down", ready="False", at="2026-12-06T05:01:00Z"),
        node("unstamped", at=""),
        {"metadata": {"name": "new"}},  # a Node the kubelet has not yet reported on
        {"metadata": {"name": "new2"}, "status": {}},
    ]
    assert ready_after(nodes, started) == (("a", 0.0), ("b", 300.0)), ready_after(nodes, started)


def test_a_scale_up_waits_for_the_nodes_and_times_each():
    clock, said = FakeClock(), []
    answers = iter([[], [node("a", at="2026-12-06T05:00:10Z")], [node("a", at="2026-12-06T05:00:10Z")]])
    got = scale_up_for_run(Eks(desired=0), REF, 1, lambda: next(answers), said.append, clock.clock())
    assert (got.before, got.after, got.seconds, got.per_node) == (0, 1, 10.0, (("a", 10.0),)), got
    assert said[0] == "scaling GPU node group gpu-ng from 0 to 1 node(s)", said


def test_a_scale_up_on_a_busy_group_waits_on_the_fake_clock_and_tells_it():
    clock, said = FakeClock(), []
    answers = iter([[node("a")]] * 3)
    eks = Eks(desired=0, statuses=("UPDATING", "ACTIVE"))
    got = scale_up_for_run(eks, REF, 1, lambda: next(answers), said.append, clock.clock())
    assert said[0] == "node group gpu-ng is UPDATING: waiting to scale it (0 s of 1200)", said
    assert (clock.slept, got.nodegroup, got.waited, got.waited_for) == ([POLL_S], "gpu-ng", 10.0, "UPDATING"), got


def test_a_scale_up_tells_the_nodes_wait_and_passes_its_bound_on():
    clock, said = FakeClock(), []
    with pytest.raises(DriverError, match="0 of 1 GPU nodes Ready after 30 s"):
        scale_up_for_run(Eks(desired=0), REF, 1, lambda: [], said.append, clock.clock(), timeout_s=30.0)
    assert said[1] == "waiting for GPU nodes: 0 of 1 Ready after 0 s", said


def test_a_group_at_the_count_with_its_nodes_ready_is_not_waited_on():
    clock, said = FakeClock(), []
    got = scale_up_for_run(Eks(desired=1), REF, 1, lambda: [node("a")], said.append, clock.clock())
    assert (got, said, clock.slept) == (Scaled("gpu-ng", 1, 1), [], []), (got, said)


def test_a_group_at_the_count_whose_nodes_are_not_ready_is_waited_on():
    clock, said = FakeClock(), []
    answers = iter([[], [], [node("a")], [node("a")]])
    got = scale_up_for_run(Eks(desired=1), REF, 1, lambda: next(answers), said.append, clock.clock())
    assert (got.seconds, clock.slept) == (10.0, [POLL_S]), (got, clock.slept)


# ---- the Ray jobs before a scale-down --------------------------------------------------------------------------
class Pods:
    """The RayCluster's pods: the head answers the job snippet with ``result``; the exec calls are recorded."""

    namespace = "ray"

    def __init__(self, result: ExecResult):
        self.calls: list[tuple[str, str, list[str], float]] = []
        self.result, self.kube = result, self  # the pods' API is the recorder itself

    def exec(self, pod: str, ns: str, cmd: list[str], timeout_s: float) -> ExecResult:
        self.calls.append((pod, ns, cmd, timeout_s))
        return self.result

    def head_pod(self) -> str:
        return "ray-efa-head-abcde"


def test_the_job_list_is_asked_of_the_head_pods_job_server_within_a_minute():
    pods = Pods(ExecResult(0, '[{"submission_id": "r1", "status": "RUNNING"}]\n', ""))
    assert head_jobs(pods) == [{"submission_id": "r1", "status": "RUNNING"}]
    ((pod, ns, cmd, timeout_s),) = pods.calls
    assert (pod, ns, cmd[:2], timeout_s) == ("ray-efa-head-abcde", "ray", ["python", "-c"], 60), pods.calls
    assert "http://127.0.0.1:8265/api/jobs/" in cmd[2], cmd


@pytest.mark.parametrize(
    "result, shown",
    [
        (ExecResult(1, "", "urllib.error.URLError: connection refused\n"), "(rc 1): urllib.error.URLError"),
        (ExecResult(0, '{"detail": "x"}', ""), '(rc 0): {"detail": "x"}'),
        (ExecResult(0, "not json", ""), "(rc 0): not json"),
    ],
)
def test_a_head_that_does_not_list_jobs_is_an_error_naming_the_pod(result, shown):
    with pytest.raises(DriverError, match=r"the job server in ray/ray-efa-head-abcde did not answer") as e:
        head_jobs(Pods(result))
    assert shown in str(e.value), e.value


def test_the_error_shows_the_last_300_characters_of_what_the_head_said():
    with pytest.raises(DriverError) as e:
        head_jobs(Pods(ExecResult(1, "", "a" * 400 + "Z")))
    assert str(e.value).endswith("(rc 1): " + "a" * 299 + "Z"), str(e.value)[-40:]


@pytest.mark.parametrize(
    "jobs, said",
    [
        (
            [{"submission_id": "r0", "status": "SUCCEEDED"}, {"submission_id": "r1", "status": "PENDING"}],
            "Ray job r1 is PENDING",
        ),
        (
            [{"job_id": "02000000", "status": "RUNNING"}, {"submission_id": "r2", "status": "RUNNING"}],
            "Ray job 02000000 is RUNNING",
        ),
        ([{"submission_id": "r0", "status": "STOPPED"}, {"submission_id": "r3", "status": "FAILED"}], ""),
    ],
)
def test_the_first_pending_or_running_job_is_named(jobs, said):
    assert active_job(jobs) == said


def test_a_job_api_that_cannot_be_asked_keeps_the_nodes():
    target = SimpleNamespace(ray_pods=lambda: Pods(ExecResult(7, "", "boom")))
    got = job_keeps_nodes(target)
    assert got.startswith("the Ray job API could not be asked, so a job may be running (the job server"), got


# ---- the lease -------------------------------------------------------------------------------------------------
class RecordKube:
    """The idle guard's record ConfigMap: get returns its data, a patch sets (or, with None, deletes) keys;
    ``fail`` raises DriverError on the named call."""

    def __init__(self, data=None, fail=""):
        self.data, self.fail, self.patches = dict(data or {}), fail, []

    def get_configmap(self, namespace, name):
        assert (namespace, name) == ("ray", "idle-guard-record"), (namespace, name)
        if self.fail == "get":
            raise DriverError("configmaps idle-guard-record not found")
        return {"data": dict(self.data)}

    def patch_configmap(self, namespace, name, body):
        assert (namespace, name) == ("ray", "idle-guard-record"), (namespace, name)
        if self.fail == "patch":
            raise DriverError("forbidden")
        self.patches.append(body)
        for k, v in body["data"].items():
            if v is None:
                self.data.pop(k, None)
            else:
                self.data[k] = v


def lease_of(kube: RecordKube, clock: FakeClock, run_id: str = "r1") -> Lease:
    return Lease(kube, "ray", run_id, clock.clock())


def written(kube: RecordKube) -> list[dict]:
    return [json.loads(p["data"]["lease"]) for p in kube.patches]


def test_a_first_renewal_writes_the_lease_for_twenty_minutes():
    kube, clock = RecordKube(), FakeClock()
    assert lease_of(kube, clock).renew("scaling up") is True
    assert written(kube) == [{"run": "r1", "what": "scaling up", "until": START + LEASE_S}], kube.patches


def test_a_lease_is_written_as_sorted_json_of_a_starting_run():
    kube = RecordKube()
    lease_of(kube, FakeClock()).renew()
    assert kube.patches[0]["data"]["lease"] == f'{{"run": "r1", "until": {START + LEASE_S}, "what": "starting"}}'


def test_this_runs_lease_without_an_end_is_written_again():
    kube = RecordKube({"lease": '{"run": "r1", "what": "starting"}'})
    lease_of(kube, FakeClock()).renew()
    assert written(kube) == [{"run": "r1", "what": "starting", "until": START + LEASE_S}], kube.patches


def test_a_renewal_within_the_minute_writes_nothing():
    kube, clock = RecordKube(), FakeClock()
    lease = lease_of(kube, clock)
    lease.renew()
    clock.t += 59
    assert lease.renew() is True and len(kube.patches) == 1, kube.patches


def test_a_renewal_a_minute_later_writes_again():
    kube, clock = RecordKube(), FakeClock()
    lease = lease_of(kube, clock)
    lease.renew()
    clock.t += 60
    lease.renew()
    assert [d["until"] for d in written(kube)] == [START + LEASE_S, START + 60 + LEASE_S], kube.patches


def test_another_runs_lease_is_overwritten():
    other = json.dumps({"run": "r0", "what": "starting", "until": START + LEASE_S})
    kube = RecordKube({"lease": other})
    lease_of(kube, FakeClock()).renew()
    assert written(kube)[-1]["run"] == "r1", kube.patches


def test_a_lease_that_cannot_be_written_says_so():
    assert lease_of(RecordKube(fail="patch"), FakeClock()).renew() is False


def test_release_deletes_the_lease_key():
    kube = RecordKube({"lease": '{"run": "r1"}', "last": "{}"})
    assert lease_of(kube, FakeClock()).release() is True
    assert kube.patches == [{"data": {"lease": None}}] and kube.data == {"last": "{}"}, kube.patches


@pytest.mark.parametrize(
    "kube, held",
    [
        (RecordKube({"lease": '{"run": "r1", "until": 5}'}), {"run": "r1", "until": 5}),
        (RecordKube({}), None),
        (RecordKube({"lease": "[1]"}), None),
        (RecordKube({"lease": "{"}), None),
        (RecordKube(fail="get"), None),
    ],
)
def test_the_held_lease_is_the_records_object_or_none(kube, held):
    assert lease_of(kube, FakeClock()).held() == held


def test_a_lease_without_a_cluster_does_nothing():
    lease = Lease(None, "", "r1", FakeClock().clock())
    assert (lease.held(), lease.renew(), lease.release()) == (None, False, False)


def test_a_wait_that_reports_or_sleeps_renews_the_lease_first():
    kube, clock, said, slept = RecordKube(), FakeClock(), [], []
    lease = lease_of(kube, clock)
    lease.renewing(said.append)("waiting")
    clock.t += 60
    lease.renewing(slept.append)(10.0)
    assert (len(kube.patches), said, slept) == (2, ["waiting"], [10.0]), (kube.patches, said, slept)


def target(idle_minutes=30, outputs=OUTPUTS, kube=None, eks=None, jobs="[]", idle_nodes=0, node_count=2):
    """A `run` target on AWS: the stack's config, its outputs, clients, the head's job list, notes and prices."""
    cfg = SimpleNamespace(
        stack="us-west-2",
        gpu_nodes=SimpleNamespace(
            idle_minutes=idle_minutes, idle_nodes=idle_nodes, node_count=node_count, instance_type="g6.12xlarge"
        ),
        system_nodes=SimpleNamespace(count=1, instance_type="m6i.xlarge"),
        ray=SimpleNamespace(namespace="ray"),
    )
    clock = FakeClock()
    notes: list[str] = []

    def kube_of():
        if kube is None:
            raise DriverError("no kubeconfig")
        return kube

    price = lambda n: SimpleNamespace(text=lambda: f"${n * 4.6:.2f}/h", to_dict=lambda: {"usd_per_hour": n * 4.6})  # noqa: E731
    return SimpleNamespace(
        cfg=cfg,
        run_id="r1",
        outputs=lambda: outputs,
        kube=kube_of,
        deps=SimpleNamespace(clock=clock.clock(), client=lambda name: {"eks": eks}[name]),
        ray_pods=lambda: Pods(ExecResult(0, jobs, "")),
        on_progress=lambda s: None,
        note=notes.append,
        notes=notes,
        price=price,
        handles=SimpleNamespace(lease=None),
        go_ahead=lambda question: None,
    )


@pytest.mark.parametrize(
    "t",
    [
        target(idle_minutes=0, kube=RecordKube()),
        target(outputs={}, kube=RecordKube()),
        target(kube=None),
    ],
    ids=["guard-off", "no-outputs", "no-cluster"],
)
def test_no_guard_no_outputs_or_no_cluster_gives_a_lease_that_does_nothing(t):
    assert Lease.of(t).kube is None


def test_a_guard_of_one_idle_minute_gets_a_lease():
    assert Lease.of(target(idle_minutes=1, kube=RecordKube())).kube is not None


def test_a_lease_that_cannot_reach_the_cluster_renews_nothing_and_does_not_fail():
    assert Lease.of(target(kube=None)).renew() is False


def test_scale_up_on_a_stack_without_the_guard_waits_on_the_targets_clock():
    kube = NodesKube([])
    t = target(idle_minutes=0, kube=kube, eks=Eks(desired=0))
    answers = iter([[], [node("a"), node("b")], [node("a"), node("b")]])
    kube.list_nodes = lambda selector: next(answers)
    scale_up(t, {})
    assert (t.deps.clock.now() - START, kube.patches) == (POLL_S, []), kube.patches


def test_a_stack_with_the_guard_leases_in_the_ray_namespace():
    kube = RecordKube()
    lease = Lease.of(target(kube=kube))
    assert (lease.kube, lease.namespace, lease.run_id) == (kube, "ray", "r1"), lease


# ---- run's start and end ---------------------------------------------------------------------------------------
class NodesKube(RecordKube):
    def __init__(self, nodes, **kw):
        super().__init__(**kw)
        self.nodes, self.selectors = nodes, []

    def list_nodes(self, selector):
        self.selectors.append(selector)
        return self.nodes


def test_scale_up_takes_the_lease_and_scales_to_the_node_count():
    kube, eks = NodesKube([node("a"), node("b")]), Eks(desired=0)
    t = target(kube=kube, eks=eks)
    got = scale_up(t, {}).data
    assert (got.before, got.after, t.notes) == (0, 2, []), (got, t.notes)
    assert written(kube)[0]["run"] == "r1" and kube.selectors[0] == "role=gpu-worker", (kube.patches, kube.selectors)


def test_scale_up_waits_for_the_nodes_on_the_targets_clock():
    kube = NodesKube([])
    t = target(kube=kube, eks=Eks(desired=0))
    answers = iter([[], [node("a"), node("b")], [node("a"), node("b")]])
    kube.list_nodes = lambda selector: next(answers)
    scale_up(t, {})
    assert t.deps.clock.now() - START == POLL_S, "the wait for the nodes did not sleep on the target's clock"


def test_scale_up_of_a_stack_without_its_cluster_names_the_stack():
    with pytest.raises(DriverError, match="stack us-west-2 exports no cluster_name"):
        scale_up(target(outputs={"nodegroup_name": "gpu-ng"}, kube=NodesKube([])), {})


def test_scale_up_without_outputs_does_nothing_and_says_why():
    got = scale_up(target(outputs={}), {})
    want = ("skip", "the GPU node group is not known with --kubeconfig: not scaled")
    assert (got.status, got.summary) == want, got


@pytest.mark.parametrize("outputs", [{}, OUTPUTS], ids=["skipped", "scaled"])
def test_scale_up_results_carry_the_steps_name(outputs):
    got = scale_up(target(outputs=outputs, kube=NodesKube([node("a"), node("b")]), eks=Eks(desired=0)), {})
    assert got.step == "scale-up", got


def test_scale_up_asks_about_the_price_before_growing_the_group():
    t = target(kube=NodesKube([node("a"), node("b")]), eks=Eks(desired=1))
    questions: list[str] = []
    t.go_ahead = questions.append
    scale_up(t, {})
    assert questions == [
        f"scaling GPU node group {OUTPUTS['nodegroup_name']} of stack us-west-2 from 1 to 2 node(s) costs money "
        "(2 x g6.12xlarge: $9.20/h On-Demand with the system nodes). Go ahead?"
    ], questions


def test_scale_up_of_a_group_already_at_the_node_count_asks_nothing():
    t = target(kube=NodesKube([node("a"), node("b")]), eks=Eks(desired=2))
    questions: list[str] = []
    t.go_ahead = questions.append
    scale_up(t, {})
    assert questions == [], f"expected no price question for a group already at 2, got {questions}"


def test_scale_up_warns_when_the_lease_cannot_be_written():
    t = target(kube=NodesKube([node("a"), node("b")], fail="patch"), eks=Eks(desired=2))
    scale_up(t, {})
    assert t.notes == ["the idle guard's lease could not be written: it may scale the nodes down during a long start"]


def test_after_run_with_keep_nodes_names_the_command_and_the_guard():
    line = after_run(target(kube=RecordKube()), keep_nodes=True)
    assert line == (
        "GPU nodes kept (--keep-nodes): they cost money until `python -m automation scale --stack us-west-2 "
        "--gpu-nodes 0` (or the idle guard, after gpuIdleMinutes 30)"
    ), line


def test_after_run_without_outputs_scales_nothing_and_says_so():
    line = after_run(target(outputs={}), keep_nodes=False)
    assert line.startswith("GPU nodes not scaled: no stack outputs were read (--kubeconfig)"), line


def test_after_run_keeps_nodes_a_running_job_holds_and_releases_the_lease():
    kube, eks = RecordKube({"lease": '{"run": "r1"}'}), Eks(desired=2)
    line = after_run(
        target(kube=kube, eks=eks, jobs='[{"submission_id": "j1", "status": "RUNNING"}]'), keep_nodes=False
    )
    assert line.startswith("GPU nodes kept at 2: Ray job j1 is RUNNING;"), line
    assert "add --force if no job runs" in line and "gpuIdleMinutes 30 after the last job" in line, line
    assert (eks.updates, "lease" in kube.data) == ([], False), (eks.updates, kube.data)


def test_a_scale_down_of_a_busy_group_waits_on_the_targets_clock_and_tells_it():
    t = target(eks=Eks(desired=2, statuses=("UPDATING", "UPDATING", "ACTIVE")))  # sizes() reads one
    said: list[str] = []
    t.on_progress = said.append
    line = after_run(t, keep_nodes=False)
    assert said == ["node group gpu-ng is UPDATING: waiting to scale it (0 s of 1200)"], said
    assert t.deps.clock.now() - START == POLL_S and "scaled from 2 to 0" in line, line


def test_after_run_at_the_idle_count_does_not_ask_the_head():
    t = target(eks=Eks(desired=1), idle_nodes=1)
    t.ray_pods = lambda: pytest.fail("the head was asked although the group is already at the idle count")
    line = after_run(t, keep_nodes=False)
    assert line.startswith("GPU node group gpu-ng already at 1 node(s) (gpuIdleNodes 1)"), line


def test_after_run_says_what_runs_now_and_how_to_keep_nodes():
    line = after_run(target(eks=Eks(desired=2)), keep_nodes=False)
    assert line == (
        "GPU node group gpu-ng scaled from 2 to 0 node(s) (gpuIdleNodes 0); running now: 0 x g6.12xlarge and "
        "1 x m6i.xlarge, $0.00/h On-Demand (plus the EKS control plane and the NAT gateway); pass --keep-nodes "
        "to keep them, `python -m automation scale --stack us-west-2 --gpu-nodes N` by hand"
    ), line


def test_a_scale_down_eks_refuses_names_the_group_and_the_command():
    line = after_run(target(eks=Eks(desired=2, error=refused("AccessDeniedException"))), keep_nodes=False)
    assert line.startswith("GPU nodes NOT scaled down (EKS refused to scale node group gpu-ng to 0"), line
    assert line.endswith(
        "the nodes of GPU node group gpu-ng that run cost money until "
        "`python -m automation scale --stack us-west-2 --gpu-nodes 0`"
    ), line


def test_a_scale_down_before_the_outputs_are_read_names_the_gpu_node_group():
    t = target(eks=Eks(desired=2))
    t.outputs = lambda: (_ for _ in ()).throw(DriverError("the stack cannot be read"))
    line = after_run(t, keep_nodes=False)
    assert line == (
        "GPU nodes NOT scaled down (the stack cannot be read): the nodes of the GPU node group that run cost money "
        "until `python -m automation scale --stack us-west-2 --gpu-nodes 0`"
    ), line


def test_a_scale_down_of_a_stack_without_its_cluster_names_the_stack():
    line = after_run(target(outputs={"nodegroup_name": "gpu-ng"}, eks=Eks(desired=2)), keep_nodes=False)
    assert "stack us-west-2 exports no cluster_name" in line, line


def test_a_lease_release_that_fails_never_hides_the_line():
    t = target(eks=Eks(desired=0), kube=RecordKube())
    t.kube = lambda: (_ for _ in ()).throw(RuntimeError("kubeconfig unreadable"))
    assert after_run(t, keep_nodes=False).startswith("GPU node group gpu-ng already at 0 node(s)")


# ---- status ----------------------------------------------------------------------------------------------------
def test_status_shows_the_groups_size_and_its_cost():
    got = now_running(target(eks=Eks(desired=2)))
    assert (got["gpu_nodes"], got["cost"]) == (2, {"usd_per_hour": 9.2}), got
    assert got["text"].startswith("running now: 2 x g6.12xlarge and 1 x m6i.xlarge, $9.20/h"), got


def test_status_without_outputs_says_where_the_name_comes_from():
    got = now_running(target(outputs={}))
    assert got == {"gpu_nodes": None, "note": "the GPU node group's name comes from the stack outputs (not read)"}, got


def test_status_of_a_stack_without_its_cluster_names_the_stack():
    got = now_running(target(outputs={"nodegroup_name": "gpu-ng"}))
    assert got["note"].startswith("EKS: stack us-west-2 exports no cluster_name"), got


def test_status_when_eks_cannot_be_read_names_eks():
    got = now_running(target(eks=FailingDescribe(refused("AccessDeniedException", "DescribeNodegroup"))))
    assert got["gpu_nodes"] is None and got["note"].startswith("EKS: "), got


def test_the_guards_record_is_its_last_decision_or_why_there_is_none():
    assert guard_record(RecordKube({"last": '{"action": "keep"}'}), "ray") == {"action": "keep"}
    assert guard_record(RecordKube({}), "ray") == {}
    assert guard_record(RecordKube({"last": "{"}), "ray") == "the record ray/idle-guard-record is not JSON: '{'"
    missing = guard_record(RecordKube(fail="get"), "ray")
    assert missing.startswith("no record (configmaps idle-guard-record not found): gpuIdleMinutes 0"), missing
