"""The AWS target's train step with the run bucket: the durable flags reach `ray job submit`, and
`--resume` of a run the bucket does not hold stops before anything is submitted."""

from __future__ import annotations

import dataclasses

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
import pytest
from _aws_run import REGION, aws, cluster_exec, make_target, outputs, run  # noqa: F401 (aws: fixture)
from _pod_requests import PodAction, asks

from automation.errors import DriverError
from automation.kube import ExecResult
from automation.storage import CHECKPOINT_EVERY, MAX_FAILURES
from workloads.config import TrainConfig

STEPS = ("submit", "follow")
pytestmark = pytest.mark.usefixtures("aws")  # moto for every AWS client


def _submitted(pod_exec) -> list[str]:
    cmds = [c[2] for c in pod_exec.calls if c[2][:3] == ["ray", "job", "submit"]]
    assert len(cmds) == 1, f"expected one ray job submit, got {len(cmds)}"
    return cmds[0]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_train_submits_a_durable_job_and_reports_where_the_run_lives():
    pod_exec = cluster_exec()
    with helpers.FakeKubeApi() as api:
        outs = outputs(api)
        target = make_target(api, helpers.FakeStack(REGION, outputs=outs), pod_exec=pod_exec)
        result = run(target, STEPS)
    assert result.ok, result.reason
    argv = _submitted(pod_exec)
    got = {f: _flag(argv, f) for f in ("--storage-path", "--checkpoint-every", "--max-failures")}
    want = {
        "--storage-path": outs["storage_uri"],
        "--checkpoint-every": str(CHECKPOINT_EVERY),
        "--max-failures": str(MAX_FAILURES),
    }
    assert got == want, f"expected {want}, got {got}"
    where = " ".join(target.notes)
    assert f"{outs['storage_uri']}/r1/" in where and "/tmp/ray-efa-eks/runs/r1/nccl/" in where, where


def _submitted_job(pod_exec) -> TrainConfig:
    """The job the submitted command line rebuilds (everything after `python -m workloads.train`)."""
    argv = _submitted(pod_exec)
    return TrainConfig.from_argv(argv[argv.index("workloads.train") + 1 :])


@pytest.mark.parametrize(
    ("key", "value"),
    [("checkpoint_every", 50), ("max_failures", 0), ("storage_path", "s3://mine/x")],
)
def test_train_block_durability_value_reaches_the_submitted_job_unchanged(key, value):
    pod_exec = cluster_exec()
    with helpers.FakeKubeApi() as api:
        target = make_target(api, helpers.FakeStack(REGION, outputs=outputs(api)), pod_exec=pod_exec)
        target.cfg = dataclasses.replace(target.cfg, train={key: value})
        result = run(target, STEPS)
    assert result.ok, result.reason
    got = getattr(_submitted_job(pod_exec), key)
    assert got == value, f"train: {key}: {value!r} was submitted as {got!r}"


def test_train_notes_the_resolved_job_and_where_each_value_came_from():
    pod_exec = cluster_exec()
    with helpers.FakeKubeApi() as api:
        target = make_target(api, helpers.FakeStack(REGION, outputs=outputs(api)), pod_exec=pod_exec)
        target.cfg = dataclasses.replace(target.cfg, train={"checkpoint_every": 50})
        run(target, STEPS)
    job_note = next((n for n in target.notes if n.startswith("job of run r1")), "")
    assert "checkpoint_every" in job_note and "= 50  (stack train: block)" in job_note, (
        f"expected checkpoint_every from the train: block among the notes, got {target.notes}"
    )


def test_resume_looks_for_the_run_under_the_train_blocks_storage_path():
    pod_exec = cluster_exec()
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="mine", CreateBucketConfiguration={"LocationConstraint": REGION})
    s3.put_object(Bucket="mine", Key="x/r1/checkpoint_000001/state.pt", Body=b"")  # what Ray Train left there
    with helpers.FakeKubeApi() as api:
        target = make_target(api, helpers.FakeStack(REGION, outputs=outputs(api)), pod_exec=pod_exec)
        target.cfg = dataclasses.replace(target.cfg, train={"storage_path": "s3://mine/x"})
        target.run = dataclasses.replace(target.run, resume=True)
        result = run(target, STEPS)
    assert result.ok, f"--resume r1 with its checkpoints under s3://mine/x/r1/ was refused: {result.reason}"


def test_resume_of_an_unknown_run_stops_before_submitting():
    pod_exec = cluster_exec()
    with helpers.FakeKubeApi() as api:
        outs = outputs(api)
        bucket = outs["storage_uri"].split("/")[2]
        boto3.client("s3", region_name=REGION).create_bucket(
            Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
        )
        target = make_target(api, helpers.FakeStack(REGION, outputs=outs), pod_exec=pod_exec)
        target.run = dataclasses.replace(target.run, run_id="gone", resume=True)
        with pytest.raises(DriverError, match=r"--resume 'gone': no run under"):
            run(target, STEPS)
    submitted = [c for c in pod_exec.calls if c[2][:3] == ["ray", "job", "submit"]]
    assert not submitted, f"a job was submitted for an unknown run: {submitted}"


def test_verify_writes_a_marker_from_a_worker_and_from_the_head():
    pod_exec = cluster_exec()
    with helpers.FakeKubeApi() as api:
        target = make_target(api, helpers.FakeStack(REGION, outputs=outputs(api)), pod_exec=pod_exec)
        result = run(target, ("verify",))
    assert result.ok, result.reason
    probed = [pod for pod, _, cmd, _ in pod_exec.calls if asks(cmd, PodAction.S3_MARKER)]
    kinds = sorted("head" if "head" in p else "worker" for p in probed)
    assert kinds == ["head", "worker"], f"expected the marker probe in one worker and the head, ran in {probed}"


def test_verify_fails_before_training_when_a_pod_cannot_write():
    ok = cluster_exec()

    def answer(pod, cmd, stdin):
        if asks(cmd, PodAction.S3_MARKER):
            return ExecResult(1, "", "OSError: AWS Error ACCESS_DENIED during PutObject operation")
        return ok.answer(pod, cmd, stdin)

    with helpers.FakeKubeApi() as api:
        target = make_target(
            api, helpers.FakeStack(REGION, outputs=outputs(api)), pod_exec=helpers.ScriptedExec(answer)
        )
        result = run(target, ("verify", "submit", "follow"))
    assert result.failed_step == "verify" and "ACCESS_DENIED" in result.reason, (result.failed_step, result.reason)
    assert "ray-pods" in result.reason and "a-123" in result.reason and "ray/ray-train" in result.reason, result.reason
