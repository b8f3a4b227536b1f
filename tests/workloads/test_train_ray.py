"""The training module under Ray Train on a real local cluster (2 CPU workers, gloo): the session's
shared cluster (tests/support/shared_setups.py). The kill-and-resume under Ray Train is in
test_train_s3.py (the default tier), with its storage on S3 and its data read through Ray Data;
that 2 workers learn the synthetic task is asserted of the shared local run (test_local_run.py)."""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from workloads import train

pytestmark = pytest.mark.slow

TINY = ["--preset", "tiny", "--num-workers", "2", "--global-batch-size", "4", "--seq-len", "64", "--lr", "3e-3"]


def _train(tmp_path, *args) -> dict:
    out = tmp_path / f"summary-{len(list(tmp_path.iterdir()))}.json"
    rc = train.main([*args, "--summary-json", str(out)])
    assert rc == 0, f"training exited {rc}"
    return json.loads(out.read_text())


def test_torchrun_and_ray_launchers_give_the_same_losses(ray_cluster, tmp_path, venv_bin, repo_root):
    args = [
        "--preset",
        "tiny",
        "--global-batch-size",
        "4",
        "--seq-len",
        "64",
        "--steps",
        "4",
        "--seed",
        "5",
        "--task",
        "learnable",
    ]
    ray_s = _train(tmp_path, *args, "--num-workers", "2", "--run-dir", str(tmp_path / "ray"))
    out = tmp_path / "torchrun.json"
    r = subprocess.run(
        [
            str(venv_bin / "torchrun"),
            "--nproc-per-node",
            "2",
            "-m",
            "workloads.train",
            "--launcher",
            "torchrun",
            *args,
            "--run-dir",
            str(tmp_path / "tr"),
            "--summary-json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=repo_root,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    tr_s = json.loads(out.read_text())
    assert tr_s["world_size"] == 2
    for i, (a, b) in enumerate(zip(ray_s["losses"], tr_s["losses"], strict=True)):
        assert math.isclose(a, b, rel_tol=1e-5), f"step {i + 1}: ray {a:.6f} vs torchrun {b:.6f}"


def test_summary_reaches_the_launcher_without_any_checkpoint(ray_cluster, tmp_path):
    s = _train(tmp_path, *TINY, "--steps", "2", "--run-dir", str(tmp_path / "run"))
    assert s["checkpoint"] is None and len(s["losses"]) == 2, s
    stored = list((tmp_path / "run" / "ray_results").rglob("checkpoint_*"))
    assert not stored, f"no checkpoint was asked for, but found {stored}"


@pytest.mark.parametrize("kind", ["txt", "parquet"])
def test_ray_data_share_of_each_rank_is_the_share_torchrun_reads(ray_cluster, tmp_path, kind):
    """A worker's Ray Data dataset (several read tasks) yields, in order and with the same cursors, the
    documents of its share that torchrun reads in process; the shares cover the corpus once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workloads.data import list_data
    from workloads.shards import iterate_ray_share, ray_share, read_range

    docs = [f"doc {i} " + "x" * (i % 13) for i in range(300)]
    (tmp_path / "c").mkdir()
    for part in range(2):
        mine = docs[part * 150 : (part + 1) * 150]
        if kind == "txt":
            (tmp_path / "c" / f"{part}.txt").write_text("\n".join(mine) + "\n")
        else:
            pq.write_table(pa.table({"text": mine}), tmp_path / "c" / f"{part}.parquet", row_group_size=16)
    space = list_data(str(tmp_path / "c")).space()
    everything = []
    for rank in range(3):
        lo, hi = space.share(rank, 3)
        local = list(read_range(space, lo, hi))
        via_ray = list(iterate_ray_share(ray_share(space, lo, hi, task_size=max((hi - lo) // 5, 1))))
        assert via_ray == local, f"rank {rank}: Ray Data gave {len(via_ray)} documents, the local reader {len(local)}"
        everything += [t for t, _ in local]
    assert everything == docs


def test_more_gpu_workers_than_the_cluster_has_is_refused(ray_cluster, capsys):
    rc = train.main(["--preset", "tiny", "--use-gpu", "--num-workers", "2", "--steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "has no GPU: drop --use-gpu" in err, err


def test_a_null_record_past_the_checked_head_ends_the_run_with_the_workers_one_line(
    ray_cluster, tmp_path, monkeypatch, capsys
):
    # the launcher reads only a head of each file; a worker that meets the bad record later prints one
    # line first and the launcher ends with it and exit 2 (it was trained on as the string "None")
    monkeypatch.setattr("workloads.data_check.HEAD_BYTES", 256)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(f'{{"text": "line {i} of a corpus"}}\n' for i in range(40)) + '{"text": null}\n')
    rc = train.main([*TINY, "--data", str(corpus), "--steps", "50", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1] if err.strip() else ""
    assert rc == 2 and "has text null" in last and last.startswith("error: "), f"got rc {rc}, last line {last!r}"
