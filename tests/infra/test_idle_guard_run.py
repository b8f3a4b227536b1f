"""The idle guard's run around its decision (infra/idle_guard_script.py): the lease's words and end, what a
decision says, Ray's job list and the Kubernetes API as the pod reaches them, one run's EKS, S3 and record
traffic, and ``main``'s clients. In process: urllib's ``urlopen`` and the EKS, S3 and Kubernetes sides are
stand-ins that record what the guard sends.

The stand-ins follow the sources the script cites: Ray's GET /api/jobs/ answers a JSON list of JobDetails
(https://docs.ray.io/en/latest/cluster/running-applications/job-submission/rest.html); Events are POSTed to
/api/v1/namespaces/NS/events and the record ConfigMap is merge-PATCHed
(https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/event-v1/,
https://kubernetes.io/docs/reference/kubernetes-api/config-and-storage-resources/config-map-v1/); EKS's
DescribeNodegroup answers createdAt/modifiedAt as timestamps and scalingConfig.desiredSize
(https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html).
"""

from __future__ import annotations

import io
import json
import ssl
import sys
import time
import types
import urllib.request
from datetime import UTC, datetime

import pytest

from infra import idle_guard_script as guard
from infra.idle_guard_script import Kube, decide, lease_doc, lease_holds, ray_jobs, run_once

NOW = 1_764_950_400.0  # 2025-12-05T16:00:00Z, an arbitrary clock
MIN = 60.0
ENV = {  # the guard's environment as its CronJob sets it (the keys run_once and main read)
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
def at(jobs, desired=2, status="ACTIVE", changed_min_ago=120.0, idle_minutes=30, idle_nodes=0, lease=None):
    return decide(NOW, jobs, desired, status, NOW - changed_min_ago * MIN, idle_minutes, idle_nodes, lease)


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
    assert ray_jobs(ENV["RAY_JOBS_URL"]) == listed
    assert opened.calls[0][:2] == (ENV["RAY_JOBS_URL"], 10), opened.calls


@pytest.mark.parametrize("answer", [OSError("connection refused"), b"<html>502 Bad Gateway</html>"])
def test_ray_jobs_is_none_when_the_head_is_unreachable_or_answers_no_json(monkeypatch, answer):
    monkeypatch.setattr(urllib.request, "urlopen", Urlopen(answer))
    assert ray_jobs(ENV["RAY_JOBS_URL"]) is None


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


class Recorder:
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


def once(eks=None, kube=None, s3=None, jobs=(), env=ENV):
    eks, kube = eks or Eks(), kube or Recorder()
    asked = []
    rc = run_once(env, eks, kube, s3, jobs_of=lambda url: asked.append(url) or list(jobs), clock=lambda: NOW)
    return rc, eks, kube, asked


def test_a_run_asks_eks_for_the_named_group_and_ray_at_its_url_and_the_lease_in_the_record():
    rc, eks, kube, asked = once()
    assert eks.described == [{"clusterName": "ray-efa-eks", "nodegroupName": "gpu-ng"}], eks.described
    assert (asked, kube.leases) == (["http://ray-head:8265/api/jobs/"], ["idle-guard-record"]), (asked, kube.leases)


def test_an_idle_run_scales_the_named_group_to_the_idle_count():
    env = {**ENV, "IDLE_NODES": "1"}
    rc, eks, _, _ = once(env=env)
    assert (rc, eks.updates) == (
        0,
        [{"clusterName": "ray-efa-eks", "nodegroupName": "gpu-ng", "scalingConfig": {"desiredSize": 1}}],
    ), eks.updates


def test_the_idle_window_is_read_from_the_environment():
    # idle 45 minutes: a 60-minute window keeps the nodes where the default 30 would scale down
    rc, eks, kube, _ = once(env={**ENV, "IDLE_MINUTES": "60"})
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
    env = {k: v for k, v in ENV.items() if k != "POD_NAME"}
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
    assert (put["Bucket"], put["Key"], put["ContentType"]) == (ENV["RECORD_BUCKET"], key, "application/json"), put
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
    once(s3=s3, env={**ENV, "RECORD_PREFIX": "/Xenon/idle-guard/"})
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


def test_a_failed_eks_call_is_written_to_the_run_bucket():
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
    rc, eks, _, _ = once(kube=Recorder(fail=OSError("connection refused")))
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
    env = {**ENV, "KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    monkeypatch.setattr(guard.os, "environ", env)
    assert guard.main() == 0
    assert [(n, r) for n, r, _ in made] == [("eks", "us-west-2"), ("s3", "us-west-2")], made
    assert all(c.retries == {"max_attempts": 1, "mode": "standard"} for _, _, c in made), made
    assert ran == [(env, "eks-client", ("kube", "ray", "https://10.100.0.1:443"), "s3-client")], ran


def test_main_without_boto3_reports_it_and_exits_1(monkeypatch):
    kube = Recorder()
    monkeypatch.setattr(guard, "Kube", lambda ns, host: kube)
    monkeypatch.setitem(sys.modules, "boto3", None)  # `import boto3` raises ImportError
    env = {**ENV, "KUBERNETES_SERVICE_HOST": "10.100.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    monkeypatch.setattr(guard.os, "environ", env)
    assert guard.main() == 1
    assert kube.events[0][:1] == ("Warning",) and "boto3 is not in the image" in kube.events[0][1], kube.events
    assert kube.events[0][2] == "idle-guard-29412345-abcde", kube.events
    assert kube.records[0][1]["action"] == "error" and "at" in kube.records[0][1], kube.records


def test_main_without_boto3_in_a_pod_without_a_name_reports_as_idle_guard(monkeypatch):
    kube = Recorder()
    monkeypatch.setattr(guard, "Kube", lambda ns, host: kube)
    monkeypatch.setitem(sys.modules, "boto3", None)
    env = {k: v for k, v in ENV.items() if k != "POD_NAME"}
    monkeypatch.setattr(guard.os, "environ", {**env, "KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "1"})
    guard.main()
    assert kube.events[0][2] == "idle-guard", kube.events
