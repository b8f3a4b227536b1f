"""The AWS target's run-state lookups (issue 48, under mutation testing): which run a command checks, which job
`attach` follows and the run it belongs to, the reading kept for it, and the worker pods whose NCCL logs an ended
attempt leaves.

The cluster is the recorded one of tests/fixtures/k8s/ behind tests/support/_driver_helpers.py's fake Kubernetes API
(two Running worker pods of RayCluster ray/ray-efa); `Exec` is a `PodExec` (automation/kube.py) that records each
call and answers `ls` as the pod's shell would. The run bucket is a stand-in of boto3's S3 client whose
``get_object`` returns ``{"Body": <a readable stream>}`` and raises NoSuchKey as a ClientError for a missing key
(botocore's s3 service model, GetObject).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import pytest
from _ray_jobs import Clock, FakeRayJobs, JobScript
from botocore.exceptions import ClientError

from automation.errors import DriverError
from automation.kube import ExecResult
from automation.pipeline import PipelineResult, RunState, StepResult, TrainOutcome
from automation.run_files import set_aside_command
from automation.targets.aws import AwsDeps, AwsRun, AwsTarget, newest_cluster_run
from workloads.config import TrainConfig

WORKERS = ["ray-efa-gpu-workers-worker-4kq7d", "ray-efa-gpu-workers-worker-tz8mb"]  # pods.json's Ray workers
BUCKET = "ray-efa-eks-us-west-2-render"
LS_RUNS = ["sh", "-c", "ls -1t /tmp/ray-efa-eks/runs 2>/dev/null | head -n 1"]


@dataclass
class Exec:
    """Each exec's (pod, namespace, command, timeout) kept; every command answered ``answer``."""

    answer: ExecResult = field(default_factory=lambda: ExecResult(0, "r9\n", ""))
    calls: list[tuple[str, str, list[str], float]] = field(default_factory=list)

    def __call__(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600):
        self.calls.append((pod, namespace, list(command), timeout_s))
        return self.answer


@dataclass
class RunBucket:
    """boto3's S3 client as `kept_counters` calls it: objects by key, the keys asked for kept."""

    objects: dict[str, bytes] = field(default_factory=dict)
    asked: list[tuple[str, str]] = field(default_factory=list)

    def get_object(self, Bucket, Key):  # noqa: N803 - boto3's parameter names
        self.asked.append((Bucket, Key))
        if Key not in self.objects:
            raise ClientError({"Error": {"Code": "NoSuchKey", "Message": "missing"}}, "GetObject")
        return {"Body": io.BytesIO(self.objects[Key])}


@pytest.fixture
def api():
    with helpers.FakeKubeApi() as api:
        yield api


def s3_only(bucket):
    def client(name):
        assert name == "s3", f"expected the run bucket's S3 client, asked for {name!r}"
        return bucket or RunBucket()

    return client


def target(
    api, pod_exec=None, bucket=None, storage_uri=f"s3://{BUCKET}/us-west-2/runs", job_modules=None, **flags
) -> AwsTarget:
    outputs = {
        "kubeconfig": json.dumps(api.kubeconfig()),
        "raycluster_name": "ray-efa",
        "raycluster_namespace": "ray",
        "storage_uri": storage_uri,
    }
    deps = AwsDeps(
        client=s3_only(bucket),
        stack=lambda: helpers.FakeStack("us-west-2", outputs=outputs),
        kube=lambda kc: helpers.KubeWithExec(kc, pod_exec or Exec()),
        job_modules=job_modules,
    )
    return AwsTarget(AwsRun(helpers.stack_config(), "r1", **flags), deps)


# ---- the run `check` and `logs` read -------------------------------------------------------------------------
def test_the_newest_run_is_asked_of_the_named_pod_in_a_minute():
    pod_exec = Exec(ExecResult(0, "r9\n", ""))
    got = (newest_cluster_run(pod_exec, "w-1", "ray"), pod_exec.calls)
    assert got == ("r9", [("w-1", "ray", LS_RUNS, 60)]), f"expected r9 from `ls -1t` in ray/w-1 in 60 s, got {got}"


@pytest.mark.parametrize(
    "answer", [ExecResult(0, "\n", ""), ExecResult(2, "r9\n", "ls: cannot access")], ids=["empty", "failed-ls"]
)
def test_no_run_in_the_pod_asks_for_a_run_id_with_exit_2(answer):
    with pytest.raises(DriverError) as e:
        newest_cluster_run(Exec(answer), "w-1", "ray")
    want = "no run under /tmp/ray-efa-eks/runs in ray/w-1: run `train` first or pass --run-id"
    assert (str(e.value), e.value.exit_code) == (want, 2), f"expected {want!r} (exit 2), got {e.value!r}"


def test_the_checked_run_is_the_given_run_id_without_asking_a_pod(api):
    pod_exec = Exec()
    got = (target(api, pod_exec, run_id_given=True).checked_run_id(), pod_exec.calls)
    assert got == ("r1", []), f"expected --run-id r1 and no exec, got {got}"


def test_the_checked_run_is_the_newest_in_the_first_worker_pod(api):
    pod_exec = Exec()
    got = (target(api, pod_exec).checked_run_id(), pod_exec.calls)
    assert got == ("r9", [(WORKERS[0], "ray", LS_RUNS, 60)]), f"expected r9 read in {WORKERS[0]}, got {got}"


# ---- the job `attach` follows --------------------------------------------------------------------------------
def test_attach_to_a_resumed_job_continues_the_run_it_resumed(api):
    t = target(api, attach_job="r7-resumed-0042")
    job = t.find_job()
    got = (job.job_id, t.run_id, job.train_cfg.run_id)
    assert got == ("r7-resumed-0042", "r7", "r7"), f"expected job r7-resumed-0042 of run r7, got {got}"


def test_a_resumed_jobs_kept_reading_is_its_runs(api):
    key = "us-west-2/runs/r7/efa_counters_before.json"
    bucket = RunBucket({key: json.dumps({"nodes": {}}).encode()})
    got = (target(api, bucket=bucket).kept_counters("r7-resumed-0042"), bucket.asked)
    assert got == ({"nodes": {}}, [(BUCKET, key)]), f"expected run r7's reading, got {got}"


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"not json"], ids=["list", "string", "not-json"])
def test_a_kept_reading_that_is_not_an_object_is_none(api, body):
    bucket = RunBucket({"us-west-2/runs/r1/efa_counters_before.json": body})
    got = target(api, bucket=bucket).kept_counters("r1")
    assert got is None, f"expected no reading from {body!r}, got {got!r}"


# ---- an ended attempt's NCCL logs ----------------------------------------------------------------------------
def test_each_worker_pods_nccl_logs_of_the_ended_attempt_are_set_aside_in_a_minute(api):
    pod_exec = Exec(ExecResult(0, "", ""))
    target(api, pod_exec).set_aside_nccl_logs(2)
    move = set_aside_command("/tmp/ray-efa-eks/runs/r1/nccl", 2)
    want = [(pod, "ray", move, 60) for pod in WORKERS]
    assert sorted(pod_exec.calls) == want, f"expected {want}, got {pod_exec.calls}"


def test_no_worker_pod_to_read_a_run_from_names_the_raycluster():
    objects = helpers.load_k8s()
    objects["pods"]["items"] = [p for p in objects["pods"]["items"] if p["metadata"]["name"] not in WORKERS]
    with helpers.FakeKubeApi(objects) as bare, pytest.raises(DriverError) as e:
        target(bare).checked_run_id()
    want = "no worker pods of RayCluster ray/ray-efa to read NCCL logs from"
    assert str(e.value) == want, f"expected {want!r}, got {e.value!r}"


def test_each_worker_pod_is_mapped_to_its_node(api):
    got = target(api).host_nodes()
    want = {
        WORKERS[0]: "ip-10-30-1-17.us-west-2.compute.internal",
        WORKERS[1]: "ip-10-30-1-204.us-west-2.compute.internal",
    }
    assert got == want, f"expected the two Ray workers' nodes (pods.json), got {got}"


# ---- where a run's files and kept logs are -------------------------------------------------------------------
@dataclass
class ListedBucket(RunBucket):
    """RunBucket with boto3's list_objects_v2 paginator (one page of every key under the prefix)."""

    listed: list[str] = field(default_factory=list)

    def get_paginator(self, name):
        bucket = self

        class Pages:
            def paginate(self, Bucket, Prefix):  # noqa: N803 - boto3's parameter names
                bucket.listed.append(Prefix)
                return [{"Contents": [{"Key": k} for k in bucket.objects if k.startswith(Prefix)]}]

        return Pages()


def test_a_resumed_jobs_kept_logs_are_read_under_its_runs_prefix(api, tmp_path):
    key = "us-west-2/runs/r7/logs/nccl/w-1/nccl.log"
    bucket = ListedBucket({key: b"NCCL INFO"})
    files = target(api, bucket=bucket).kept_logs("r7-resumed-0042", tmp_path, "nccl/")
    got = ([p.relative_to(tmp_path).as_posix() for p in files], bucket.listed)
    assert got == (["w-1/nccl.log"], ["us-west-2/runs/r7/logs/nccl/"]), f"expected run r7's kept log, got {got}"


@pytest.mark.parametrize("followed, run", [("r1-resumed-0042", "r1-resumed-0042"), (None, "r1")])
def test_the_runs_files_are_named_by_the_followed_job_else_the_run(api, followed, run):
    follow = (
        None if followed is None else StepResult("follow", "pass", "", data=TrainOutcome(followed, "SUCCEEDED", None))
    )
    got = target(api).files(PipelineResult((), state=RunState(follow=follow)))
    want = (
        f"/tmp/ray-efa-eks/runs/{run} in the RayCluster's pods of stack us-west-2 "
        "(summary.json in the head pod, nccl/ in each worker pod)"
    )
    assert got == want, f"expected {want!r}, got {got!r}"


def test_the_kept_reading_and_logs_keys_keep_a_prefix_that_starts_like_the_stripped_slash(api, tmp_path):
    bucket, prefix, storage_uri = ListedBucket(), "Xruns/r7/", f"s3://{BUCKET}/Xruns"
    t = target(api, bucket=bucket, storage_uri=storage_uri)
    t.kept_counters("r7-resumed-1"), t.kept_logs("r7", tmp_path)
    got = (bucket.asked, bucket.listed)
    want = ([(BUCKET, f"{prefix}efa_counters_before.json")], [f"{prefix}logs/"])
    assert got == want, f"storage {storage_uri}: expected keys {want}, got {got}"


def test_a_cluster_without_a_head_pod_says_which_stack_to_verify(api):
    objects = helpers.load_k8s()
    objects["pods"]["items"] = [p for p in objects["pods"]["items"] if "head" not in p["metadata"]["name"]]
    with helpers.FakeKubeApi(objects) as bare, pytest.raises(DriverError) as e:
        target(bare).jobs()
    assert "`python -m automation verify --stack us-west-2` says why" in str(e.value), str(e.value)


# ---- the job `run` submits -------------------------------------------------------------------------------------
def test_the_submitted_job_logs_nccl_at_info_with_the_runs_env_and_ships_the_jobs_modules(api, tmp_path):
    jobs = FakeRayJobs(Clock(), lambda job_id: JobScript((), run_s=1))
    torchao, asked, said = tmp_path / "torchao", [], []
    torchao.mkdir()

    def exec_(pod, namespace, command, **kw):
        return jobs.answer(pod, list(command)) or ExecResult(0, "", "")  # the uploads

    t = target(
        api, exec_, job_modules=lambda job: asked.append(job.run_id) or [torchao], job_env={"NCCL_NET": "Socket"}
    )
    t.on_progress = said.append
    submitted = t.submit_job(TrainConfig(preset="tiny", run_id="r1", num_workers=2))
    got = (submitted.job_id, jobs.runtime_env("r1"), asked, said)
    want = (
        "r1",
        {"env_vars": {"NCCL_DEBUG": "INFO", "NCCL_NET": "Socket"}, "py_modules": ["/tmp/ray-efa-eks/deps/r1/torchao"]},
        ["r1"],
        ["copying workloads/ into ray-efa-head-9xk2q and submitting job r1"],
    )
    assert got == want, f"expected {want}, got {got}"


# ---- the GPU nodes' counter readers, in the shapes the API returns before their status is filled ----------------
NODE_17, NODE_204 = "ip-10-30-1-17.us-west-2.compute.internal", "ip-10-30-1-204.us-west-2.compute.internal"
READERS = ["efa-counter-reader-m4q9z", "efa-counter-reader-x7d2p"]  # pods.json's, on NODE_204 and NODE_17
FAILED_READ = "x" * 300 + "cat: tx_bytes: No such device"  # longer than the 200 characters a reading keeps


def test_a_node_without_its_efa_count_advertises_none_and_a_reader_not_yet_running_reads_nothing():
    """Node ip-10-30-1-17 lists allocatable without the EFA resource (the device plugin not yet registered); node
    ip-10-30-1-204 has no status yet; its reader pod has no status yet (just created), and a third reader is not yet
    scheduled (spec without nodeName): the Node and Pod objects of the Kubernetes API reference, fields left out."""
    objects = helpers.load_k8s()
    for node in objects["nodes"]["items"]:
        if node["metadata"]["name"] == NODE_17:
            node["status"]["allocatable"].pop("vpc.amazonaws.com/efa")
        if node["metadata"]["name"] == NODE_204:
            del node["status"]
    pods = objects["pods"]["items"]
    reader = next(p for p in pods if p["metadata"]["name"] == "efa-counter-reader-m4q9z")
    del reader["status"]
    unscheduled = json.loads(json.dumps(reader))
    unscheduled["metadata"]["name"], unscheduled["status"] = "efa-counter-reader-zzzzz", {"phase": "Running"}
    del unscheduled["spec"]["nodeName"]
    pods.append(unscheduled)
    with helpers.FakeKubeApi(objects) as api:
        got = {name: (r.advertised, r.error) for name, r in target(api).efa_counters().items()}
    assert (got[NODE_17][0], got[NODE_204]) == (
        0,
        (0, "no Running efa-counter-reader pod on this node (`up` installs its DaemonSet)"),
    ), got


def test_each_nodes_counters_are_read_in_its_reader_pod_in_a_minute_and_a_failed_read_says_why():
    calls = []

    def exec_(pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600):
        calls.append((pod, namespace, command[:2], timeout_s))
        if pod == "efa-counter-reader-x7d2p":
            raise DriverError("the exec stream dropped")
        return ExecResult(3, "", FAILED_READ)

    with helpers.FakeKubeApi() as api:
        got = {name: r.error for name, r in target(api, exec_).efa_counters().items()}
    want = {
        NODE_17: "exec in pod efa-counter-reader-x7d2p failed: the exec stream dropped",
        NODE_204: f"the read in pod efa-counter-reader-m4q9z exited 3: {FAILED_READ[-200:]}",
    }
    assert (got, sorted(calls)) == (want, [(p, "kube-system", ["sh", "-c"], 60) for p in sorted(READERS)]), (got, calls)
