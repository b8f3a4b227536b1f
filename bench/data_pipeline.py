"""The real-data pipeline alone (no model): how fast one rank turns `--data` into packed micro-batches,
and what a resume costs, from the corpus' start versus from a saved data position.

    python bench/data_pipeline.py                       # a generated JSONL corpus, byte tokenizer
    python bench/data_pipeline.py --data s3://bucket/corpus/ --tokenizer Qwen/Qwen2.5-1.5B --world 8

It reads through the same code the training loop uses (workloads.data.MicroBatches, local or s3://
through pyarrow, without Ray) and prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.config import TrainConfig  # noqa: E402
from workloads.data import MicroBatches  # noqa: E402


def generated_corpus(root: Path, docs: int) -> str:
    words = "the of and to in is that for it as with was on be by this are from at or".split()
    path = root / "corpus.jsonl"
    with path.open("w") as f:
        for i in range(docs):
            text = " ".join(words[(i * 7 + j) % len(words)] for j in range(50 + i % 400))
            f.write(json.dumps({"text": f"document {i}: {text}"}) + "\n")
    return str(path)


def measure(cfg: TrainConfig, rank: int, world: int, batches: int, position: dict | None = None, start: int = 0):
    """(seconds, micro-batches, tokens, position after) for `batches` micro-batches of one rank."""
    stream = MicroBatches(cfg, 1 << 20, rank, world)
    it = stream.iterate(start, position)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - t0
    return dt, batches, batches * cfg.micro_batch * cfg.seq_len, stream.position()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="corpus (default: a generated JSONL corpus of --docs documents)")
    p.add_argument("--docs", type=int, default=20000)
    p.add_argument("--tokenizer", default="bytes")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--world", type=int, default=2, help="ranks the corpus is shared over (this measures rank 0)")
    p.add_argument("--batches", type=int, default=200, help="micro-batches to time")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = a.data or generated_corpus(Path(tmp), a.docs)
        cfg = TrainConfig(
            preset="tiny",
            data=data,
            tokenizer=a.tokenizer,
            seq_len=a.seq_len,
            num_workers=a.world,
            global_batch_size=a.micro_batch * a.world,
        )
        host = {"machine": platform.node(), "python": platform.python_version()}
        dt, n, tokens, pos = measure(cfg, 0, a.world, a.batches)
        print(json.dumps({"what": "read+tokenise+pack", "batches": n, "tokens": tokens, "s": round(dt, 3),
                          "tokens_per_s": round(tokens / dt), **host}))  # fmt: skip
        # Resume after `a.batches` micro-batches: from the saved position, and by re-packing from the start.
        dt_pos, *_ = measure(cfg, 0, a.world, 1, position=pos, start=1)
        print(json.dumps({"what": "resume from saved position, first micro-batch", "s": round(dt_pos, 3), **host}))
        steps = a.batches // cfg.grad_accum
        dt_old, *_ = measure(cfg, 0, a.world, 1, position=None, start=steps)
        print(json.dumps({"what": f"resume by re-packing {a.batches} micro-batches, first micro-batch",
                          "s": round(dt_old, 3), **host}))  # fmt: skip


if __name__ == "__main__":
    main()
