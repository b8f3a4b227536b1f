"""Each rank reads only its share of --data: every document once over the ranks, in the corpus'
order, and no more bytes than its share plus the line that crosses its end."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from unittest.mock import patch

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import shards
from workloads.config import TrainConfig, TrainConfigError
from workloads.data import MicroBatches, list_data, read_documents
from workloads.shards import TAIL_READ, ReadStats, Space, read_range

# Lines of very different lengths (one longer than several shares), multi-byte UTF-8, a CRLF line,
# and blank lines that are no document.
DOCS = [f"doc {i} " + ("ü€" if i % 5 == 0 else "w") * (i * 37 % 300) for i in range(120)] + ["long " * 2000]
DOCS += [f"crlf {i}" for i in range(3)]


def _write_text(root, files: int = 3, kind: str = "txt") -> list[str]:
    """DOCS over ``files`` files; returns the documents in corpus order."""
    root.mkdir(parents=True, exist_ok=True)
    per = -(-len(DOCS) // files)
    for f in range(files):
        part = DOCS[f * per : (f + 1) * per]
        lines = [json.dumps({"text": d}) if kind == "jsonl" else d for d in part]
        body = "\n".join(lines[:2]) + "\n\n" + "\r\n".join(lines[2:4]) + "\r\n" + "\n".join(lines[4:])
        if f != files - 1:
            body += "\n"  # the last file ends without a newline
        (root / f"part-{f}.{kind}").write_bytes(body.encode("utf-8"))
    return DOCS


def _share_docs(space, world):
    return [[t for t, _ in read_range(space, *space.share(r, world))] for r in range(world)]


@pytest.mark.parametrize("kind", ["txt", "jsonl"])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 7])
def test_every_document_is_read_once_by_exactly_one_rank_in_corpus_order(tmp_path, kind, world):
    docs = _write_text(tmp_path / "c", kind=kind)
    space = list_data(str(tmp_path / "c")).space()
    shares = _share_docs(space, world)
    assert [d for share in shares for d in share] == docs
    assert sum(1 for s in shares if s) >= min(world, 2), f"the shares are {[len(s) for s in shares]} documents"


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_parquet_rows_are_shared_by_row_over_row_groups(tmp_path, world):
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"text": DOCS[:50]}), tmp_path / "p" / "a.parquet", row_group_size=7)
    pq.write_table(pa.table({"text": DOCS[50:] + [None, "  "]}), tmp_path / "p" / "b.parquet", row_group_size=11)
    space = list_data(str(tmp_path / "p")).space()
    shares = _share_docs(space, world)
    assert [d for s in shares for d in s] == DOCS, "a null or blank row is no document; every other row once"
    assert max(map(len, shares)) - min(map(len, shares)) <= 2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Space, list[str]]:
    """DOCS over three text files, written once for the properties that cut it."""
    root = tmp_path_factory.mktemp("corpus") / "c"
    docs = _write_text(root)
    return list_data(str(root)).space(), docs


@settings(max_examples=30, deadline=None, derandomize=True)
@given(cuts=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=0, max_size=40), last=st.floats(0.0, 1.0))
def test_any_cut_of_the_space_reads_the_same_documents_with_cursors_at_the_cuts(corpus, cuts, last):
    """The rule composes: Ray Data read tasks and resume cursors cut the share again."""
    space, docs = corpus
    bounds = sorted({0, space.total, *(int(c * space.total) for c in cuts)})
    got, cursors = [], []
    for a, b in zip(bounds, bounds[1:], strict=False):
        for text, cursor in read_range(space, a, b):
            got.append(text)
            cursors.append(cursor)
    assert got == docs
    assert cursors == sorted(cursors) and len(set(cursors)) == len(cursors)
    # Reading from a document's cursor gives exactly the documents after it.
    k = min(int(last * len(docs)), len(docs) - 1)
    assert [t for t, _ in read_range(space, cursors[k], space.total)] == docs[k + 1 :]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_each_rank_reads_its_share_plus_at_most_the_line_across_its_end(tmp_path, world):
    _write_text(tmp_path / "c")
    files = list_data(str(tmp_path / "c"))
    space = files.space()
    longest = max(len(line) + 2 for u in files.uris for line in open(u, "rb").read().split(b"\n"))
    total_read = 0
    for rank in range(world):
        lo, hi = space.share(rank, world)
        stats = ReadStats()
        for _ in read_range(space, lo, hi, stats):
            pass
        bound = (hi - lo) + 1 + longest + TAIL_READ
        assert stats.bytes <= bound, f"rank {rank} of {world} read {stats.bytes} bytes of a {hi - lo}-byte share"
        total_read += stats.bytes
    assert total_read < space.total * 1.5, f"{total_read} bytes read for a {space.total}-byte corpus"


def test_a_parquet_rank_reads_only_the_row_groups_of_its_share(tmp_path):
    pq.write_table(
        pa.table({"text": [f"row {i} " * 20 for i in range(400)]}), tmp_path / "a.parquet", row_group_size=25
    )
    space = list_data(str(tmp_path / "a.parquet")).space()
    meta = pq.ParquetFile(tmp_path / "a.parquet").metadata
    per_group = max(meta.row_group(g).column(0).total_compressed_size for g in range(meta.num_row_groups))
    whole = sum(meta.row_group(g).column(0).total_compressed_size for g in range(meta.num_row_groups))
    for rank in range(4):
        stats = ReadStats()
        assert len(list(read_range(space, *space.share(rank, 4), stats))) == 100
        assert stats.bytes <= whole / 4 + per_group, f"rank {rank} read {stats.bytes} of {whole} bytes"


def test_a_malformed_jsonl_line_is_a_config_error_naming_the_file_and_offset(tmp_path):
    (tmp_path / "a.jsonl").write_text('{"text": "fine"}\n{"txt": "no text field"}\n')
    with pytest.raises(TrainConfigError, match=r"a\.jsonl' line at byte 17 has no 'text' field \(it has 'txt'\)"):
        list(read_documents(str(tmp_path / "a.jsonl")))


@pytest.mark.parametrize("record", ['{"text": null}', '{"text": 7}', '{"text": ""}'])
def test_the_reader_refuses_a_record_without_usable_text_past_any_head(tmp_path, record):
    # null was once trained on as the string "None"; the reader is the workers' second line of defence
    (tmp_path / "a.jsonl").write_text('{"text": "fine"}\n' + record + "\n")
    with pytest.raises(
        TrainConfigError, match=r"a\.jsonl' line at byte 17 has (text null|text of type int|empty text)"
    ):
        list(read_documents(str(tmp_path / "a.jsonl")))


def test_the_reader_refuses_a_line_that_is_not_utf8(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"fine\ncaf\xe9\n")
    with pytest.raises(TrainConfigError, match=r"a\.txt' line at byte 5 is not UTF-8"):
        list(read_documents(str(tmp_path / "a.txt")))


def _stream(tmp_path, rank=0, world=2):
    cfg = TrainConfig(
        preset="tiny",
        data=str(tmp_path / "c"),
        seq_len=16,
        global_batch_size=world,
        num_workers=world,
        micro_batch_size=1,
    )
    return MicroBatches(cfg, 512, rank, world)


def test_resume_reads_from_the_saved_cursor_and_nothing_before_it(tmp_path, monkeypatch):
    import workloads.data as data

    _write_text(tmp_path / "c")
    stream = _stream(tmp_path, rank=1)
    it = stream.iterate(0)
    full = [next(it)[0] for _ in range(30)]
    stream = _stream(tmp_path, rank=1)
    it = stream.iterate(0)
    for _ in range(12):
        next(it)
    position = stream.position()
    starts = []
    real = data.read_range
    monkeypatch.setattr(data, "read_range", lambda space, lo, hi, *a: starts.append(lo) or real(space, lo, hi, *a))
    resumed = _stream(tmp_path, rank=1).iterate(12, position)
    assert [next(resumed)[0].tolist() for _ in range(18)] == [t.tolist() for t in full[12:]]
    assert starts == [position["cursor"]], f"the resumed rank read from {starts}, its cursor is {position['cursor']}"
    assert position["cursor"] > list_data(str(tmp_path / "c")).space().share(1, 2)[0]


def test_resume_on_a_changed_corpus_or_another_world_size_is_refused(tmp_path):
    _write_text(tmp_path / "c")
    stream = _stream(tmp_path, rank=1)
    it = stream.iterate(0)
    for _ in range(5):
        next(it)
    position = stream.position()
    with pytest.raises(TrainConfigError, match="outside this rank's share .*resume with the number of workers"):
        next(_stream(tmp_path, rank=0, world=4).iterate(5, position))
    (tmp_path / "c" / "part-9.txt").write_text("one more document\n")
    with pytest.raises(TrainConfigError, match="changed since the checkpoint"):
        next(_stream(tmp_path, rank=1).iterate(5, position))


def test_short_last_documents_past_the_even_split_are_still_read(tmp_path):
    # 10 one-letter lines are 20 bytes: over 3 ranks an even split ends at 18 and would drop "j"
    (tmp_path / "c").mkdir()
    docs = list("abcdefghij")
    (tmp_path / "c" / "t.txt").write_text("".join(d + "\n" for d in docs))
    shares = _share_docs(list_data(str(tmp_path / "c")).space(), 3)
    assert [d for s in shares for d in s] == docs, f"expected every document once, got {shares}"


def test_parquet_rows_past_the_even_split_are_still_read(tmp_path):
    (tmp_path / "p").mkdir()
    docs = [f"row {i}" for i in range(10)]
    pq.write_table(pa.table({"text": docs}), tmp_path / "p" / "a.parquet", row_group_size=3)
    shares = _share_docs(list_data(str(tmp_path / "p")).space(), 4)
    assert [d for s in shares for d in s] == docs, f"expected all 10 rows over 4 ranks, got {shares}"


def test_read_task_cuts_cover_a_share_that_is_no_multiple_of_the_task_size():
    from workloads.shards import _task_cuts

    cuts = _task_cuts(5, 27, 10)
    assert cuts == [(5, 15), (15, 25), (25, 27)], f"expected the short last task kept, got {cuts}"


# ---- Properties of the data shares (workloads/shards.py): for every corpus size and world size, the ranks' shares
# are disjoint and complete, and reading them yields every document exactly once, in the corpus' order, whatever
# the files' sizes, the documents' lengths (multi-byte UTF-8 across the readers' block boundaries included) and
# the line endings (LF or CRLF).

PROPERTY = settings(max_examples=100, deadline=None, derandomize=True)


spaces = st.lists(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=6).map(
    lambda sizes: Space("text", tuple(f"f{i}.txt" for i in range(len(sizes))), tuple(sizes))
)


@PROPERTY
@given(space=spaces, world=st.integers(min_value=1, max_value=64))
def test_shares_are_disjoint_and_complete_for_every_size_and_world(space, world):
    shares = [space.share(r, world) for r in range(world)]
    covered = [(lo, hi) for lo, hi in shares]
    assert covered[0][0] == 0 and covered[-1][1] == space.total, f"{shares} do not span [0, {space.total})"
    gaps = [(a, b) for a, b in zip(covered, covered[1:], strict=False) if a[1] != b[0] or a[0] > a[1]]
    assert not gaps, f"shares overlap or leave a gap: {gaps} of {shares}"


@PROPERTY
@given(space=spaces, world=st.integers(min_value=1, max_value=16))
def test_each_share_maps_onto_the_files_without_a_byte_lost_or_repeated(space, world):
    sizes = space.sizes
    per_file = [0] * len(sizes)
    for r in range(world):
        for index, base, start, end in space.pieces(*space.share(r, world)):
            assert base == sum(sizes[:index]) and 0 <= start < end <= sizes[index], (index, base, start, end)
            per_file[index] += end - start
    assert per_file == list(sizes), f"bytes read per file {per_file}, file sizes {sizes}"


document = st.text(alphabet=st.sampled_from("abz €ü✓中"), min_size=0, max_size=300).map(lambda s: "d" + s + "x")


@PROPERTY
@given(
    files=st.lists(st.lists(document, min_size=0, max_size=12), min_size=1, max_size=4),
    world=st.integers(min_value=1, max_value=9),
    crlf=st.booleans(),
    blocks=st.tuples(st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=16)),
)
def test_reading_every_share_yields_every_document_once_in_corpus_order(files, world, crlf, blocks):
    end = "\r\n" if crlf else "\n"
    # the readers' block sizes shrunk to a few bytes, so lines and multi-byte characters cross block ends
    with (
        tempfile.TemporaryDirectory() as d,
        patch.object(shards, "CHUNK", blocks[0]),
        patch.object(shards, "TAIL_READ", blocks[1]),
    ):
        for i, docs in enumerate(files):
            (Path(d) / f"part-{i}.txt").write_bytes("".join(doc + end for doc in docs).encode() or b"\n")
        space = list_data(d).space()
        read = [text for r in range(world) for text, _ in read_range(space, *space.share(r, world))]
    expected = [doc for docs in files for doc in docs]
    assert read == expected, f"{len(read)} documents read over {world} ranks (blocks {blocks}), {len(expected)} written"
