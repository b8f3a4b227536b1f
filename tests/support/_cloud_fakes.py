"""Stand-ins of the cloud's timing: a clock that moves only when slept on, an EKS whose GPU node group stays
UPDATING as real EKS's does, and the kubernetes client over the fake API with a scripted exec (the fake API
server speaks no websocket), whose head pod answers the Ray job list.

The node group's behaviour is the EKS API reference's: UpdateNodegroupConfig on a group that is CREATING or
UPDATING answers ResourceInUseException ("The specified resource is in use",
https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateNodegroupConfig.html#API_UpdateNodegroupConfig_Errors),
an accepted update puts the group in UPDATING (Nodegroup ``status``: CREATING | ACTIVE | UPDATING | DELETING |
CREATE_FAILED | DELETE_FAILED | DEGRADED, https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html),
and the size is read back later (eventually consistent). How long each lasts is a parameter, not a measured
figure. ``modifiedAt`` is "the Unix epoch timestamp for the last modification to the object" (API_Nodegroup);
whether a scaling change moves it is not documented, so ``modified_at_moves=False`` holds it where it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION
from botocore.exceptions import ClientError

from automation.aws_clients import Eks
from automation.kube import ExecResult, KubeApi
from automation.scaling import JOBS_SNIPPET, Clock

START = datetime(2026, 12, 6, 5, 0, tzinfo=UTC).timestamp()  # after the recorded nodes turned Ready (2026-12-02)


class FakeClock:
    """Epoch seconds that move only when slept on: an hour of waiting runs in microseconds."""

    def __init__(self, start: float = START):
        self.t = start
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.t += seconds

    def clock(self) -> Clock:
        return Clock(self.now, self.sleep)


@contextmanager
def gpu_nodegroup(desired: int = 2) -> Iterator[Any]:
    """moto's in-process EKS (its own fake credentials: no call leaves the process) whose cluster MOTO_CLUSTER has
    the GPU node group MOTO_NODEGROUP at ``desired`` within the 0..2 infra/manifests.py's gpu_scaling_config gives a
    2-node stack; its client."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        client = boto3.client("eks", region_name=MOTO_REGION)
        client.create_cluster(
            name=MOTO_CLUSTER, roleArn="arn:aws:iam::123456789012:role/eks", resourcesVpcConfig={"subnetIds": ["s-1"]}
        )
        client.create_nodegroup(
            clusterName=MOTO_CLUSTER,
            nodegroupName=MOTO_NODEGROUP,
            nodeRole="arn:aws:iam::123456789012:role/node",
            subnets=["s-1"],
            scalingConfig={"desiredSize": desired, "minSize": 0, "maxSize": 2},
        )
        yield client


class SlowEks:
    """moto's EKS client, with the node group's timing of real EKS: UPDATING until ``busy_until`` (an update
    started elsewhere) and for ``update_s`` after each accepted UpdateNodegroupConfig, refused while UPDATING,
    and the new desired size reported ``report_lag_s`` after the call. ``refusals`` more ResourceInUseExceptions
    come while the group describes as ACTIVE (the race between a describe and the call)."""

    def __init__(
        self,
        moto: Any,
        clock: FakeClock,
        busy_until: float = 0.0,
        update_s: float = 180.0,
        report_lag_s: float = 20.0,
        refusals: int = 0,
        modified_at_moves: bool = True,
    ):
        self._moto, self._clock = moto, clock
        self.busy_until, self.update_s, self.report_lag_s, self.refusals = busy_until, update_s, report_lag_s, refusals
        self.modified_at_moves = modified_at_moves
        self._old: int | None = None  # the size still reported until report_at
        self.report_at = 0.0
        self.modified_at: datetime | None = None
        self.updates: list[tuple[float, int]] = []  # (time, desired) of each accepted call
        self.refused = 0

    def describe_nodegroup(self, **kw: Any) -> dict:
        doc = self._moto.describe_nodegroup(**kw)
        group = doc["nodegroup"]
        now = self._clock.now()
        group["status"] = "UPDATING" if now < self.busy_until else "ACTIVE"
        if self._old is not None and now < self.report_at:
            group["scalingConfig"]["desiredSize"] = self._old
        if self.modified_at is None:
            self.modified_at = group.get("modifiedAt") or group.get("createdAt")
        group["modifiedAt"] = self.modified_at
        return doc

    def update_nodegroup_config(self, **kw: Any) -> dict:
        now = self._clock.now()
        if now < self.busy_until or self.refusals > 0:
            self.refusals = max(0, self.refusals - 1)
            self.refused += 1
            raise ClientError(
                {"Error": {"Code": "ResourceInUseException", "Message": "Nodegroup is currently UPDATING"}},
                "UpdateNodegroupConfig",
            )
        self._old = self._moto.describe_nodegroup(clusterName=kw["clusterName"], nodegroupName=kw["nodegroupName"])[
            "nodegroup"
        ]["scalingConfig"]["desiredSize"]
        answer = self._moto.update_nodegroup_config(**kw)
        self.busy_until, self.report_at = now + self.update_s, now + self.report_lag_s
        if self.modified_at_moves:
            self.modified_at = datetime.fromtimestamp(now, UTC)
        self.updates.append((now, kw["scalingConfig"]["desiredSize"]))
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._moto, name)


def job(submission_id: str, status: str, end_time_s: float | None = None) -> dict:
    """A job as Ray's GET /api/jobs/ lists it (JobDetails: status, end_time in milliseconds;
    https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html)."""
    end = None if end_time_s is None else int(end_time_s * 1000)
    return {"submission_id": submission_id, "job_id": "02000000", "status": status, "end_time": end}


class ClusterKube(KubeApi):
    """The kubernetes client over the fake API (reads, the record's merge patch, logs) with a scripted exec:
    the head's job list comes from ``jobs`` (None: the exec fails, as when the job server is down)."""

    def __init__(self, kubeconfig: dict, jobs: list[dict] | None = None):
        super().__init__(kubeconfig)
        self.jobs = jobs
        self.execs: list[tuple[str, list[str]]] = []

    def exec(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600) -> ExecResult:
        self.execs.append((pod, list(command)))
        if command == ["python", "-c", JOBS_SNIPPET]:
            if self.jobs is None:
                return ExecResult(1, "", "urllib.error.URLError: <urlopen error [Errno 111] Connection refused>")
            return ExecResult(0, json.dumps(self.jobs), "")
        return ExecResult(127, "", f"not scripted: {command[:2]}")


def guard_record(namespace: str = "ray", data: dict | None = None) -> dict:
    """The idle guard's record ConfigMap as infra/idle_guard.py creates it (key ``last``)."""
    last = json.dumps({"action": "none yet", "reason": "the guard has not run"})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "idle-guard-record", "namespace": namespace},
        "data": {"last": last, **(data or {})},
    }


def _as_the_driver_takes_them(eks: SlowEks) -> Eks:
    """Never called: mypy holds the stand-in to the protocol the driver takes it as (automation/aws_clients.py)."""
    return eks
