"""The idle guard's run (infra/idle_guard_script.py) against moto's EKS and S3, a stand-in Ray job server and a stand-in
Kubernetes API (local HTTP servers answering the paths the script uses: Ray's GET /api/jobs/, the core/v1 Events
POST and ConfigMap merge PATCH); and the guard in the render (infra/idle_guard.py)."""

from __future__ import annotations

import io
import json
import ssl
import sys
import threading
import time
import types
import urllib.request
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer

import boto3
import certifi
import pytest
from _shared_env import MOTO_CLUSTER, MOTO_NODEGROUP, MOTO_REGION
from botocore.exceptions import ClientError
from conftest import REPO
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from infra import idle_guard_script as guard
from infra.config import PROJECT, stack_config_values
from infra.idle_guard_script import Kube, decide, lease_doc, lease_holds, ray_jobs, run_once
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


# ---- The idle guard's decision (infra/idle_guard_script.py, ``decide``): pure, one reason to act or not each.

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


def test_already_at_the_idle_count_does_nothing_so_it_scales_down_once():
    d = at([job("SUCCEEDED", 300)], desired=0)
    assert d.action == "nothing", d


def test_an_unreadable_job_api_keeps_the_nodes():
    assert at(None).action == "keep"


def test_a_node_group_that_is_updating_waits():
    assert at([], status="UPDATING").action == "wait"


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


# ---- The idle guard's run around its decision (infra/idle_guard_script.py): the lease's words and end, what a
# decision says, Ray's job list and the Kubernetes API as the pod reaches them, one run's EKS, S3 and record
# traffic, and ``main``'s clients. In process: urllib's ``urlopen`` and the EKS, S3 and Kubernetes sides are
# stand-ins that record what the guard sends.
#
# The stand-ins follow the sources the script cites: Ray's GET /api/jobs/ answers a JSON list of JobDetails
# (https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html); Events are POSTed to
# /api/v1/namespaces/NS/events and the record ConfigMap is merge-PATCHed
# (https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/,
# https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/config-map-v1/); EKS's
# DescribeNodegroup answers createdAt/modifiedAt as timestamps and scalingConfig.desiredSize
# (https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html).

RUN_ENV = {  # the guard's environment as its CronJob sets it (the keys run_once and main read)
    "CLUSTER_NAME": "ray-efa-eks",
    "NODEGROUP_NAME": "gpu-ng",
    "IDLE_MINUTES": "30",
    "IDLE_NODES": "0",
    "RAY_JOBS_URL": "http://ray-head:8265/api/jobs/",
    "RECORD_NAME": "idle-guard-record",
    "NAMESPACE": "ray",
    "RECORD_BUCKET": "ray-efa-eks-us-west-2-runs",
    "RECORD_PREFIX": "/us-west-2/idle-guard/",
    "AWS_REGION": "us-west-2",
    "POD_NAME": "idle-guard-29412345-abcde",
}


# ---- the lease -------------------------------------------------------------------------------------------------
def test_the_lease_the_driver_writes_is_the_lease_the_guard_reads():
    doc = lease_doc("r9", "scaling up", NOW + 5 * MIN)
    assert doc == {"run": "r9", "what": "scaling up", "until": NOW + 5 * MIN}, doc
    assert lease_holds(doc, NOW) == "run r9 scaling up, lease until 16:05:00Z"


def test_a_held_lease_names_its_run_what_it_does_and_its_end_in_utc():
    got = lease_holds({"run": "r9", "what": "scaling up", "until": NOW + 5 * MIN}, NOW)
    assert got == "run r9 scaling up, lease until 16:05:00Z", got


@pytest.fixture
def tokyo(monkeypatch):
    """The process in a time zone 9 hours from UTC: the guard's times must still be UTC."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_a_leases_end_is_said_in_utc_whatever_the_local_zone(tokyo):
    assert lease_holds({"run": "r9", "until": NOW + 5 * MIN}, NOW).endswith("lease until 16:05:00Z")


def test_a_lease_without_what_is_a_starting_run():
    got = lease_holds({"run": "r9", "until": NOW + 5 * MIN}, NOW)
    assert got == "run r9 starting, lease until 16:05:00Z", got


def test_a_lease_that_ends_this_second_no_longer_holds():
    assert lease_holds({"run": "r9", "until": NOW}, NOW) == ""


def test_a_lease_one_second_from_its_end_still_holds():
    assert lease_holds({"run": "r9", "until": NOW + 1}, NOW) != ""


@pytest.mark.parametrize("lease", [None, {}, {"run": "r9", "until": None}, {"run": "r9", "until": [1]}])
def test_no_lease_or_one_without_an_end_holds_nothing(lease):
    assert lease_holds(lease, NOW) == "", lease


# ---- what a decision says --------------------------------------------------------------------------------------


def test_a_running_job_without_a_submission_id_is_named_by_its_job_id():
    d = at([{"job_id": "02000000", "status": "RUNNING"}])
    assert d.reason == "Ray job 02000000 is RUNNING", d


def test_a_running_job_is_named_by_its_submission_id():
    d = at([{"submission_id": "raysubmit_1", "job_id": "02000000", "status": "PENDING"}])
    assert d.reason == "Ray job raysubmit_1 is PENDING", d


def test_a_decision_carries_the_group_size_and_the_idle_count():
    d = at([], desired=3, idle_nodes=1, changed_min_ago=5)
    assert (d.desired, d.target) == (3, 1), d


def test_a_scale_down_says_how_long_it_was_idle_and_the_limit():
    d = at([], changed_min_ago=45)
    assert d.reason == "no Ray job for 45 minutes (the stack's idle limit is 30)", d


def test_a_group_at_the_idle_count_says_its_size_and_what_the_stack_keeps():
    d = at([], desired=1, idle_nodes=1)
    assert d.reason == "the node group is at 1 node(s), the stack keeps 1 between runs", d


def test_a_busy_group_names_its_status():
    d = at([], status="UPDATING")
    assert d.reason == "the node group is UPDATING: decide when it is ACTIVE", d


def test_a_finished_job_without_an_end_time_is_not_activity():
    # Ray lists a job that never started with end_time null; it must neither crash nor count as just ended
    d = at([{"submission_id": "r1", "status": "FAILED", "end_time": None}], changed_min_ago=45)
    assert d.action == "scale-down", d


def test_zero_idle_minutes_say_the_guard_is_off():
    assert at([], idle_minutes=0).reason == "the stack's idle minutes are 0: the guard is off"


def test_an_unreadable_job_api_says_a_job_may_be_running():
    assert at(None).reason == "the Ray job API could not be read: a job may be running"


def test_negative_idle_minutes_turn_the_guard_off_too():
    assert at([], idle_minutes=-1).action == "nothing"


# ---- Ray's job list and the Kubernetes API through urllib -----------------------------------------------------
class Urlopen:
    """urllib.request.urlopen as the guard calls it: records (request or url, timeout, context) and answers
    ``answer`` (bytes) or raises it (an exception)."""

    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def __call__(self, req, timeout=None, context=None):
        self.calls.append((req, timeout, context))
        if isinstance(self.answer, Exception):
            raise self.answer
        return io.BytesIO(self.answer)


def test_ray_jobs_is_the_parsed_list_asked_with_a_ten_second_timeout(monkeypatch):
    listed = [{"submission_id": "r1", "status": "RUNNING", "end_time": None}]
    opened = Urlopen(json.dumps(listed).encode())
    monkeypatch.setattr(urllib.request, "urlopen", opened)
    assert ray_jobs(RUN_ENV["RAY_JOBS_URL"]) == listed
    assert opened.calls[0][:2] == (RUN_ENV["RAY_JOBS_URL"], 10), opened.calls


@pytest.mark.parametrize("answer", [OSError("connection refused"), b"<html>502 Bad Gateway</html>"])
def test_ray_jobs_is_none_when_the_head_is_unreachable_or_answers_no_json(monkeypatch, answer):
    monkeypatch.setattr(urllib.request, "urlopen", Urlopen(answer))
    assert ray_jobs(RUN_ENV["RAY_JOBS_URL"]) is None


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """A Kube of namespace ``ray`` with a ServiceAccount folder of its own; the TLS context is a marker."""
    (tmp_path / "token").write_text("sa-token\n")
    contexts = []
    monkeypatch.setattr(ssl, "create_default_context", lambda cafile=None: contexts.append(cafile) or "tls")
    k = Kube("ray", "https://10.100.0.1:443", sa_dir=str(tmp_path))
    assert contexts == [f"{tmp_path}/ca.crt"], f"the pod's CA is not the one trusted: {contexts}"
    return k


def _sent(opened: Urlopen):
    req, timeout, context = opened.calls[-1]
    return req, json.loads(req.data), timeout, context


def test_an_event_is_posted_to_the_namespace_with_the_pods_token(kube, monkeypatch):
    opened = Urlopen(b"{}")
    monkeypatch.setattr(urllib.request, "urlopen", opened)
    kube.event("Warning", "error: EKS call failed", "idle-guard-1")
    req, body, timeout, context = _sent(opened)
    assert (req.get_method(), req.full_url) == ("POST", "https://10.100.0.1:443/api/v1/namespaces/ray/events"), req
    assert (req.get_header("Authorization"), req.get_header("Content-type")) == (
        "Bearer sa-token",
        "application/json",
    ), req.headers
    assert (timeout, context) == (10, "tls"), (timeout, context)
    assert body["metadata"] == {"generateName": "idle-guard.", "namespace": "ray"}, body


def test_an_event_names_the_pod_reason_type_source_and_time(kube, monkeypatch):
    opened = Urlopen(b"{}")
    monkeypatch.setattr(urllib.request, "urlopen", opened)
    kube.event("Warning", "error: EKS call failed", "idle-guard-1")
    body = _sent(opened)[1]
    stamp = body["firstTimestamp"]
    assert datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ"), stamp
    assert body == {
        "metadata": {"generateName": "idle-guard.", "namespace": "ray"},
        "involvedObject": {"kind": "Pod", "namespace": "ray", "name": "idle-guard-1"},
        "reason": "IdleGuard",
        "message": "error: EKS call failed",
        "type": "Warning",
        "source": {"component": "ray-efa-eks-idle-guard"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }, body


def test_an_events_time_is_utc_whatever_the_local_zone(kube, monkeypatch, tokyo):
    opened = Urlopen(b"{}")
    monkeypatch.setattr(urllib.request, "urlopen", opened)
    before = datetime.now(UTC).replace(microsecond=0)
    kube.event("Normal", "m", "idle-guard-1")
    stamp = datetime.strptime(_sent(opened)[1]["firstTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert abs((stamp - before).total_seconds()) < 60, f"{stamp} is not the UTC time {before}"


def test_an_events_message_is_cut_to_a_thousand_characters(kube, monkeypatch):
    opened = Urlopen(b"{}")
    monkeypatch.setattr(urllib.request, "urlopen", opened)
    kube.event("Normal", "x" * 1001, "idle-guard-1")
    assert len(_sent(opened)[1]["message"]) == 1000


def test_the_record_is_merge_patched_as_sorted_json_under_last(kube, monkeypatch):
    opened = Urlopen(b"{}")
    monkeypatch.setattr(urllib.request, "urlopen", opened)
    kube.record("idle-guard-record", {"reason": "r", "action": "keep"})
    req, body, timeout, context = _sent(opened)
    assert (req.get_method(), req.full_url, req.get_header("Content-type")) == (
        "PATCH",
        "https://10.100.0.1:443/api/v1/namespaces/ray/configmaps/idle-guard-record",
        "application/merge-patch+json",
    ), req
    assert body == {"data": {"last": '{"action": "keep", "reason": "r"}'}}, body
    assert req.get_header("Authorization") == "Bearer sa-token"


def test_the_lease_is_read_from_the_record_with_the_pods_token(kube, monkeypatch):
    lease = {"run": "r1", "what": "starting", "until": NOW}
    opened = Urlopen(json.dumps({"data": {"last": "{}", "lease": json.dumps(lease)}}).encode())
    monkeypatch.setattr(urllib.request, "urlopen", opened)
    assert kube.lease("idle-guard-record") == lease
    req, timeout, context = opened.calls[0]
    assert (req.full_url, req.get_header("Authorization"), timeout, context) == (
        "https://10.100.0.1:443/api/v1/namespaces/ray/configmaps/idle-guard-record",
        "Bearer sa-token",
        10,
        "tls",
    ), req


@pytest.mark.parametrize(
    "answer",
    [
        OSError("404 Not Found"),
        b"not json",
        json.dumps({"data": {"last": "{}"}}).encode(),  # no lease key
        json.dumps({"kind": "ConfigMap"}).encode(),  # a ConfigMap without data
        json.dumps({"data": {"lease": "[1, 2]"}}).encode(),  # a lease that is not an object
        json.dumps({"data": {"lease": "{"}}).encode(),  # a lease that is not JSON
        json.dumps([1]).encode(),  # an answer that is not an object
    ],
)
def test_a_missing_or_unreadable_lease_is_none(kube, monkeypatch, answer):
    monkeypatch.setattr(urllib.request, "urlopen", Urlopen(answer))
    assert kube.lease("idle-guard-record") is None


# ---- one run: EKS, S3 and what is reported -------------------------------------------------------------------
IDLE_SINCE = datetime.fromtimestamp(NOW - 45 * MIN, UTC)  # the group's last change: 45 minutes before NOW


class Eks:
    """EKS's DescribeNodegroup answer for a group changed ``changed`` (a datetime, or epoch seconds as a number)
    and the UpdateNodegroupConfig calls made; ``fail`` raises on the describe."""

    def __init__(self, changed=IDLE_SINCE, desired=2, fail=None):
        self.group = {"modifiedAt": changed, "status": "ACTIVE", "scalingConfig": {"desiredSize": desired}}
        self.fail, self.described, self.updates = fail, [], []

    def describe_nodegroup(self, **kw):
        self.described.append(kw)
        if self.fail:
            raise self.fail
        return {"nodegroup": self.group}

    def update_nodegroup_config(self, **kw):
        self.updates.append(kw)


class KubeRecorder:
    """The guard's Kubernetes side: events, records and the lease asked for; ``fail`` raises on the event."""

    def __init__(self, fail=None):
        self.fail, self.events, self.records, self.leases = fail, [], [], []

    def event(self, kind, message, pod):
        if self.fail:
            raise self.fail
        self.events.append((kind, message, pod))

    def record(self, name, doc):
        self.records.append((name, doc))

    def lease(self, name):
        self.leases.append(name)
        return None


class S3:
    """S3's PutObject calls; ``fail`` raises instead."""

    def __init__(self, fail=None):
        self.fail, self.puts = fail, []

    def put_object(self, **kw):
        if self.fail:
            raise self.fail
        self.puts.append(kw)


def once(eks=None, kube=None, s3=None, jobs=(), env=RUN_ENV):
    eks, kube = eks or Eks(), kube or KubeRecorder()
    asked = []
    rc = run_once(env, eks, kube, s3, jobs_of=lambda url: asked.append(url) or list(jobs), clock=lambda: NOW)
    return rc, eks, kube, asked


def test_a_run_asks_eks_for_the_named_group_and_ray_at_its_url_and_the_lease_in_the_record():
    rc, eks, kube, asked = once()
    assert eks.described == [{"clusterName": "ray-efa-eks", "nodegroupName": "gpu-ng"}], eks.described
    assert (asked, kube.leases) == (["http://ray-head:8265/api/jobs/"], ["idle-guard-record"]), (asked, kube.leases)


def test_an_idle_run_scales_the_named_group_to_the_idle_count():
    env = {**RUN_ENV, "IDLE_NODES": "1"}
    rc, eks, _, _ = once(env=env)
    assert (rc, eks.updates) == (
        0,
        [{"clusterName": "ray-efa-eks", "nodegroupName": "gpu-ng", "scalingConfig": {"desiredSize": 1}}],
    ), eks.updates


def test_the_idle_window_is_read_from_the_environment():
    # idle 45 minutes: a 60-minute window keeps the nodes where the default 30 would scale down
    rc, eks, kube, _ = once(env={**RUN_ENV, "IDLE_MINUTES": "60"})
    assert eks.updates == [] and kube.records[0][1]["action"] == "keep", kube.records


def test_a_group_change_given_as_epoch_seconds_counts_as_activity():
    rc, eks, _, _ = once(eks=Eks(changed=NOW - 5 * MIN))
    assert (rc, eks.updates) == (0, []), f"a group changed 5 minutes ago (epoch seconds): rc {rc}, {eks.updates}"


def test_a_group_created_minutes_ago_and_never_modified_keeps_its_nodes():
    eks = Eks()
    del eks.group["modifiedAt"]
    eks.group["createdAt"] = datetime.fromtimestamp(NOW - 5 * MIN, UTC)
    rc, eks, _, _ = once(eks=eks)
    assert (rc, eks.updates) == (0, []), f"a group created 5 minutes ago: rc {rc}, {eks.updates}"


def test_a_decision_is_recorded_and_told_as_a_normal_event_of_the_pod():
    rc, _, kube, _ = once(jobs=[{"submission_id": "r1", "status": "RUNNING"}])
    assert kube.events == [("Normal", "keep: Ray job r1 is RUNNING", "idle-guard-29412345-abcde")], kube.events
    assert kube.records == [
        (
            "idle-guard-record",
            {"action": "keep", "reason": "Ray job r1 is RUNNING", "desired": 2, "target": 0, "at": NOW},
        )
    ], kube.records


def test_a_pod_without_a_name_reports_as_idle_guard():
    env = {k: v for k, v in RUN_ENV.items() if k != "POD_NAME"}
    rc, _, kube, _ = once(env=env)
    assert kube.events[0][2] == "idle-guard", kube.events


def test_a_failed_eks_call_exits_1_and_is_recorded_as_an_error_and_a_warning():
    rc, eks, kube, _ = once(eks=Eks(fail=RuntimeError("no route to host")))
    message = "EKS call for node group gpu-ng failed: RuntimeError: no route to host"
    assert rc == 1, rc
    assert kube.events == [("Warning", f"error: {message}", "idle-guard-29412345-abcde")], kube.events
    assert kube.records == [("idle-guard-record", {"action": "error", "reason": message, "at": NOW})], kube.records


def test_a_scale_down_is_written_to_the_run_bucket_under_the_stacks_prefix():
    s3 = S3()
    rc, _, kube, _ = once(s3=s3)
    (put,) = s3.puts
    key = "us-west-2/idle-guard/20251205T160000Z.json"
    assert (put["Bucket"], put["Key"], put["ContentType"]) == (RUN_ENV["RECORD_BUCKET"], key, "application/json"), put
    doc = json.loads(put["Body"])
    assert (doc["action"], doc["cluster"], doc["nodegroup"], doc["at"]) == (
        "scale-down",
        "ray-efa-eks",
        "gpu-ng",
        NOW,
    ), doc
    assert put["Body"] == json.dumps(doc, sort_keys=True).encode(), "the stored object is not sorted JSON bytes"


def test_the_objects_name_is_the_utc_time_under_a_prefix_trimmed_of_slashes(tokyo):
    s3 = S3()
    once(s3=s3, env={**RUN_ENV, "RECORD_PREFIX": "/Xenon/idle-guard/"})
    assert s3.puts[0]["Key"] == "Xenon/idle-guard/20251205T160000Z.json", s3.puts


def test_the_record_and_the_event_say_where_the_scale_down_was_written():
    rc, _, kube, _ = once(s3=S3())
    where = "s3://ray-efa-eks-us-west-2-runs/us-west-2/idle-guard/20251205T160000Z.json"
    assert kube.records[0][1]["s3"] == where, kube.records
    assert kube.events[0][0] == "Normal" and kube.events[0][1].startswith("scale-down: no Ray job for 45 minutes")
    assert kube.events[0][1].endswith(f" ({where})"), kube.events


def test_what_the_guard_decided_is_printed_to_its_log(capsys):
    once(jobs=[{"submission_id": "r1", "status": "RUNNING"}])
    assert capsys.readouterr().out == "keep: Ray job r1 is RUNNING\n"


def test_an_eks_call_failing_on_the_network_is_written_to_the_run_bucket():
    s3 = S3()
    once(eks=Eks(fail=RuntimeError("no route to host")), s3=s3)
    assert [json.loads(p["Body"])["action"] for p in s3.puts] == ["error"], s3.puts


def test_a_kept_decision_writes_nothing_to_the_run_bucket():
    s3 = S3()
    once(s3=s3, jobs=[{"submission_id": "r1", "status": "RUNNING"}])
    assert s3.puts == []


def test_a_failed_bucket_write_is_a_warning_beside_a_scale_down_that_stands():
    rc, eks, kube, _ = once(s3=S3(fail=RuntimeError("AccessDenied")))
    error = (
        "writing s3://ray-efa-eks-us-west-2-runs/us-west-2/idle-guard/20251205T160000Z.json failed: "
        "RuntimeError: AccessDenied"
    )
    assert (rc, len(eks.updates)) == (0, 1), (rc, eks.updates)
    assert kube.records[0][1]["s3_error"] == error, kube.records
    assert kube.events[0][0] == "Warning" and kube.events[0][1].endswith(f" ({error})"), kube.events


def test_an_unreachable_api_server_is_printed_and_the_run_still_succeeds(capsys):
    rc, eks, _, _ = once(kube=KubeRecorder(fail=OSError("connection refused")))
    err = capsys.readouterr().err
    assert (rc, len(eks.updates)) == (0, 1), (rc, eks.updates)
    assert "could not write the event or the record: connection refused" in err, err


# ---- main: the clients the pod builds -------------------------------------------------------------------------
def test_main_asks_eks_and_s3_in_the_pods_region_with_a_single_attempt(monkeypatch):
    made, ran = [], []
    monkeypatch.setattr(guard, "Kube", lambda ns, host: ("kube", ns, host))
    monkeypatch.setattr(guard, "run_once", lambda env, eks, kube, s3: ran.append((env, eks, kube, s3)) or 0)
    fake = types.SimpleNamespace(
        client=lambda name, region_name, config: made.append((name, region_name, config)) or f"{name}-client"
    )
    monkeypatch.setitem(sys.modules, "boto3", fake)
    env = {**RUN_ENV, "KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    monkeypatch.setattr(guard.os, "environ", env)
    assert guard.main() == 0
    assert [(n, r) for n, r, _ in made] == [("eks", "us-west-2"), ("s3", "us-west-2")], made
    assert all(c.retries == {"max_attempts": 1, "mode": "standard"} for _, _, c in made), made
    assert ran == [(env, "eks-client", ("kube", "ray", "https://10.100.0.1:443"), "s3-client")], ran


def test_main_without_boto3_reports_it_and_exits_1(monkeypatch):
    kube = KubeRecorder()
    monkeypatch.setattr(guard, "Kube", lambda ns, host: kube)
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` raises ImportError
    env = {**RUN_ENV, "KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    monkeypatch.setattr(guard.os, "environ", env)
    assert guard.main() == 1
    assert kube.events[0][:1] == ("Warning",) and "boto3 is not in the image" in kube.events[0][1], kube.events
    assert kube.events[0][2] == "idle-guard-29412345-abcde", kube.events
    assert kube.records[0][1]["action"] == "error" and "at" in kube.records[0][1], kube.records


def test_main_without_boto3_in_a_pod_without_a_name_reports_as_idle_guard(monkeypatch):
    kube = KubeRecorder()
    monkeypatch.setattr(guard, "Kube", lambda ns, host: kube)
    monkeypatch.setitem(sys.modules, "boto3", None)
    env = {k: v for k, v in RUN_ENV.items() if k != "POD_NAME"}
    monkeypatch.setattr(guard.os, "environ", {**env, "KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"})
    guard.main()
    assert kube.events[0][2] == "idle-guard", kube.events


# ---- Properties of the idle guard's decision (infra/idle_guard_script.py, ``decide``) over job lists of any length,
# order and mix, and the limits it enforces, on both sides.
#
# Ray's job list (GET /api/jobs/) holds JobDetails with ``status`` one of PENDING, RUNNING, STOPPED, SUCCEEDED,
# FAILED and ``end_time`` in milliseconds since the epoch
# (https://docs.ray.io/en/latest/cluster/running-applications/job-submission/doc/ray.job_submission.JobStatus.html,
# https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html): the strategies below
# draw only such jobs.

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)
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


DECIDE_ENV = {
    "CLUSTER_NAME": "ray-efa-eks",
    "NODEGROUP_NAME": "gpu-ng",
    "IDLE_MINUTES": "30",
    "IDLE_NODES": "0",
    "RAY_JOBS_URL": "http://ray-head:8265/api/jobs/",
    "RECORD_NAME": "idle-guard-record",
}


def _updates(eks: _Eks) -> list[dict]:
    from infra.idle_guard_script import run_once

    rc = run_once(DECIDE_ENV, eks, _Kube(), None, jobs_of=lambda url: [], clock=lambda: NOW)
    assert rc == 0, "the guard's run failed, so its decision was never made"
    return eks.updates


def test_a_scale_up_minutes_ago_on_a_group_created_long_ago_keeps_the_nodes():
    # `run` scaled the group up 5 minutes ago (modifiedAt); it was created 30 days ago (createdAt)
    assert _updates(_Eks(created_ago_s=30 * DAY_S, modified_ago_s=5 * 60)) == [], "scaled down a fresh scale-up"


def test_a_group_never_modified_counts_from_its_creation():
    got = _updates(_Eks(created_ago_s=2 * WINDOW_S, modified_ago_s=None))
    assert got == [{"clusterName": "ray-efa-eks", "nodegroupName": "gpu-ng", "scalingConfig": {"desiredSize": 0}}], got
