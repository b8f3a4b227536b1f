"""Where each worker's micro-batches come from.

- `random`: uniform random token ids (the reference job's default).
- `learnable`: a synthetic task a model can learn (each next token is a fixed permutation of the
  current one), so tests can demand that the loss falls.
- `--data PATH`: text (.txt, one document per line), JSONL (field "text") or Parquet (column
  "text"), tokenised, packed into fixed-length sequences with EOS between documents, the last
  partial sequence padded with labels ignored, so every token is trained on exactly once per epoch.
  Documents are tokenised by Ray Data under Ray (from the local file under torchrun), and each rank
  keeps the documents whose index is congruent to its rank. Ray Train's own split
  (`streaming_split(equal=True)`) is not used: it may drop rows to even the shards out and hands
  blocks to whichever worker asks first, so neither "every token once" nor an exact resume would
  hold. The price: every worker reads the whole token stream and keeps 1/world of it.

Synthetic batches are a pure function of (seed, step, rank, micro-step), and real data is read in a
fixed order, so a run resumed from a checkpoint continues at the same data position.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from workloads.loss import IGNORE_INDEX

TEXT_SUFFIXES = {".txt": "text", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


# ---- synthetic ---------------------------------------------------------------------------------
def _generator(*key: int) -> torch.Generator:
    g = torch.Generator()
    seed = 0
    for k in key:
        seed = (seed * 1_000_003 + int(k)) % (2**63 - 1)
    g.manual_seed(seed)
    return g


def synthetic_batch(task: str, vocab: int, batch: int, seq_len: int, seed: int, step: int, rank: int, micro: int):
    """(input_ids, labels), both [batch, seq_len] int64 on CPU."""
    g = _generator(seed, step, rank, micro)
    if task == "random":
        ids = torch.randint(0, vocab, (batch, seq_len), generator=g)
        return ids, ids.clone()
    perm = torch.randperm(vocab, generator=_generator(seed, 7919))
    ids = torch.empty((batch, seq_len), dtype=torch.long)
    ids[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
    for t in range(1, seq_len):
        ids[:, t] = perm[ids[:, t - 1]]
    return ids, ids.clone()


# ---- tokenisation and packing -------------------------------------------------------------------
class ByteTokenizer:
    """UTF-8 bytes as tokens 2..257 (0 pad, 1 EOS): a tokenizer that needs no download."""

    pad_token_id = 0
    eos_token_id = 1
    vocab_size = 258

    def encode(self, text: str) -> list[int]:
        return [b + 2 for b in text.encode("utf-8")]


def default_tokenizer_ref(preset: str, tokenizer: str | None, pretrained: str | None) -> str:
    return tokenizer or pretrained or ("bytes" if preset == "tiny" else "Qwen/Qwen2.5-1.5B")


def load_tokenizer(ref: str):
    """'bytes', a local tokenizer directory (offline), or a hub id."""
    if ref == "bytes":
        return ByteTokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ref, local_files_only=Path(ref).expanduser().is_dir())


def encode(tokenizer, text: str) -> list[int]:
    if isinstance(tokenizer, ByteTokenizer):
        return tokenizer.encode(text)
    return tokenizer.encode(text, add_special_tokens=False)


def eos_id(tokenizer) -> int:
    eid = getattr(tokenizer, "eos_token_id", None)
    return 0 if eid is None else int(eid)


def pack(docs: Iterable[list[int]], seq_len: int, eos: int, pad: int = 0) -> Iterator[tuple[list[int], list[int]]]:
    """Concatenate documents (EOS after each) and cut into (ids, labels) of exactly seq_len;
    the last partial sequence is padded with labels IGNORE_INDEX."""
    buf: list[int] = []
    for doc in docs:
        buf.extend(doc)
        buf.append(eos)
        while len(buf) >= seq_len:
            chunk, buf = buf[:seq_len], buf[seq_len:]
            yield chunk, list(chunk)
    if buf:
        n = len(buf)
        yield buf + [pad] * (seq_len - n), buf + [IGNORE_INDEX] * (seq_len - n)


def _files(path: str) -> list[Path]:
    p = Path(path)
    if p.is_file():
        return [p]
    return sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES)


def read_documents(path: str) -> Iterator[str]:
    """Documents of a local file or directory, in a fixed order (no Ray)."""
    for f in _files(path):
        kind = TEXT_SUFFIXES.get(f.suffix, "text")
        if kind == "parquet":
            import pyarrow.parquet as pq

            for text in pq.read_table(f, columns=["text"]).column("text").to_pylist():
                yield text
            continue
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                if kind == "json":
                    if line.strip():
                        yield json.loads(line)["text"]
                elif line.strip():
                    yield line.rstrip("\n")


def ray_dataset(path: str, tokenizer_ref: str):
    """A Ray Data dataset of tokenised documents (column 'ids'), read in a fixed order."""
    import ray.data

    ray.data.DataContext.get_current().execution_options.preserve_order = True
    files = [str(f) for f in _files(path)] if "://" not in path else [path]
    kind = TEXT_SUFFIXES.get(Path(files[0]).suffix, "text")
    if kind == "parquet":
        ds = ray.data.read_parquet(files, columns=["text"])
    elif kind == "json":
        ds = ray.data.read_json(files, lines=True)
    else:
        ds = ray.data.read_text(files, drop_empty_lines=True)

    def tokenize(batch):
        tok = load_tokenizer(tokenizer_ref)
        return {"ids": [encode(tok, t) for t in batch["text"]]}

    return ds.map_batches(tokenize, batch_format="numpy")


# ---- what the training loop consumes ----------------------------------------------------------
class MicroBatches:
    """An endless iterator of (input_ids, labels) micro-batches for one rank, starting at a step."""

    def __init__(self, cfg, vocab: int, rank: int, world: int, dataset=None):
        """`dataset`: a Ray Data iterator over every tokenised document (column 'ids'), or None
        to read `cfg.data` here."""
        self.cfg, self.vocab, self.rank, self.world = cfg, vocab, rank, world
        self.dataset = dataset

    def iterate(self, start_step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        cfg = self.cfg
        if not cfg.data:
            step = start_step
            while True:
                for micro in range(cfg.grad_accum):
                    yield synthetic_batch(
                        cfg.task, self.vocab, cfg.micro_batch, cfg.seq_len, cfg.seed, step, self.rank, micro
                    )
                step += 1
        skip = start_step * cfg.grad_accum * cfg.micro_batch  # sequences already trained on
        rows: list[tuple[list[int], list[int]]] = []
        for seq in self._sequences_forever():
            if skip:
                skip -= 1
                continue
            rows.append(seq)
            if len(rows) == cfg.micro_batch:
                yield torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])
                rows = []

    def _sequences_forever(self) -> Iterator[tuple[list[int], list[int]]]:
        cfg = self.cfg
        tok_ref = default_tokenizer_ref(cfg.preset, cfg.tokenizer, cfg.pretrained)
        tok = load_tokenizer(tok_ref)
        while True:  # epochs
            if self.dataset is not None:
                every = (
                    ids for b in self.dataset.iter_batches(batch_size=64, batch_format="numpy") for ids in b["ids"]
                )
                docs = (list(map(int, ids)) for i, ids in enumerate(every) if i % self.world == self.rank)
            else:
                docs = (encode(tok, t) for i, t in enumerate(read_documents(cfg.data)) if i % self.world == self.rank)
            n = 0
            for seq in pack(docs, cfg.seq_len, eos_id(tok)):
                n += 1
                yield seq
            if n == 0:
                raise RuntimeError(
                    f"rank {self.rank}: --data {cfg.data!r} gave this rank no tokens: use fewer workers or more data"
                )
