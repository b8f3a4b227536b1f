"""The driver's run-bucket parts: the durable job flags, `--resume` of an unknown run, the verify
probe's failure naming what gives the pod its credentials."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from importlib.metadata import requires

import boto3
import pyarrow
import pytest
from moto import mock_aws

from automation.errors import DriverError
from automation.kube import ExecResult
from automation.storage import (
    CHECKPOINT_EVERY,
    LAST_PYARROW_WITHOUT_POD_IDENTITY,
    MAX_FAILURES,
    Durability,
    Identity,
    irsa_switch_command,
    marker_probe_command,
    require_run,
    verify_storage,
)
from infra.config import StorageConfig
from workloads.config import TrainConfig

URI = "s3://runs-bucket/us-west-2/runs"
IDENTITY = Identity("arn:aws:iam::123456789012:role/ray-pods", "a-0123", "ray-train", "ray")


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_durable_job_gets_storage_checkpoints_and_retries():
    job = dataclasses.replace(TrainConfig(run_id="r1"), **vars(Durability(storage_path=URI)))
    argv = job.to_argv()
    got = {f: _flag(argv, f) for f in ("--storage-path", "--checkpoint-every", "--max-failures")}
    want = {"--storage-path": URI, "--checkpoint-every": str(CHECKPOINT_EVERY), "--max-failures": str(MAX_FAILURES)}
    assert got == want, f"expected {want}, got {got}"
    assert int(got["--max-failures"]) >= 1


@pytest.fixture
def s3(monkeypatch):
    for k, v in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="runs-bucket")
        client.put_object(Bucket="runs-bucket", Key="us-west-2/runs/old-run/checkpoint_000025/state.json", Body=b"{}")
        yield client


def test_resume_of_a_known_run_passes(s3):
    require_run(s3, URI, "old-run")


def test_resume_of_an_unknown_run_is_refused_listing_the_known_ones(s3):
    with pytest.raises(DriverError) as err:
        require_run(s3, URI, "nope")
    msg = str(err.value)
    assert err.value.exit_code == 2 and "--resume 'nope': no run under" in msg and "known runs: old-run" in msg, msg


def test_marker_probe_failure_names_role_association_and_service_account():
    def denied(pod, namespace, command, **kw):
        return ExecResult(1, "", "OSError: When initiating multiple part upload: AWS Error ACCESS_DENIED")

    res = verify_storage(denied, "worker-0", IDENTITY, URI, "r1")
    named = [
        x for x in (IDENTITY.role_arn, IDENTITY.association_id, "ray/ray-train", "ACCESS_DENIED") if x in res.summary
    ]
    assert res.status == "fail" and len(named) == 4, f"expected a failure naming all four, got: {res.summary}"


def test_marker_probe_runs_in_the_worker_pod_under_the_prefix():
    seen = []

    def ok(pod, namespace, command, **kw):
        seen.append((pod, namespace, command[-1]))
        return ExecResult(0, "ok\n", "")

    res = verify_storage(ok, "worker-0", IDENTITY, URI, "r1")
    assert res.ok and seen and seen[0][:2] == ("worker-0", "ray"), (res, seen)
    assert f"{URI}/.verify/worker-0-r1" in seen[0][2], f"marker not under the prefix: {seen[0][2]}"


def test_destroy_says_which_bucket_it_kept_and_how_to_delete_it():
    from automation.storage import kept_bucket_line

    outputs = {"bucket_name": "runs-bucket", "storage_uri": URI}
    line = kept_bucket_line(outputs, force_destroy=False)
    assert line and "kept bucket runs-bucket" in line and URI in line and "aws s3 rb s3://runs-bucket" in line, line
    assert kept_bucket_line(outputs, force_destroy=True) is None, "a forced destroy deleted the bucket: nothing kept"


# --------------------------------------------------------------------------- the probe's cause


def probe_answer(pyarrow: str, credentials: str, error: str):
    def answer(pod, namespace, command, **kw):
        return ExecResult(1, f"PYARROW {pyarrow} CREDENTIALS {credentials}\nFILESYSTEM S3FileSystem\n", error)

    return answer


DENIED = "OSError: When initiating multiple part upload for key 'x' in bucket 'b': AWS Error ACCESS_DENIED"


def test_probe_prints_pyarrow_version_and_runs_through_pyarrow_from_uri(tmp_path):
    """The probe itself, run here on a local path: the same from_uri call Ray Train makes on its storage_path."""
    cmd = marker_probe_command((tmp_path / "marker").as_uri())
    cmd[2] = cmd[2].replace("python -c", f"{sys.executable} -c", 1)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    expected = [f"PYARROW {pyarrow.__version__} CREDENTIALS none", "FILESYSTEM LocalFileSystem", "ok"]
    assert out.stdout.splitlines() == expected and not (tmp_path / "marker").exists(), (out.stdout, out.stderr)


def test_access_denied_with_pod_identity_and_an_old_pyarrow_blames_the_sdk_and_names_the_irsa_key():
    res = verify_storage(probe_answer("16.1.0", "pod-identity", DENIED), "worker-0", IDENTITY, URI, "r1", "us-west-2")
    wanted = ["pyarrow 16.1.0", "older than 1.11.263", f"run `{irsa_switch_command('us-west-2')}`"]
    missing = [w for w in wanted if w not in res.summary]
    assert res.status == "fail" and not missing, f"expected {missing} in: {res.summary}"
    assert IDENTITY.role_arn not in res.summary, f"expected the SDK, not the role, blamed: {res.summary}"


def test_access_denied_with_pyarrow_17_or_later_blames_the_role_not_the_sdk():
    """pyarrow 17.0.0's wheels are the first to bundle an SDK Pod Identity works with (1.11.285)."""
    res = verify_storage(probe_answer("17.0.0", "pod-identity", DENIED), "worker-0", IDENTITY, URI, "r1")
    got = (IDENTITY.role_arn in res.summary, "older than 1.11.263" in res.summary)
    assert got == (True, False), f"expected the role named and the SDK not blamed: {res.summary}"


@pytest.mark.parametrize("pyarrow_version", ["16.1.0", "26.0.1"])
def test_any_s3_failure_under_pod_identity_prints_the_one_irsa_switch_command(pyarrow_version):
    res = verify_storage(probe_answer(pyarrow_version, "pod-identity", DENIED), "worker-0", IDENTITY, URI, "r1", "dev")
    want = "`pulumi config set --stack dev ray-efa-eks:podIdentityMode irsa && python -m automation up --stack dev`"
    assert want in res.summary, f"expected the exact switch command {want} in: {res.summary}"


def test_irsa_switch_command_sets_the_key_the_program_reads():
    # The key the command sets must be the one infra/config.py parses into StorageConfig.pod_identity_mode.
    words = irsa_switch_command("dev").split()
    got = words[words.index("set") + 3 : words.index("set") + 5]
    assert got == [StorageConfig.keyname("pod_identity_mode", prefixed=True), "irsa"], f"got {got}"


def test_a_pod_without_injected_credentials_is_told_to_be_recreated():
    res = verify_storage(probe_answer("16.1.0", "none", DENIED), "worker-0", IDENTITY, URI, "r1")
    assert "the pod has no AWS credentials" in res.summary and "delete them" in res.summary, res.summary


def test_passing_probe_reports_the_pods_pyarrow_version():
    def ok(pod, namespace, command, **kw):
        return ExecResult(0, "PYARROW 21.0.0 CREDENTIALS pod-identity\nFILESYSTEM S3FileSystem\nok\n", "")

    res = verify_storage(ok, "worker-0", IDENTITY, URI, "r1")
    assert res.ok and res.summary.endswith("(pyarrow 21.0.0)"), res.summary


def test_pod_identity_default_holds_for_every_pyarrow_ray_admits():
    # podIdentityMode defaults to pod-identity only because every pyarrow Ray's train extra accepts bundles an AWS SDK
    # for C++ that reads Pod Identity credentials (docs/storage.md); a Ray that admits an older pyarrow
    # breaks that premise.
    floors = [re.search(r"pyarrow\s*>=\s*(\d+)", r) for r in requires("ray") or [] if 'extra == "train"' in r]
    lowest = min(int(m.group(1)) for m in floors if m)
    got = (StorageConfig().pod_identity_mode, lowest > LAST_PYARROW_WITHOUT_POD_IDENTITY)
    assert got == ("pod-identity", True), f"expected Ray's pyarrow floor {lowest} above the last SDK-less pyarrow"
