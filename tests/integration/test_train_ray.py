"""The training module under Ray Train on a real local cluster (2 CPU workers, gloo)."""

from __future__ import annotations

import json
import math
import subprocess
from collections import Counter

import pytest

from workloads import train

pytestmark = pytest.mark.slow

TINY = ["--preset", "tiny", "--num-workers", "2", "--global-batch-size", "4", "--seq-len", "64", "--lr", "3e-3"]


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    # 2 CPUs for the 2 workers, 2 more so Ray Data can read and tokenise while they train.
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _train(tmp_path, *args) -> dict:
    out = tmp_path / f"summary-{len(list(tmp_path.iterdir()))}.json"
    rc = train.main([*args, "--summary-json", str(out)])
    assert rc == 0, f"training exited {rc}"
    return json.loads(out.read_text())


def test_two_worker_run_learns_the_synthetic_task(ray_cluster, tmp_path):
    s = _train(tmp_path, *TINY, "--task", "learnable", "--steps", "20", "--run-dir", str(tmp_path / "run"))
    assert s["world_size"] == 2 and s["backend"] == "gloo" and s["steps"] == 20
    tail = sum(s["losses"][-3:]) / 3
    assert tail < s["loss_first"] - 0.8, (
        f"loss did not fall by 0.8: first {s['loss_first']:.3f}, last-3 mean {tail:.3f}"
    )
    assert s["tokens_per_s"] > 0 and s["mfu"] is None, "MFU is only defined on a known GPU"
    assert s["nccl_log_dir"] == str(tmp_path / "run" / "nccl")


def test_killed_worker_resumes_from_checkpoint_and_matches_uninterrupted_run(
    ray_cluster, tmp_path, venv_bin, repo_root
):
    common = [*TINY, "--task", "learnable", "--steps", "12", "--seed", "3"]
    s = _train(
        tmp_path,
        *common,
        "--checkpoint-every",
        "4",
        "--fail-at-step",
        "6",
        "--max-failures",
        "1",
        "--run-dir",
        str(tmp_path / "faulty"),
    )
    assert (tmp_path / "faulty" / ".failed-at-6").exists(), "the fault was not injected"
    assert s["resumed_from_step"] == 4, f"expected a resume from the step-4 checkpoint, got {s['resumed_from_step']}"
    assert len(s["losses"]) == 12, "the step counter must continue, not restart"
    assert s["checkpoint"], "a run with --checkpoint-every reports its final checkpoint"
    clean = _train(tmp_path, *common, "--run-dir", str(tmp_path / "clean"))
    assert math.isclose(s["loss_last"], clean["loss_last"], rel_tol=1e-3), (
        f"resumed final loss {s['loss_last']:.5f} != uninterrupted {clean['loss_last']:.5f}"
    )


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


def test_real_text_data_trains_through_ray_data(ray_cluster, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of a small corpus\n" for i in range(200)))
    s = _train(tmp_path, *TINY, "--data", str(corpus), "--steps", "3", "--run-dir", str(tmp_path / "run"))
    assert len(s["losses"]) == 3 and s["loss_first"] > 0


def test_ray_data_stream_gives_each_token_to_exactly_one_rank_per_epoch(ray_cluster, tmp_path):
    """What each Ray Train worker gets with DataConfig(datasets_to_split=[]): the whole tokenised
    stream, of which it keeps every world-th document."""
    from workloads.config import TrainConfig
    from workloads.data import ByteTokenizer, MicroBatches, encode, ray_dataset
    from workloads.loss import IGNORE_INDEX

    docs = [f"doc {i} " + "x" * (i % 13) for i in range(60)]
    corpus = tmp_path / "c.txt"
    corpus.write_text("\n".join(docs) + "\n")
    tok = ByteTokenizer()
    want = Counter(t for d in docs for t in encode(tok, d) + [tok.eos_token_id])
    ds = ray_dataset(str(corpus))
    cfg = TrainConfig(preset="tiny", data=str(corpus), seq_len=32, global_batch_size=2, num_workers=2)
    got = Counter()
    for rank in range(2):
        seqs = MicroBatches(cfg, 512, rank, 2, ds.iterator())._sequences_forever()
        for ids, labels in seqs:  # the padded tail ends this rank's epoch
            got.update(t for t, label in zip(ids, labels, strict=True) if label != IGNORE_INDEX)
            if labels[-1] == IGNORE_INDEX:
                break
    assert got == want


def test_more_gpu_workers_than_the_cluster_has_is_refused(ray_cluster, capsys):
    rc = train.main(["--preset", "tiny", "--use-gpu", "--num-workers", "2", "--steps", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and "has no GPU: drop --use-gpu" in err, err
