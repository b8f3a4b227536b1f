"""Properties of the data shares (workloads/shards.py): for every corpus size and world size, the ranks' shares
are disjoint and complete, and reading them yields every document exactly once, in the corpus' order, whatever
the files' sizes, the documents' lengths (multi-byte UTF-8 across the readers' block boundaries included) and
the line endings (LF or CRLF)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import shards
from workloads.data import list_data
from workloads.shards import Space, read_range

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
