"""The idle guard's run (infra/idle_guard_script.py) against moto's EKS and S3, a stand-in Ray job server and a stand-in
Kubernetes API (local HTTP servers answering the paths the script uses: Ray's GET /api/jobs/, the core/v1 Events
POST and ConfigMap merge PATCH); and the guard in the render (infra/idle_guard.py)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import boto3
import certifi
import pytest
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION
from botocore.exceptions import ClientError
from conftest import REPO

from infra.config import PROJECT, stack_config_values
from infra.idle_guard_script import Kube, ray_jobs, run_once
from infra.mock_render import run_program

REGION, CLUSTER, NODEGROUP = MOTO_REGION, MOTO_CLUSTER, MOTO_NODEGROUP
ENV = {
    "CLUSTER_NAME": CLUSTER,
    "NODEGROUP_NAME": NODEGROUP,
    "IDLE_MINUTES": "30",
    "IDLE_NODES": "0",
    "RAY_JOBS_URL": "http://ray-efa-head-svc.ray.svc:8265/api/jobs/",
    "NAMESPACE": "ray",
    "RECORD_NAME": "idle-guard-record",
    "RECORD_BUCKET": "ray-efa-eks-us-west-2-runs",
    "RECORD_PREFIX": "us-west-2/idle-guard",
    "AWS_REGION": REGION,
    "POD_NAME": "idle-guard-29412345-abcde",
}
HOUR_LATER = time.time() + 3600  # an hour after moto stamps the node group's modifiedAt


class Recorder:
    """What the guard tells Kubernetes: (type, message) events and the record's documents."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self.records: list[dict] = []

    def event(self, kind, message, pod):
        self.events.append((kind, message))

    def record(self, name, doc):
        self.records.append(doc)

    def lease(self, name):
        return None  # no run is starting


@pytest.fixture
def eks(moto_eks):
    return moto_eks


@pytest.fixture
def s3(eks):
    """moto's S3 in the same mock as ``eks``, with the run bucket."""
    client = boto3.client("s3", region_name=REGION)
    client.create_bucket(Bucket=ENV["RECORD_BUCKET"], CreateBucketConfiguration={"LocationConstraint": REGION})
    return client


def stored(s3) -> dict[str, dict]:
    """The run bucket's objects: key -> the JSON document."""
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=ENV["RECORD_BUCKET"]).get("Contents", [])]
    return {k: json.loads(s3.get_object(Bucket=ENV["RECORD_BUCKET"], Key=k)["Body"].read()) for k in keys}


def desired(eks) -> int:
    return eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=NODEGROUP)["nodegroup"]["scalingConfig"][
        "desiredSize"
    ]


def test_an_idle_cluster_is_scaled_down_once(eks):
    kube = Recorder()
    finished = [{"submission_id": "r1", "status": "SUCCEEDED", "end_time": int((HOUR_LATER - 3000) * 1000)}]
    codes = [run_once(ENV, eks, kube, jobs_of=lambda url: finished, clock=lambda: HOUR_LATER) for _ in range(2)]
    actions = [r["action"] for r in kube.records]
    assert (codes, desired(eks), actions) == ([0, 0], 0, ["scale-down", "nothing"]), (codes, actions)
    assert kube.events[0][0] == "Normal" and "no Ray job for 50 minutes" in kube.events[0][1], kube.events


def test_a_running_job_keeps_the_nodes(eks):
    kube = Recorder()
    running = [{"submission_id": "r2", "status": "RUNNING", "end_time": None}]
    run_once(ENV, eks, kube, jobs_of=lambda url: running, clock=lambda: HOUR_LATER)
    assert (desired(eks), kube.records[0]["action"]) == (2, "keep"), kube.records


def test_a_failed_eks_call_is_reported_once_and_not_retried():
    eks, kube = Refusing(), Recorder()
    rc = run_once(ENV, eks, kube, jobs_of=lambda url: [], clock=lambda: HOUR_LATER)
    assert (rc, eks.calls, kube.events[0][0]) == (1, 1, "Warning"), (rc, eks.calls, kube.events)
    assert "AccessDeniedException" in kube.records[0]["reason"], kube.records


# ---- what goes to the run bucket ---------------------------------------------------------------------------
def test_a_scale_down_is_written_to_the_run_bucket_and_the_following_nothing_is_not(eks, s3):
    kube = Recorder()
    finished = [{"submission_id": "r1", "status": "SUCCEEDED", "end_time": int((HOUR_LATER - 3000) * 1000)}]
    for _ in range(2):
        run_once(ENV, eks, kube, s3, jobs_of=lambda url: finished, clock=lambda: HOUR_LATER)
    objects = stored(s3)
    key = time.strftime("us-west-2/idle-guard/%Y%m%dT%H%M%SZ.json", time.gmtime(HOUR_LATER))
    assert list(objects) == [key], objects
    doc = objects[key]
    assert (doc["action"], doc["nodegroup"], doc["target"]) == ("scale-down", NODEGROUP, 0), doc
    assert kube.records[0]["s3"] == f"s3://{ENV['RECORD_BUCKET']}/{key}", kube.records[0]
    assert kube.events[0][0] == "Normal" and key in kube.events[0][1], kube.events


def test_a_kept_cluster_writes_nothing_to_the_run_bucket(eks, s3):
    kube = Recorder()
    running = [{"submission_id": "r2", "status": "RUNNING", "end_time": None}]
    run_once(ENV, eks, kube, s3, jobs_of=lambda url: running, clock=lambda: HOUR_LATER)
    assert (kube.records[0]["action"], stored(s3)) == ("keep", {}), (kube.records, stored(s3))


class Refusing:
    """An EKS client whose node group is idle and whose UpdateNodegroupConfig is refused."""

    def __init__(self):
        self.calls = 0

    def describe_nodegroup(self, **kw):
        return {"nodegroup": {"status": "ACTIVE", "modifiedAt": 0.0, "scalingConfig": {"desiredSize": 2}}}

    def update_nodegroup_config(self, **kw):
        self.calls += 1
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}}, "UpdateNodegroupConfig")


def test_a_failed_eks_call_is_written_to_the_run_bucket(eks, s3):
    kube = Recorder()
    rc = run_once(ENV, Refusing(), kube, s3, jobs_of=lambda url: [], clock=lambda: HOUR_LATER)
    docs = list(stored(s3).values())
    assert (rc, [d["action"] for d in docs]) == (1, ["error"]), (rc, docs)
    assert "AccessDeniedException" in docs[0]["reason"], docs


def test_a_failed_s3_write_is_reported_once_and_the_scale_down_stands(eks):
    class RefusingS3:
        calls = 0

        def put_object(self, **kw):
            self.calls += 1
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "PutObject")

    kube, s3 = Recorder(), RefusingS3()
    rc = run_once(ENV, eks, kube, s3, jobs_of=lambda url: [], clock=lambda: HOUR_LATER)
    record = kube.records[0]
    assert (rc, desired(eks), record["action"], s3.calls) == (0, 0, "scale-down", 1), (rc, record, s3.calls)
    assert "AccessDenied" in record["s3_error"] and "s3" not in record, record
    assert kube.events[0][0] == "Warning" and "AccessDenied" in kube.events[0][1], kube.events


def test_a_missing_run_bucket_is_reported_not_raised(eks):
    kube = Recorder()
    rc = run_once(
        ENV, eks, kube, boto3.client("s3", region_name=REGION), jobs_of=lambda url: [], clock=lambda: HOUR_LATER
    )
    assert (rc, desired(eks)) == (0, 0) and "NoSuchBucket" in kube.records[0]["s3_error"], kube.records


# ---- the script's two HTTP clients, against local stand-ins ------------------------------------------------
class Server:
    """A local HTTP server that answers ``answer(method, path, body) -> (code, doc)`` and records requests."""

    def __init__(self, answer):
        self.requests: list[tuple[str, str, dict, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else {}
                outer.requests.append((self.command, self.path, dict(self.headers), body))
                code, doc = answer(self.command, self.path, body)
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _any

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_ray_jobs_reads_the_job_list_and_is_none_when_the_head_does_not_answer():
    listed = [{"submission_id": "r1", "job_id": "02000000", "status": "RUNNING", "end_time": None}]
    server = Server(lambda m, p, b: (200, listed) if p == "/api/jobs/" else (404, {}))
    try:
        got = ray_jobs(f"{server.url}/api/jobs/")
        missing = ray_jobs(f"{server.url}/nothing/")
    finally:
        server.close()
    assert (got, missing) == (listed, None), (got, missing)


def test_kube_posts_an_event_and_merge_patches_the_record(tmp_path):
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_text(open(certifi.where()).read())
    server = Server(lambda m, p, b: (201, {}))
    try:
        kube = Kube("ray", server.url, sa_dir=str(tmp_path))
        kube.event("Normal", "scale-down: no Ray job for 50 minutes", "idle-guard-1")
        kube.record("idle-guard-record", {"action": "scale-down"})
    finally:
        server.close()
    (m1, p1, h1, b1), (m2, p2, h2, b2) = server.requests
    assert (m1, p1, b1["reason"], b1["source"]["component"]) == (
        "POST",
        "/api/v1/namespaces/ray/events",
        "IdleGuard",
        "ray-efa-eks-idle-guard",
    ), b1
    assert (m2, p2, h2["Content-Type"], json.loads(b2["data"]["last"])) == (
        "PATCH",
        "/api/v1/namespaces/ray/configmaps/idle-guard-record",
        "application/merge-patch+json",
        {"action": "scale-down"},
    ), (h2, b2)
    assert h1["Authorization"] == "Bearer sa-token"


def test_kube_reads_the_lease_from_the_record_and_none_when_the_record_is_missing(tmp_path):
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_text(open(certifi.where()).read())
    lease = {"run": "r1", "what": "starting", "until": HOUR_LATER}
    record = {"data": {"last": "{}", "lease": json.dumps(lease)}}
    server = Server(lambda m, p, b: (200, record) if p.endswith("/configmaps/idle-guard-record") else (404, {}))
    try:
        kube = Kube("ray", server.url, sa_dir=str(tmp_path))
        got, missing = kube.lease("idle-guard-record"), kube.lease("no-such-record")
    finally:
        server.close()
    assert (got, missing) == (lease, None), (got, missing)
    assert server.requests[0][:2] == ("GET", "/api/v1/namespaces/ray/configmaps/idle-guard-record"), server.requests


# ---- the guard in the render ------------------------------------------------------------------------------
def render(**overrides):
    values = stack_config_values("us-west-2", REPO)
    values.update({f"{PROJECT}:{k}": v for k, v in overrides.items()})
    return run_program("us-west-2", REPO, config=values)


def test_the_guard_runs_on_the_system_node_with_its_own_service_account():
    r = render()
    cron = next(x for x in r.records if x.type == "kubernetes:batch/v1:CronJob")
    pod = cron.inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    got = (pod["nodeSelector"], pod["serviceAccountName"], env["IDLE_MINUTES"], env["NODEGROUP_NAME"] is not None)
    assert got == ({"role": "system"}, "idle-guard", "30", True), got
    assoc = [x for x in r.records if x.type.endswith("PodIdentityAssociation") and "idle-guard" in x.name]
    assert [a.inputs["serviceAccount"] for a in assoc] == ["idle-guard"], assoc


def test_the_guard_writes_where_its_role_may_put_and_nowhere_else():
    r = render()
    cron = next(x for x in r.records if x.type == "kubernetes:batch/v1:CronJob")
    env = {
        e["name"]: e.get("value")
        for e in cron.inputs["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    policy = next(x for x in r.records if x.type == "aws:iam/rolePolicy:RolePolicy" and "idle-guard" in x.name)
    s3 = [
        st for st in json.loads(policy.inputs["policy"])["Statement"] if any(a.startswith("s3:") for a in st["Action"])
    ]
    where = [(st["Action"], st["Resource"]) for st in s3]
    expected = [(["s3:PutObject"], [f"arn:aws:s3:::{env['RECORD_BUCKET']}/us-west-2/idle-guard/*"])]
    assert (env["RECORD_PREFIX"], where) == ("us-west-2/idle-guard", expected), (env, where)


def test_zero_idle_minutes_renders_no_guard():
    r = render(gpuIdleMinutes="0")
    assert not [x.name for x in r.records if "idle-guard" in x.name]


def test_under_irsa_the_guard_account_names_its_role_and_has_no_association():
    r = render(podIdentityMode="irsa")
    account = next(x for x in r.records if x.type == "kubernetes:core/v1:ServiceAccount" and "idle-guard" in x.name)
    role = next(x for x in r.records if x.type == "aws:iam/role:Role" and "idle-guard" in x.name)
    trust = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert "eks.amazonaws.com/role-arn" in account.inputs["metadata"]["annotations"], account.inputs
    assert "system:serviceaccount:ray:idle-guard" in trust.values(), trust
    assert not [x for x in r.records if x.type.endswith("PodIdentityAssociation") and "idle-guard" in x.name]
