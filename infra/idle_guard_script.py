"""The idle guard: scales the GPU node group to gpuIdleNodes when no Ray job has run for gpuIdleMinutes.

It runs in the cluster as a CronJob on the system node (infra/idle_guard.py ships this file in a ConfigMap
and runs it with the Ray image's Python), so it needs no laptop. Each run decides once:
- a Ray job PENDING or RUNNING keeps the nodes; so does a Ray job API that cannot be read (a job may run);
- otherwise, when the newest of the last job's end and the node group's last change is gpuIdleMinutes old,
  it calls eks:UpdateNodegroupConfig once; the next run finds the group at gpuIdleNodes and does nothing;
- a failed EKS call is reported (a Warning Event and the record) and the run exits 1; the Job has
  backoffLimit 0, so nothing retries it until the next scheduled run decides afresh.
- a lease that `run` holds while it starts (key ``lease`` of the record ConfigMap, written and renewed by the
  driver: automation/scaling.py ``Lease``) keeps the nodes until its ``until``; an expired lease is ignored, so
  a driver that died cannot keep the GPUs. The lease, not the node group's ``modifiedAt``, is what protects a
  starting run: EKS's API reference describes ``modifiedAt`` only as "the Unix epoch timestamp for the last
  modification to the object" (API_Nodegroup), without saying whether UpdateNodegroupConfig moves it, so the
  guard reads it as a hint of activity and stays correct when it does not move.
What it did goes to a Kubernetes Event (reason IdleGuard) and the ConfigMap RECORD (key ``last``), which
`python -m automation status` shows. A decision that acted or failed (a scale-down, an error) is also written as
one JSON object to ``s3://RECORD_BUCKET/RECORD_PREFIX/<UTC time>.json``, the stack's prefix of the run bucket,
where it outlives the cluster; the Event and the record say where it went, or why the write failed. A failed
write is attempted once and never changes the decision or its exit status.

Ray's job list comes from the head's job server inside the cluster (``GET /api/jobs/`` on the head Service's
port 8265, a ClusterIP Service: https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html);
a job's ``status`` is PENDING, RUNNING, STOPPED, SUCCEEDED or FAILED and ``end_time`` is in milliseconds
(https://docs.ray.io/en/latest/cluster/running-applications/job-submission/doc/ray.job_submission.JobStatus.html).
The Kubernetes API is reached with the pod's ServiceAccount token, as the Kubernetes docs describe for a pod
(https://kubernetes.io/docs/tasks/run-application/access-api-from-pod/). Only the standard library and boto3
(expected in the Ray image; `main` reports its absence) are imported; nothing of the project, because this
file runs alone in the pod.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

ACTIVE = ("PENDING", "RUNNING")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
COMPONENT = "ray-efa-eks-idle-guard"
TIMEOUT_S = 10
# Only decisions that changed something or failed go to S3: "keep", "wait" and "nothing" come every 5 minutes
# (the CronJob's schedule), so one object per tick would bury the few that matter; the Event and the record
# still show the latest of those.
KEPT_IN_S3 = ("scale-down", "error")
RECORD_KEY = "last"  # the record ConfigMap's key of the guard's last decision
LEASE_KEY = "lease"  # its key of the lease a starting `run` holds (written by the driver, read here)


def lease_doc(run: str, what: str, until_s: float) -> dict:
    """The lease as the driver writes it: which run, what it is doing, until when (epoch seconds)."""
    return {"run": run, "what": what, "until": until_s}


def lease_holds(lease: dict | None, now_s: float) -> str:
    """'run <id> <what>, lease until <UTC time>' while ``lease`` holds at ``now_s``; '' when none or expired."""
    doc = lease or {}
    try:
        until = float(doc.get("until") or 0)
    except (TypeError, ValueError):
        return ""
    if until <= now_s:
        return ""
    at = datetime.fromtimestamp(until, UTC).strftime("%H:%M:%SZ")
    return f"run {doc.get('run')} {doc.get('what', 'starting')}, lease until {at}"


@dataclass(frozen=True)
class Decision:
    """``action``: keep (a job runs or may), scale-down, nothing (already down, or off), wait (group busy)."""

    action: str
    reason: str
    desired: int
    target: int


def decide(
    now_s: float,
    jobs: list[dict] | None,
    desired: int,
    status: str,
    changed_s: float,
    idle_minutes: int,
    idle_nodes: int,
    lease: dict | None = None,
) -> Decision:
    """What to do now. ``jobs`` is the Ray job list (None: the job API could not be read); ``changed_s`` is when
    the node group last changed (epoch seconds), counted as activity when EKS moves it; ``lease`` is the record's
    lease of a starting run (None: none), which keeps the nodes until it expires."""

    def d(action: str, reason: str) -> Decision:
        return Decision(action, reason, desired, idle_nodes)

    if idle_minutes <= 0:
        return d("nothing", "the stack's idle minutes are 0: the guard is off")
    if desired <= idle_nodes:
        return d("nothing", f"the node group is at {desired} node(s), the stack keeps {idle_nodes} between runs")
    if status != "ACTIVE":
        return d("wait", f"the node group is {status}: decide when it is ACTIVE")
    if jobs is None:
        return d("keep", "the Ray job API could not be read: a job may be running")
    running = [j for j in jobs if j.get("status") in ACTIVE]
    if running:
        j = running[0]
        return d("keep", f"Ray job {j.get('submission_id') or j.get('job_id')} is {j.get('status')}")
    if held := lease_holds(lease, now_s):
        return d("keep", held)
    ends = [j["end_time"] / 1000 for j in jobs if j.get("end_time")]
    idle_min = (now_s - max([changed_s, *ends])) / 60
    if idle_min < idle_minutes:
        return d("keep", f"no Ray job for {idle_min:.0f} of {idle_minutes} minutes")
    lapsed = f"; run {lease.get('run')}'s lease expired" if lease else ""
    return d("scale-down", f"no Ray job for {idle_min:.0f} minutes (the stack's idle limit is {idle_minutes}){lapsed}")


# ---- the outside world --------------------------------------------------------------------------------------
def ray_jobs(url: str) -> list[dict] | None:
    """The head's job list, or None when it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:  # noqa: S310 - a fixed in-cluster URL
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


class Kube:
    """Events and the record ConfigMap through the API server, with the pod's ServiceAccount token."""

    def __init__(self, namespace: str, host: str, sa_dir: str = SA_DIR):
        self.namespace, self.host = namespace, host
        with open(f"{sa_dir}/token") as f:
            self.token = f.read().strip()
        self.ssl = ssl.create_default_context(cafile=f"{sa_dir}/ca.crt")

    def _send(self, method: str, path: str, body: dict, content_type: str) -> None:
        req = urllib.request.Request(
            f"{self.host}{path}",
            data=json.dumps(body).encode(),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type},
        )
        with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=self.ssl):  # noqa: S310
            pass

    def lease(self, name: str) -> dict | None:
        """The lease in the record ConfigMap ``name``; None when there is none or it cannot be read or parsed."""
        req = urllib.request.Request(
            f"{self.host}/api/v1/namespaces/{self.namespace}/configmaps/{name}",
            headers={"Authorization": f"Bearer {self.token}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S, context=self.ssl) as resp:  # noqa: S310
                doc = json.loads(json.loads(resp.read()).get("data", {}).get(LEASE_KEY) or "null")
        except (OSError, ValueError, AttributeError):
            return None
        return doc if isinstance(doc, dict) else None

    def event(self, kind: str, message: str, pod: str) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "metadata": {"generateName": "idle-guard.", "namespace": self.namespace},
            "involvedObject": {"kind": "Pod", "namespace": self.namespace, "name": pod},
            "reason": "IdleGuard",
            "message": message[:1000],
            "type": kind,
            "source": {"component": COMPONENT},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self._send("POST", f"/api/v1/namespaces/{self.namespace}/events", body, "application/json")

    def record(self, name: str, doc: dict) -> None:
        body = {"data": {RECORD_KEY: json.dumps(doc, sort_keys=True)}}
        path = f"/api/v1/namespaces/{self.namespace}/configmaps/{name}"
        self._send("PATCH", path, body, "application/merge-patch+json")


def run_once(env: dict, eks: Any, kube: Any, s3: Any = None, jobs_of=ray_jobs, clock=time.time) -> int:
    """One decision and, when it says so, one scale-down; reported to ``kube`` and, when it acted or failed, to
    ``s3`` (a boto3 S3 client; None: no S3 write). Exit status: 0, or 1 when the EKS call failed."""
    cluster, nodegroup = env["CLUSTER_NAME"], env["NODEGROUP_NAME"]
    idle_minutes, idle_nodes = int(env["IDLE_MINUTES"]), int(env["IDLE_NODES"])
    pod = env.get("POD_NAME", "idle-guard")
    try:
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)["nodegroup"]
        changed = group.get("modifiedAt") or group.get("createdAt")
        changed_s = changed.timestamp() if hasattr(changed, "timestamp") else float(changed or 0)
        decision = decide(
            clock(),
            jobs_of(env["RAY_JOBS_URL"]),
            int(group["scalingConfig"]["desiredSize"]),
            str(group.get("status")),
            changed_s,
            idle_minutes,
            idle_nodes,
            kube.lease(env["RECORD_NAME"]),
        )
        if decision.action == "scale-down":
            eks.update_nodegroup_config(
                clusterName=cluster, nodegroupName=nodegroup, scalingConfig={"desiredSize": idle_nodes}
            )
    except Exception as e:  # noqa: BLE001 - any failure of the AWS SDK is reported, then the run ends
        message = f"EKS call for node group {nodegroup} failed: {type(e).__name__}: {e}"
        doc = {"action": "error", "reason": message, "at": clock()}
        _report(kube, env, pod, _to_s3(s3, env, doc), "Warning")
        return 1
    doc = _to_s3(s3, env, {**asdict(decision), "at": clock()})
    _report(kube, env, pod, doc, "Warning" if "s3_error" in doc else "Normal")
    return 0


def _to_s3(s3: Any, env: dict, doc: dict) -> dict:
    """``doc``, written to the run bucket when its action is one KEPT_IN_S3; returned with ``s3`` (where it
    went) or ``s3_error`` (why not) added. One attempt: the next scheduled run is the retry."""
    if s3 is None or doc["action"] not in KEPT_IN_S3:
        return doc
    stamp = datetime.fromtimestamp(doc["at"], UTC).strftime("%Y%m%dT%H%M%SZ")
    bucket, key = env["RECORD_BUCKET"], f"{env['RECORD_PREFIX'].strip('/')}/{stamp}.json"
    body = {**doc, "cluster": env["CLUSTER_NAME"], "nodegroup": env["NODEGROUP_NAME"]}
    try:
        s3.put_object(
            Bucket=bucket, Key=key, Body=json.dumps(body, sort_keys=True).encode(), ContentType="application/json"
        )
    except Exception as e:  # noqa: BLE001 - a refused or unreachable S3 is reported beside the decision
        return {**doc, "s3_error": f"writing s3://{bucket}/{key} failed: {type(e).__name__}: {e}"}
    return {**doc, "s3": f"s3://{bucket}/{key}"}


def _report(kube: Any, env: dict, pod: str, doc: dict, kind: str) -> None:
    text = f"{doc['action']}: {doc['reason']}"
    if doc.get("s3") or doc.get("s3_error"):
        text += f" ({doc.get('s3') or doc.get('s3_error')})"
    print(text, flush=True)
    try:
        kube.event(kind, text, pod)
        kube.record(env["RECORD_NAME"], doc)
    except OSError as e:
        print(f"could not write the event or the record: {e}", file=sys.stderr, flush=True)


def main() -> int:
    env = dict(os.environ)
    host = f"https://{env['KUBERNETES_SERVICE_HOST']}:{env['KUBERNETES_SERVICE_PORT']}"
    kube = Kube(env["NAMESPACE"], host)
    try:
        # Imported here, not at the top: the Pulumi program reads this file as text, and its virtualenv has
        # no boto3. The image (rayImage, an AWS Deep Learning Container) is expected to carry it; if it does
        # not, the guard says so where `status` looks instead of failing unseen.
        import boto3
        from botocore.config import Config
    except ImportError as e:
        doc = {"action": "error", "reason": f"boto3 is not in the image: {e}", "at": time.time()}
        _report(kube, env, env.get("POD_NAME", "idle-guard"), doc, "Warning")
        return 1
    # One attempt per call: a refused or unreachable EKS or S3 is reported, and the next scheduled run tries
    # again. The region is named: botocore takes it from AWS_DEFAULT_REGION, not from the AWS_REGION the pod
    # is given (botocore/configprovider.py, the 'region' entry).
    once = Config(retries={"max_attempts": 1, "mode": "standard"})
    eks = boto3.client("eks", region_name=env["AWS_REGION"], config=once)
    s3 = boto3.client("s3", region_name=env["AWS_REGION"], config=once)
    return run_once(env, eks, kube, s3)


if __name__ == "__main__":
    sys.exit(main())
