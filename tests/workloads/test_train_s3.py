"""Ray Train's storage on S3 for real, without AWS: moto's server on 127.0.0.1 is the S3 endpoint,
reached through the code path the cluster uses (pyarrow's S3 filesystem, which Ray Train and Ray
Data use for s3:// URIs). Only the endpoint differs: AWS_ENDPOINT_URL_S3, which pyarrow and boto3
both honour (https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html).

Default tier: the project's one Ray Train kill-and-resume (`resumed`, on the session's Ray cluster and
moto server, tests/support/shared_setups.py) and the bad-data refusals; the marker probe is slow."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from _shared_env import S3_BUCKET as BUCKET

from workloads import train
from workloads.metrics import METRICS_FILE, latest_per_step, read_metrics

TINY = ["--preset", "tiny", "--num-workers", "2", "--global-batch-size", "4", "--seq-len", "64", "--lr", "3e-3"]
STORAGE = f"s3://{BUCKET}/stack/runs"
# 6 steps, a checkpoint every 2, the last worker killed at step 3: the run resumes from step 2.
RESUMED = ["--steps", "6", "--checkpoint-every", "2", "--data", f"s3://{BUCKET}/data/corpus/"]


@pytest.fixture(scope="module")
def s3(s3_env):
    """A client of the shared moto S3 server, with this process pointed at it for the module."""
    import boto3

    mp = pytest.MonkeyPatch()
    for k, v in s3_env.items():
        mp.setenv(k, v)
    yield boto3.client("s3")
    mp.undo()


def _train(tmp_path, *args) -> dict:
    out = tmp_path / f"summary-{len(list(tmp_path.iterdir()))}.json"
    rc = train.main([*args, "--summary-json", str(out)])
    assert rc == 0, f"training exited {rc}"
    return json.loads(out.read_text())


def _keys(s3, prefix: str) -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _put_corpus(s3, prefix: str, n_docs: int = 240) -> None:
    """Two JSONL files of distinct documents under ``prefix``."""
    docs = [json.dumps({"text": f"document {i}: " + "s3 corpus words " * (i % 5)}) for i in range(n_docs)]
    half = n_docs // 2
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}part-0.jsonl", Body="\n".join(docs[:half]) + "\n")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}part-1.jsonl", Body="\n".join(docs[half:]) + "\n")


@pytest.fixture(scope="module")
def resumed(ray_cluster, s3, tmp_path_factory) -> dict:
    """The project's one Ray Train kill-and-resume: a 2-worker run that reads a JSONL corpus from S3 and
    checkpoints to S3 loses its last worker at step 3 and resumes; beside it the same run uninterrupted."""
    tmp_path = tmp_path_factory.mktemp("s3-resume")
    _put_corpus(s3, "data/corpus/")
    faulty = _train(
        tmp_path, *TINY, *RESUMED, "--storage-path", STORAGE, "--fail-at-step", "3", "--max-failures", "1",
        "--run-id", "faulty", "--run-dir", str(tmp_path / "faulty"),
    )  # fmt: skip
    return {"faulty": faulty, "run_dir": tmp_path / "faulty", "tmp_path": tmp_path}


@pytest.fixture(scope="module")
def uninterrupted(resumed) -> dict:
    """The same run as `resumed` without the fault: a second Ray Train run, so only the slow tier pays for it."""
    tmp_path = resumed["tmp_path"]
    return _train(
        tmp_path, *TINY, *RESUMED, "--storage-path", STORAGE, "--run-id", "clean", "--run-dir", str(tmp_path / "clean")
    )


def test_killed_worker_resumes_from_the_last_checkpoint_on_s3(resumed):
    assert (resumed["run_dir"] / ".failed-at-3").exists(), "expected the fault injected at step 3, it was not"
    got = resumed["faulty"]["resumed_from_step"]
    assert got == 2, f"expected a resume from the step-2 checkpoint, got {got}"


def test_resumed_run_stores_its_checkpoints_under_its_s3_prefix(resumed, s3):
    stored = _keys(s3, "stack/runs/faulty/")
    assert any("checkpoint_" in k for k in stored), f"expected checkpoints under {STORAGE}/faulty/, got {stored}"


@pytest.mark.slow
def test_resumed_run_matches_the_uninterrupted_run_at_every_step(resumed, uninterrupted):
    """Same losses at every step after the resume: the data position and the weights came back."""
    faulty, clean = resumed["faulty"]["losses"], uninterrupted["losses"]
    pairs = list(zip(faulty, clean, strict=False))
    bad = [i + 1 for i, (a, b) in enumerate(pairs) if not math.isclose(a, b, rel_tol=1e-3)]
    assert len(pairs) == 6 and not bad, f"expected 6 equal steps; steps {bad} differ: resumed {faulty} vs clean {clean}"


def test_resumed_run_reports_its_final_checkpoint(resumed):
    assert resumed["faulty"]["checkpoint"], f"expected the final checkpoint named, got {resumed['faulty']}"


def test_resumed_run_leaves_no_local_copy_of_a_checkpoint(resumed):
    left = sorted(Path(tempfile.gettempdir()).glob(f"ckpt-{resumed['faulty']['run_id']}-*"))
    assert not left, f"expected each checkpoint's local copy removed once Ray Train has it, found {left}"


def test_resumed_run_appends_its_metrics_after_the_lines_written_before_the_kill(resumed):
    steps = [r["step"] for r in read_metrics(resumed["run_dir"] / METRICS_FILE)]
    # Steps 1-3 ran before the last worker died at the start of step 4; the step-2 checkpoint resumes at 3.
    assert steps == [1, 2, 3, 3, 4, 5, 6], f"expected [1, 2, 3, 3, 4, 5, 6] in file order, got {steps}"


def test_resumed_run_keeps_one_metrics_record_per_step_for_the_report(resumed):
    steps = [r["step"] for r in latest_per_step(read_metrics(resumed["run_dir"] / METRICS_FILE))]
    assert steps == [1, 2, 3, 4, 5, 6], f"expected one record per step, got {steps}"


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


@pytest.mark.slow
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
