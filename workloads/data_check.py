"""`--data` checked before any worker starts: the head of every file or object, and the ranks' shares.

What is refused (TrainConfigError, one line naming the file, the record and the fix; exit status 2):
- an empty file, a file of blank lines only;
- text or JSONL that is not UTF-8 (a UTF-16 or UTF-8 byte-order mark included);
- a JSONL line that is not a JSON object, has no `text` field, or whose `text` is null, not a
  string, or empty (null was once trained on as the string "None");
- a Parquet file that is not Parquet, has no `text` column, or a `text` column of another type;
- a corpus too small for the ranks: fewer bytes (rows) than workers, or, for a corpus small enough to
  read whole (HEAD_BYTES), a rank whose share holds no document.

Only a head of each file is read (HEAD_BYTES of text, the first HEAD_ROWS rows of Parquet), each
within NETWORK_TIMEOUT_S for S3: the workers' readers (workloads/shards.py) refuse the same records
past the head, as a second line of defence.
"""

from __future__ import annotations

import codecs
from functools import partial

from workloads.data import DataFiles, list_data
from workloads.errors import TrainConfigError
from workloads.shards import _filesystem, json_record_text, read_range
from workloads.uri import NETWORK_TIMEOUT_S, within

HEAD_BYTES = 1 << 20
HEAD_ROWS = 1000
_BOMS = {codecs.BOM_UTF8: "UTF-8 with a byte-order mark", codecs.BOM_UTF16_LE: "UTF-16", codecs.BOM_UTF16_BE: "UTF-16"}


def check_data(uri: str, world: int, flag: str = "--data") -> DataFiles:
    """List ``uri`` and read the head of each of its files; TrainConfigError for the first bad one."""
    files = list_data(uri)
    check = _parquet_head if files.kind == "parquet" else _text_head
    for name, size in zip(files.uris, files.sizes, strict=True):
        if size == 0:
            raise TrainConfigError(f"{flag} file {name!r} is empty: remove it, or put one document a line in it")
        within(NETWORK_TIMEOUT_S, f"reading the head of {flag} file {name!r}", partial(check, files.kind, name, flag))
    _check_shares(files, world, flag)
    return files


def _text_head(kind: str, name: str, flag: str) -> None:
    fs, path = _filesystem(name)
    with fs.open_input_stream(path) as f:
        head = f.read(HEAD_BYTES + 1)
    whole = len(head) <= HEAD_BYTES
    for bom, what in _BOMS.items():
        if head.startswith(bom):
            raise TrainConfigError(f"{flag} file {name!r} is {what}, not plain UTF-8: save it as UTF-8 without a BOM")
    text = _utf8(head[:HEAD_BYTES], whole, name, flag)
    lines = text.split("\n")
    if not whole:
        lines = lines[:-1]  # cut by the head's end
    documents = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        documents += 1
        if kind == "json":
            json_record_text(line, name, f"line {number}", flag)
    if whole and not documents:
        raise TrainConfigError(
            f"{flag} file {name!r} holds only blank lines: remove it, or put one document a line in it"
        )


def _utf8(head: bytes, whole: bool, name: str, flag: str) -> str:
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(head, final=whole)
    except UnicodeDecodeError as e:
        line = head[: e.start].count(b"\n") + 1
        raise TrainConfigError(
            f"{flag} file {name!r} is not UTF-8 (line {line}, byte {e.start}: {head[e.start : e.start + 4]!r}): "
            "save it as UTF-8 (iconv -f LATIN1 -t UTF-8, or your editor's 'save with encoding')"
        ) from None


def _parquet_head(kind: str, name: str, flag: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, path = _filesystem(name)
    with fs.open_input_file(path) as f:
        try:
            pf = pq.ParquetFile(f)
        except (pa.ArrowInvalid, OSError) as e:
            raise TrainConfigError(f"{flag} file {name!r} is not a Parquet file ({e}): write it with pyarrow") from None
        schema = pf.schema_arrow
        if schema.get_field_index("text") < 0:
            raise TrainConfigError(
                f"{flag} file {name!r} has no 'text' column (it has {', '.join(schema.names[:5])}): name it 'text'"
            )
        kind_of = schema.field("text").type
        if not (pa.types.is_string(kind_of) or pa.types.is_large_string(kind_of)):
            raise TrainConfigError(f"{flag} file {name!r} has a 'text' column of type {kind_of}: store it as strings")


def _check_shares(files: DataFiles, world: int, flag: str) -> None:
    """Every rank gets a document: the corpus has at least one byte (row) per worker, and, when small
    enough to read whole, every rank's share holds a document (else the worker fails after Ray starts)."""
    space = files.space()
    unit = "rows" if files.kind == "parquet" else "bytes"
    if space.total < world:
        raise TrainConfigError(f"{flag} holds {space.total} {unit}, fewer than the {world} workers: use fewer workers")
    if files.kind == "parquet" or space.total > HEAD_BYTES:
        return
    for rank in range(world):
        if next(read_range(space, *space.share(rank, world)), None) is None:
            raise TrainConfigError(
                f"{flag} is too small for {world} workers: rank {rank}'s share of its {space.total} bytes holds no "
                "document; use fewer workers or more data"
            )
