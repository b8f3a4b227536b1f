"""Each rank's share of ``--data``, and readers that read only that share.

The listed files, in their fixed order, make one space: bytes for text and JSONL, rows for Parquet.
Of a space of size T, rank r of w owns [r*T//w, (r+1)*T//w). A document is a line (text, JSONL) or a
row (Parquet), and a range holds the documents that *start* in it: a line cut by a boundary belongs,
whole, to the range where it starts. The rule composes: a range cut again (into Ray Data read tasks,
or at a resume cursor) still puts every document in exactly one piece, in the same order.

A *cursor* is a position in the space where a document starts (or the share's end). Every document
read comes with the cursor just after it; a checkpoint saves it, and a resumed rank reads from it,
reading and tokenising nothing before it.

What one rank reads: its share, plus the rest of the line that crosses its end, plus at most
``TAIL_READ`` bytes past that line (the reader reads small blocks once it is past its end). Parquet is
read by row group, so a rank reads at most one row group of its neighbours' at each end.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.config import TrainConfigError

CHUNK = 1 << 20  # bytes per read inside a range
TAIL_READ = 4096  # bytes per read once past the range's end, looking for the end of its last line
TASK_BYTES = 64 << 20  # a Ray Data read task's share of a text space
TASK_ROWS = 100_000  # ... and of a Parquet space
BATCH_ROWS = 1024  # documents per block a read task yields


@dataclass
class ReadStats:
    """What a reader read: bytes of text files, compressed bytes of Parquet row groups."""

    bytes: int = 0


@dataclass(frozen=True)
class Space:
    """The files of ``--data`` as one space: ``sizes`` in bytes (text, json) or rows (parquet)."""

    kind: str  # text | json | parquet
    uris: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.sizes)

    def share(self, rank: int, world: int) -> tuple[int, int]:
        """[lo, hi) of the space that rank ``rank`` of ``world`` reads."""
        return rank * self.total // world, (rank + 1) * self.total // world

    def pieces(self, lo: int, hi: int) -> Iterator[tuple[int, int, int, int]]:
        """(file index, file's offset in the space, start, end in the file) for [lo, hi)."""
        base = 0
        for i, size in enumerate(self.sizes):
            start, end = max(lo - base, 0), min(hi - base, size)
            if start < end:
                yield i, base, start, end
            base += size


def _filesystem(uri: str):
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(uri) if "://" in uri else (pafs.LocalFileSystem(), uri)


def space_of(kind: str, uris: tuple[str, ...], sizes: tuple[int, ...]) -> Space:
    """The space of a file list: text files by their listed ``sizes`` in bytes, Parquet files by the
    row counts in their footers (a few kB read per file)."""
    if kind != "parquet":
        return Space(kind, uris, sizes)
    import pyarrow.parquet as pq

    rows = []
    for uri in uris:
        fs, path = _filesystem(uri)
        with fs.open_input_file(path) as f:
            rows.append(pq.ParquetFile(f).metadata.num_rows)
    return Space(kind, uris, tuple(rows))


# ---- text and JSONL ------------------------------------------------------------------------------
class _Lines:
    """Lines of one open file that start in [start, end), each with the offset after it."""

    def __init__(self, f, start: int, end: int, stats: ReadStats):
        self.f, self.end, self.stats = f, end, stats
        self.buf, self.at = bytearray(), 0  # unread bytes, and their first one's offset in the file
        self.fpos = max(start - 1, 0)  # the next byte to read from the file
        f.seek(self.fpos)
        self.pos = start
        if start > 0:  # the byte before `start` says whether a line starts there
            self.at = self.fpos
            self._skip_to_line_start()

    def _more(self) -> bool:
        n = max(min(CHUNK, self.end - self.fpos), TAIL_READ)
        data = self.f.read(n)
        self.stats.bytes += len(data)
        self.fpos += len(data)
        self.buf += data
        return bool(data)

    def _find_newline(self) -> int:
        """Index in ``buf`` of the next newline, reading more as needed; -1 at the file's end."""
        i = self.buf.find(b"\n")
        while i < 0:
            seen = len(self.buf)
            if not self._more():
                return -1
            i = self.buf.find(b"\n", seen)
        return i

    def _skip_to_line_start(self) -> None:
        i = self._find_newline()
        if i < 0:  # no line starts after start-1
            self.pos, self.buf = self.end, bytearray()
            return
        del self.buf[: i + 1]
        self.pos = self.at = self.at + i + 1

    def __iter__(self) -> Iterator[tuple[bytes, int]]:
        while self.pos < self.end:
            i = self._find_newline()
            if i < 0:  # the last line has no newline
                if self.buf:
                    yield bytes(self.buf), self.pos + len(self.buf)
                return
            line = bytes(self.buf[:i])
            del self.buf[: i + 1]
            self.pos += i + 1
            yield line, self.pos


def _text_documents(space: Space, index: int, start: int, end: int, stats: ReadStats) -> Iterator[tuple[str, int]]:
    uri = space.uris[index]
    fs, path = _filesystem(uri)
    with fs.open_input_file(path) as f:
        for raw, after in _Lines(f, start, end, stats):
            try:
                text = raw.decode("utf-8").rstrip("\r")
            except UnicodeDecodeError:
                raise TrainConfigError(
                    f"--data file {uri!r} line at byte {after - len(raw) - 1} is not UTF-8: save the file as UTF-8"
                ) from None
            if not text.strip():
                continue
            if space.kind == "json":
                text = json_record_text(text, uri, f"line at byte {after - len(raw) - 1}")
            yield text, after


def json_record_text(line: str, name: str, where: str, flag: str = "--data") -> str:
    """The ``text`` of one JSONL record, or TrainConfigError naming the file, ``where`` and the fix."""
    try:
        doc = json.loads(line)
    except json.JSONDecodeError as e:
        raise TrainConfigError(
            f"{flag} file {name!r} {where} is not JSON ({e.msg} at column {e.colno}): write one JSON object a line, "
            'e.g. {"text": "..."}'
        ) from None
    if not isinstance(doc, dict):
        raise TrainConfigError(
            f'{flag} file {name!r} {where} is a JSON {type(doc).__name__}, not an object {{"text": ...}}'
        )
    if "text" not in doc:
        has = ", ".join(map(repr, list(doc)[:5])) or "no field"
        raise TrainConfigError(
            f"{flag} file {name!r} {where} has no 'text' field (it has {has}): name the field 'text'"
        )
    text = doc["text"]
    if text is None:
        raise TrainConfigError(f"{flag} file {name!r} {where} has text null: drop the record or give it text")
    if not isinstance(text, str):
        raise TrainConfigError(f"{flag} file {name!r} {where} has text of type {type(text).__name__}: make it a string")
    if not text.strip():
        raise TrainConfigError(f"{flag} file {name!r} {where} has empty text: drop the record or give it text")
    return text


# ---- Parquet -------------------------------------------------------------------------------------
def _parquet_documents(space: Space, index: int, start: int, end: int, stats: ReadStats) -> Iterator[tuple[str, int]]:
    import pyarrow.parquet as pq

    fs, path = _filesystem(space.uris[index])
    with fs.open_input_file(path) as f:
        pf = pq.ParquetFile(f)
        meta, first = pf.metadata, 0
        column = pf.schema_arrow.get_field_index("text")
        if column < 0:
            raise TrainConfigError(f"--data {space.uris[index]!r} has no 'text' column")
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            lo, hi = max(start, first), min(end, first + group.num_rows)
            if lo < hi:
                stats.bytes += group.column(column).total_compressed_size
                texts = pf.read_row_group(g, columns=["text"]).column("text").slice(lo - first, hi - lo)
                for j, text in enumerate(texts.to_pylist()):
                    if text is not None and str(text).strip():
                        yield str(text), lo + j + 1
            first += group.num_rows


def read_range(space: Space, lo: int, hi: int, stats: ReadStats | None = None) -> Iterator[tuple[str, int]]:
    """(document, cursor after it) for every document that starts in [lo, hi) of the space."""
    stats = stats if stats is not None else ReadStats()
    read = _parquet_documents if space.kind == "parquet" else _text_documents
    for index, base, start, end in space.pieces(lo, hi):
        for text, after in read(space, index, start, end, stats):
            yield text, base + after


# ---- Ray Data ------------------------------------------------------------------------------------
def ray_share(space: Space, lo: int, hi: int, task_size: int | None = None):
    """A Ray Data dataset of the documents in [lo, hi) (columns ``text`` and ``cursor``), in order:
    this rank's share only, read by read tasks of ``task_size`` units each (default ``TASK_BYTES``,
    or ``TASK_ROWS`` for Parquet)."""
    import ray.data

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False  # one bar per rank and epoch would flood the job's log
    step = task_size or (TASK_ROWS if space.kind == "parquet" else TASK_BYTES)
    # No CPU for the read tasks: the Train workers hold the node's CPUs, and reading is I/O.
    return ray.data.read_datasource(_datasource_class()(space, lo, hi, step), ray_remote_args={"num_cpus": 0})


def _task_cuts(lo: int, hi: int, step: int) -> list[tuple[int, int]]:
    cuts = list(range(lo, hi, step)) + [hi]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if a < b]


def _read_task_blocks(space: Space, lo: int, hi: int):
    import pyarrow as pa

    texts, cursors = [], []
    for text, cursor in read_range(space, lo, hi):
        texts.append(text)
        cursors.append(cursor)
        if len(texts) == BATCH_ROWS:
            yield pa.table({"text": texts, "cursor": pa.array(cursors, pa.int64())})
            texts, cursors = [], []
    if texts:
        yield pa.table({"text": texts, "cursor": pa.array(cursors, pa.int64())})


def _datasource_class():
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    class ShareDatasource(Datasource):
        def __init__(self, space: Space, lo: int, hi: int, step: int):
            self.space, self.lo, self.hi, self.step = space, lo, hi, step

        def estimate_inmemory_data_size(self):
            return None if self.space.kind == "parquet" else self.hi - self.lo

        def get_read_tasks(self, parallelism, per_task_row_limit=None, data_context=None):
            tasks = []
            for a, b in _task_cuts(self.lo, self.hi, self.step):
                meta = BlockMetadata(num_rows=None, size_bytes=None, exec_stats=None, input_files=None)
                tasks.append(ReadTask(lambda a=a, b=b: _read_task_blocks(self.space, a, b), meta))
            return tasks

    return ShareDatasource


def iterate_ray_share(dataset) -> Iterator[tuple[str, int]]:
    """(document, cursor) from a dataset made by ``ray_share``, in order."""
    for batch in dataset.iter_batches(batch_size=BATCH_ROWS, batch_format="pyarrow"):
        yield from zip(batch.column("text").to_pylist(), batch.column("cursor").to_pylist(), strict=True)
