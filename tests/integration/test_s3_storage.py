"""Ray Train's storage on S3 for real, without AWS: moto's server on 127.0.0.1 is the S3 endpoint,
reached through the code path the cluster uses (pyarrow's S3 filesystem, which Ray Train and Ray
Data use for s3:// URIs). Only the endpoint differs: AWS_ENDPOINT_URL_S3, which pyarrow and boto3
both honour (https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html)."""

from __future__ import annotations

import json
import math

import pytest

from workloads import train

pytestmark = pytest.mark.slow

BUCKET = "ray-efa-eks-test-runs"
TINY = ["--preset", "tiny", "--num-workers", "2", "--global-batch-size", "4", "--seq-len", "64", "--lr", "3e-3"]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server with one bucket; the process environment points every S3 client at it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    mp = pytest.MonkeyPatch()
    for k, v in env.items():
        mp.setenv(k, v)
    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    yield client
    mp.undo()
    server.stop()


@pytest.fixture(scope="module")
def ray_cluster(s3):
    """Started after the S3 environment is set, so every Ray worker inherits it."""
    import ray

    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _train(tmp_path, *args) -> dict:
    out = tmp_path / f"summary-{len(list(tmp_path.iterdir()))}.json"
    rc = train.main([*args, "--summary-json", str(out)])
    assert rc == 0, f"training exited {rc}"
    return json.loads(out.read_text())


def _keys(s3, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def test_killed_worker_resumes_from_s3_and_ends_at_the_uninterrupted_loss(ray_cluster, s3, tmp_path):
    common = [*TINY, "--task", "learnable", "--steps", "12", "--seed", "3", "--checkpoint-every", "4"]
    faulty = _train(
        tmp_path,
        *common,
        "--fail-at-step",
        "6",
        "--max-failures",
        "1",
        "--storage-path",
        f"s3://{BUCKET}/stack/runs",
        "--run-id",
        "faulty",
        "--run-dir",
        str(tmp_path / "faulty"),
    )
    assert (tmp_path / "faulty" / ".failed-at-6").exists(), "the fault was not injected"
    assert faulty["resumed_from_step"] == 4, f"expected a resume from step 4, got {faulty['resumed_from_step']}"
    stored = _keys(s3, "stack/runs/faulty/")
    assert any("checkpoint_" in k for k in stored), f"no checkpoint under s3://{BUCKET}/stack/runs/faulty/: {stored}"
    clean = _train(
        tmp_path,
        *common,
        "--storage-path",
        f"s3://{BUCKET}/stack/runs",
        "--run-id",
        "clean",
        "--run-dir",
        str(tmp_path / "clean"),
    )
    assert math.isclose(faulty["loss_last"], clean["loss_last"], rel_tol=1e-3), (
        f"resumed final loss {faulty['loss_last']:.5f} != uninterrupted {clean['loss_last']:.5f}"
    )


def _put_corpus(s3, prefix: str, n_docs: int = 240) -> None:
    """Two JSONL files of distinct documents under ``prefix``."""
    docs = [json.dumps({"text": f"document {i}: " + "s3 corpus words " * (i % 5)}) for i in range(n_docs)]
    half = n_docs // 2
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}part-0.jsonl", Body="\n".join(docs[:half]) + "\n")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}part-1.jsonl", Body="\n".join(docs[half:]) + "\n")


def test_jsonl_data_on_s3_resumes_at_its_data_position_after_a_killed_worker(ray_cluster, s3, tmp_path):
    _put_corpus(s3, "data/corpus/")
    common = [*TINY, "--data", f"s3://{BUCKET}/data/corpus/", "--steps", "6", "--checkpoint-every", "2"]
    storage = ["--storage-path", f"s3://{BUCKET}/stack/runs"]
    faulty = _train(
        tmp_path, *common, *storage, "--fail-at-step", "3", "--max-failures", "1", "--run-id", "data-faulty",
        "--run-dir", str(tmp_path / "data-faulty"),
    )  # fmt: skip
    assert faulty["resumed_from_step"] == 2, f"expected a resume from step 2, got {faulty['resumed_from_step']}"
    clean = _train(tmp_path, *common, *storage, "--run-id", "data-clean", "--run-dir", str(tmp_path / "data-clean"))
    pairs = list(zip(faulty["losses"], clean["losses"], strict=False))
    bad = [i + 1 for i, (a, b) in enumerate(pairs) if not math.isclose(a, b, rel_tol=1e-3)]
    assert len(pairs) == 6 and not bad, f"steps {bad} differ: resumed {faulty['losses']} vs clean {clean['losses']}"


@pytest.mark.parametrize(
    "put,uri_tail,expected",
    [
        ({}, "empty/", "is empty or does not exist"),
        ({"odd/a.csv": "text\nx\n"}, "odd/", "holds no file of a known format (a.csv)"),
        ({"mixed/a.txt": "x\n", "mixed/b.jsonl": '{"text": "y"}\n'}, "mixed/", "mixes formats"),
    ],
    ids=["empty prefix", "unknown format", "mixed formats"],
)
def test_bad_s3_data_is_refused_before_training(s3, capsys, put, uri_tail, expected):
    for key, body in put.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
    rc = train.main([*TINY, "--steps", "1", "--data", f"s3://{BUCKET}/{uri_tail}"])
    err = capsys.readouterr().err
    assert rc == 2 and expected in err, f"expected exit 2 with {expected!r}, got {rc}: {err}"


@pytest.mark.parametrize("bucket,ok", [(BUCKET, True), ("no-such-bucket", False)], ids=["reachable", "missing bucket"])
def test_marker_probe_writes_reads_and_deletes_on_real_s3(s3, venv_bin, monkeypatch, bucket, ok):
    """The verify step's probe, run here as the worker pod would run it, against moto's server."""
    import os
    import subprocess

    from automation.storage import marker_probe_command

    marker = f"s3://{bucket}/stack/runs/.verify/probe"
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"}
    r = subprocess.run(marker_probe_command(marker), capture_output=True, text=True, timeout=60, env=env)
    assert (r.returncode == 0) == ok, f"expected {'success' if ok else 'failure'}, got rc {r.returncode}: {r.stderr}"
    if ok:
        left = _keys(s3, "stack/runs/.verify/")
        assert "stack/runs/.verify/probe" not in left, f"the marker must be deleted after the probe, found {left}"
