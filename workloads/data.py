"""Where each worker's micro-batches come from.

- `random`: uniform random token ids (the reference job's default).
- `learnable`: a synthetic task a model can learn (each next token is a fixed permutation of the
  current one), so tests can demand that the loss falls.
- `--data PATH|s3://bucket/prefix/`: text (.txt, one document per line), JSONL (field "text") or
  Parquet (column "text") files, one format per prefix, listed through pyarrow's filesystem. Each rank
  reads only its own share of the corpus (``workloads/shards.py``: a contiguous 1/world of its bytes
  or rows, cut at document boundaries), through a Ray Data dataset of that share under Ray Train and
  directly under torchrun; it tokenises its documents once, with a tokenizer loaded once per process,
  and packs them into fixed-length sequences with EOS between documents, the last partial sequence
  padded with labels ignored: every token is trained on exactly once per epoch.
  Ray Train's own split (`streaming_split`) is not used: it hands blocks to whichever worker asks
  first and may drop rows to even the shards out, so neither "every token once" nor an exact resume
  would hold. The shares here are fixed by (corpus, rank, world) alone.

Synthetic batches are a pure function of (seed, step, rank, micro-step). For real data each rank's
position (epoch, the cursor where its next document starts, tokens carried over) goes into every
checkpoint; a resumed rank reads from the cursor, reading and tokenising nothing before it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from workloads.config import TrainConfigError
from workloads.loss import IGNORE_INDEX
from workloads.shards import Space, iterate_ray_share, ray_share, read_range, space_of
from workloads.uri import NETWORK_TIMEOUT_S, parse_location, within

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


@functools.lru_cache(maxsize=4)
def load_tokenizer(ref: str):
    """'bytes', a local tokenizer directory (offline), or a hub id; loaded once per process."""
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
            chunk = buf[:seq_len]
            del buf[:seq_len]
            yield chunk, list(chunk)
    if buf:
        yield padded_tail(buf, seq_len, pad)


def padded_tail(buf: list[int], seq_len: int, pad: int = 0) -> tuple[list[int], list[int]]:
    n = len(buf)
    return buf + [pad] * (seq_len - n), buf + [IGNORE_INDEX] * (seq_len - n)


# ---- where the documents are ----------------------------------------------------------------------
@dataclass(frozen=True)
class DataFiles:
    """The files of ``--data``: one format, a fixed order, and each file's size in bytes."""

    kind: str  # text | json | parquet
    uris: tuple[str, ...]
    sizes: tuple[int, ...]

    def space(self) -> Space:
        """The files as one space of bytes (text, JSONL) or rows (Parquet) that ranks share."""
        return space_of(self.kind, self.uris, self.sizes)


def _bad(uri: str, why: str) -> TrainConfigError:
    return TrainConfigError(f"--data {uri!r} {why}")


def list_data(uri: str) -> DataFiles:
    """List ``--data`` (a local file or directory, or an s3:// object or prefix) through pyarrow's
    filesystem, the same one Ray Data reads with. TrainConfigError, before any training, for a malformed
    s3:// URI, an empty prefix, files of no known format, or formats mixed under one prefix."""
    where = parse_location("--data", uri)
    try:
        if where.remote:
            sizes = within(NETWORK_TIMEOUT_S, f"listing --data {uri!r}", lambda: _list_files(where.uri))
            scheme = "s3://"
        else:
            sizes, scheme = _list_files(str(Path(where.path).absolute())), ""
    except OSError as e:  # pyarrow's: access denied, no such bucket, no credentials
        cause = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _bad(uri, f"cannot be listed ({cause}): check the path, or the AWS credentials and region") from None
    paths = sorted(sizes)
    if not paths:
        raise _bad(uri, "is empty or does not exist: point it at .txt, .jsonl or .parquet files")
    kinds = {TEXT_SUFFIXES[Path(p).suffix] for p in paths if Path(p).suffix in TEXT_SUFFIXES}
    if not kinds:
        names = ", ".join(Path(p).name for p in paths[:3])
        raise _bad(uri, f"holds no file of a known format ({names}): use .txt, .jsonl or .parquet")
    if len(kinds) > 1:
        raise _bad(uri, f"mixes formats {sorted(kinds)}: put one format under one prefix")
    (kind,) = kinds
    mine = [p for p in paths if TEXT_SUFFIXES.get(Path(p).suffix) == kind]
    return DataFiles(kind, tuple(scheme + p for p in mine), tuple(sizes[p] for p in mine))


def _list_files(uri: str) -> dict[str, int]:
    """Path -> size of every file at ``uri`` (a file, or a directory or prefix, recursively)."""
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(uri) if "://" in uri else (pafs.LocalFileSystem(), uri)
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        found = [info]
    elif info.type == pafs.FileType.Directory:
        found = [f for f in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if f.type == pafs.FileType.File]
    else:
        found = []
    return {f.path: f.size for f in found}


def read_documents(path: str) -> Iterator[str]:
    """Every document of ``--data``, in the corpus' fixed order, read in this process."""
    space = list_data(path).space()
    return (text for text, _ in read_range(space, 0, space.total))


# ---- what the training loop consumes ----------------------------------------------------------
@dataclass
class DataPosition:
    """Where one rank is in its share at a step boundary: the epoch, how many documents of the share
    it has packed, the cursor where its next document starts (``workloads/shards.py``), the size of
    the corpus it was taken in, and the tokens packed but not yet trained on. JSON-able (``vars``)."""

    epoch: int = 0
    docs: int = 0
    carry: list[int] = field(default_factory=list)
    cursor: int | None = None
    total: int | None = None


class MicroBatches:
    """An endless iterator of (input_ids, labels) micro-batches for one rank, starting at a step."""

    def __init__(self, cfg, vocab: int, rank: int, world: int, ray_data: bool = False):
        """``ray_data``: read this rank's share through a Ray Data dataset (inside a Ray Train worker),
        else in this process."""
        self.cfg, self.vocab, self.rank, self.world = cfg, vocab, rank, world
        self.ray_data = ray_data
        self.pos = DataPosition()

    def position(self) -> dict | None:
        """This rank's data position now (None for synthetic data, a pure function of the step)."""
        if not self.cfg.data:
            return None
        return {**vars(self.pos), "carry": list(self.pos.carry)}

    def iterate(self, start_step: int, position: dict | None = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Micro-batches from ``start_step``; real data resumes at ``position`` (this rank's, from
        the checkpoint), else from the share's start."""
        cfg = self.cfg
        if not cfg.data:
            step = start_step
            while True:
                for micro in range(cfg.grad_accum):
                    yield synthetic_batch(
                        cfg.task, self.vocab, cfg.micro_batch, cfg.seq_len, cfg.seed, step, self.rank, micro
                    )
                step += 1
        self.pos = DataPosition(**position) if position else DataPosition()
        # A checkpoint without a data position (written before positions were saved): re-pack from
        # the start and skip the sequences already trained on.
        skip = start_step * cfg.grad_accum * cfg.micro_batch if position is None else 0
        rows: list[tuple[list[int], list[int]]] = []
        for seq in self._sequences_forever():
            if skip:
                skip -= 1
                continue
            rows.append(seq)
            if len(rows) == cfg.micro_batch:
                yield torch.tensor([r[0] for r in rows]), torch.tensor([r[1] for r in rows])
                rows = []

    def _documents(self, space: Space, lo: int, hi: int) -> Iterator[tuple[str, int]]:
        """(document, cursor after it) of [lo, hi) of this rank's share."""
        if self.ray_data:
            return iterate_ray_share(ray_share(space, lo, hi))
        return read_range(space, lo, hi)

    def _resume_cursor(self, space: Space, lo: int, hi: int) -> int:
        """Where this epoch's reading starts: the saved cursor, checked against the corpus and the share."""
        pos, data = self.pos, self.cfg.data
        if pos.cursor is None:
            return lo
        if pos.total is not None and pos.total != space.total:
            raise TrainConfigError(
                f"--data {data!r} changed since the checkpoint (its size was {pos.total}, now {space.total}): "
                "resume with the same corpus, or start a new run"
            )
        if not lo <= pos.cursor <= hi:
            raise TrainConfigError(
                f"rank {self.rank}: the checkpoint's data cursor {pos.cursor} lies outside this rank's share "
                f"[{lo}, {hi}) of --data {data!r}: resume with the number of workers the run started with"
            )
        return pos.cursor

    def _sequences_forever(self) -> Iterator[tuple[list[int], list[int]]]:
        """Packed sequences from ``self.pos`` on, keeping ``self.pos`` current at every yield."""
        cfg, pos = self.cfg, self.pos
        tok = load_tokenizer(default_tokenizer_ref(cfg.preset, cfg.tokenizer, cfg.pretrained))
        eos = eos_id(tok)
        space = list_data(cfg.data).space()
        lo, hi = space.share(self.rank, self.world)
        start = self._resume_cursor(space, lo, hi)
        pos.total = space.total
        while True:  # epochs
            resumed, n = start > lo or bool(pos.carry), 0
            legacy_skip = pos.docs if pos.cursor is None else 0  # a position saved before cursors
            for text, cursor in self._documents(space, start, hi):
                if legacy_skip:
                    legacy_skip -= 1
                    continue  # trained on before the checkpoint: skipped without tokenising
                pos.carry.extend(encode(tok, text))
                pos.carry.append(eos)
                pos.docs, pos.cursor = pos.docs + 1, cursor
                while len(pos.carry) >= cfg.seq_len:
                    chunk = pos.carry[: cfg.seq_len]
                    del pos.carry[: cfg.seq_len]
                    n += 1
                    yield chunk, list(chunk)
            tail = list(pos.carry)
            pos.epoch, pos.docs, pos.cursor, pos.carry = pos.epoch + 1, 0, lo, []
            start = lo
            if tail:
                n += 1
                yield padded_tail(tail, cfg.seq_len)
            if n == 0 and not resumed:
                raise RuntimeError(
                    f"rank {self.rank}: --data {cfg.data!r} gave this rank no tokens: use fewer workers or more data"
                )
