"""The real-data pipeline alone (no model): how fast one rank turns `--data` into packed micro-batches,
and what a resume costs, from the corpus' start versus from a saved data position.

    python bench/data_pipeline.py                       # a generated JSONL corpus, byte tokenizer
    python bench/data_pipeline.py --tokenizer bpe       # the same, a byte-level BPE trained here
    python bench/data_pipeline.py --data s3://bucket/corpus/ --tokenizer Qwen/Qwen2.5-1.5B --world 8

It reads through the same code the training loop uses (workloads.data.MicroBatches, local or s3://
through pyarrow, without Ray) and prints one JSON line per measurement: what rank 0 of --world reads
of the corpus, its tokens/s, the tokens/s one rank of the cluster default consumes on 8 L4s
(workloads/throughput_model.py's prediction), and the first micro-batch of a resume.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads.config import TrainConfig  # noqa: E402
from workloads.data import MicroBatches, list_data  # noqa: E402
from workloads.shards import ReadStats, read_range  # noqa: E402


def generated_corpus(root: Path, docs: int) -> str:
    """A JSONL corpus of pseudo-words with a Zipf-like frequency (so a trained BPE splits it into
    tokens about as a real one splits prose, not into a handful of whole-phrase tokens)."""
    rnd = random.Random(0)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in "aeiouy"] + ["th", "ing", "er", "an", "st"]
    vocab = ["".join(rnd.choice(syllables) for _ in range(rnd.choice((1, 1, 2, 2, 3, 4)))) for _ in range(8000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    path = root / "corpus.jsonl"
    with path.open("w") as f:
        for i in range(docs):
            words = rnd.choices(vocab, weights, k=50 + i % 400)
            f.write(json.dumps({"text": f"Document {i}. " + " ".join(words) + "."}) + "\n")
    return str(path)


def trained_bpe(root: Path, corpus: str, vocab_size: int) -> str:
    """A byte-level BPE (Qwen2.5's kind of tokenizer) trained here on the corpus, saved as a local
    tokenizer directory: a stand-in for Qwen2.5's 151k-token BPE, which cannot be downloaded here."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    texts = (json.loads(line)["text"] for line in Path(corpus).open())
    bpe.train_from_iterator(texts, vocab_size=vocab_size, special_tokens=["<|endoftext|>"])
    out = root / "bpe"
    PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, eos_token="<|endoftext|>").save_pretrained(out)
    return str(out)


def measure(cfg: TrainConfig, rank: int, world: int, batches: int, position: dict | None = None, start: int = 0):
    """(seconds, micro-batches, tokens, position after) for `batches` micro-batches of one rank."""
    stream = MicroBatches(cfg, 1 << 20, rank, world)
    it = stream.iterate(start, position)
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    dt = time.perf_counter() - t0
    return dt, batches, batches * cfg.micro_batch * cfg.seq_len, stream.position()


def share_read(data: str, rank: int, world: int) -> dict:
    """What one rank reads of the corpus to go once through its share."""
    space = list_data(data).space()
    lo, hi = space.share(rank, world)
    stats = ReadStats()
    docs = sum(1 for _ in read_range(space, lo, hi, stats))
    return {"corpus_bytes": space.total, "share_bytes": hi - lo, "bytes_read": stats.bytes, "documents": docs}


def cluster_demand() -> dict:
    """Tokens/s one rank of the cluster default consumes (8 L4s, workloads/throughput_model.py's
    prediction over EFA with overlap at the slow and the fast achievable L4 rate), and the most it
    could consume (compute-only at the fast rate)."""
    from workloads import throughput_model as tm

    best = tm.choose_default(tm.candidate_table(tm.load_rows(tm.DEFAULT_ROWS), {}))
    per_rank = best["tokens_per_rank_step"]
    return {
        "config": best["config"],
        "rank_tokens_per_s_efa": [round(best[k]["efa"]["tokens_per_s"] / 8) for k in ("low", "high")],
        "rank_tokens_per_s_compute_only": round(per_rank / best["high"]["t_compute"]),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="corpus (default: a generated JSONL corpus of --docs documents)")
    p.add_argument("--docs", type=int, default=40000)
    p.add_argument("--tokenizer", default="bytes", help="bytes, a tokenizer directory or hub id, or bpe (trained here)")
    p.add_argument("--bpe-vocab", type=int, default=32000, help="vocabulary of --tokenizer bpe")
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--world", type=int, default=8, help="ranks the corpus is shared over (this measures rank 0)")
    p.add_argument("--batches", type=int, default=100, help="micro-batches to time")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = a.data or generated_corpus(Path(tmp), a.docs)
        tokenizer = trained_bpe(Path(tmp), data, a.bpe_vocab) if a.tokenizer == "bpe" else a.tokenizer
        cfg = TrainConfig(
            preset="tiny",
            data=data,
            tokenizer=tokenizer,
            seq_len=a.seq_len,
            num_workers=a.world,
            global_batch_size=a.micro_batch * a.world,
        )
        host = {"machine": platform.node(), "python": platform.python_version(), "tokenizer": a.tokenizer}
        print(json.dumps({"what": "rank 0's share", "world": a.world, **share_read(data, 0, a.world), **host}))
        dt, n, tokens, pos = measure(cfg, 0, a.world, a.batches)
        rate = tokens / dt
        print(json.dumps({"what": "read+tokenise+pack, one rank", "batches": n, "tokens": tokens, "s": round(dt, 3),
                          "tokens_per_s": round(rate), **host}))  # fmt: skip
        demand = cluster_demand()
        over = round(rate / demand["rank_tokens_per_s_compute_only"], 1)
        print(json.dumps({"what": "one rank's demand at the cluster default (predicted, 8 L4)", **demand,
                          "pipeline_over_demand": over}))  # fmt: skip
        # Resume after `a.batches` micro-batches: from the saved position, and by re-packing from the start.
        dt_pos, *_ = measure(cfg, 0, a.world, 1, position=pos, start=1)
        print(json.dumps({"what": "resume from saved position, first micro-batch", "s": round(dt_pos, 3), **host}))
        steps = a.batches // cfg.grad_accum
        dt_old, *_ = measure(cfg, 0, a.world, 1, position=None, start=steps)
        print(json.dumps({"what": f"resume by re-packing {a.batches} micro-batches, first micro-batch",
                          "s": round(dt_old, 3), **host}))  # fmt: skip


if __name__ == "__main__":
    main()
