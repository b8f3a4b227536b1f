"""`--data`'s head read at every place its end can fall (issue 48: input that straddles a read boundary): inside a
multi-byte UTF-8 character, inside a record, on a newline, past the file's end. The head size is set small for each
example (workloads/data_check.py reads HEAD_BYTES when it runs), so every boundary of a short file is reached.

What must hold, from the module's docstring: a good file is never refused wherever the head ends; a bad record or a
bad byte is refused exactly when the head holds it whole (a record cut by the head's end is the workers' to judge).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import data_check
from workloads.errors import ConfigError

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8).filter(str.strip)
_lines = st.lists(
    st.one_of(_text.map(lambda t: json.dumps({"text": t}, ensure_ascii=False)), st.just("")), min_size=1, max_size=6
)


def _check(data: bytes, head: int) -> str | None:
    """The refusal of a .jsonl file holding ``data`` with a head of ``head`` bytes, or None when it passes."""
    with tempfile.TemporaryDirectory() as d, pytest.MonkeyPatch.context() as mp:
        mp.setattr(data_check, "HEAD_BYTES", head)
        path = Path(d) / "c.jsonl"
        path.write_bytes(data)
        try:
            data_check.check_data(str(path), 1)
        except ConfigError as e:
            return str(e)
        return None


@settings(max_examples=30, deadline=None)
@given(lines=_lines.filter(lambda ls: any(ls)), head=st.integers(1, 200))
def test_a_good_file_passes_wherever_the_head_ends(lines, head):
    data = ("\n".join(lines) + "\n").encode()
    assert _check(data, head) is None, (data, head)


@settings(max_examples=30, deadline=None)
@given(before=_lines, after=_lines, head=st.integers(1, 200))
def test_a_bad_record_is_refused_exactly_when_the_head_holds_its_whole_line(before, after, head):
    good = "".join(line + "\n" for line in before).encode()
    bad = b'{"text": null}'
    data = good + bad + b"\n" + "".join(line + "\n" for line in after).encode()
    end = len(good) + len(bad)  # the offset of the bad line's newline
    got = _check(data, head)
    if end < head or len(data) <= head:
        assert got is not None and f"line {len(before) + 1}" in got, (data, head, got)
    else:
        assert got is None, (data, head, got)


@settings(max_examples=30, deadline=None)
@given(before=_lines, head=st.integers(1, 200))
def test_a_byte_that_is_not_utf8_is_refused_exactly_when_it_is_inside_the_head(before, head):
    good = "".join(line + "\n" for line in before).encode()
    data = good + b'{"text": "\xff"}\n'
    at = len(good) + 10
    got = _check(data, head)
    if at < head:
        assert got is not None and f"byte {at}:" in got and "is not UTF-8" in got, (data, head, got)
    else:
        assert got is None, (data, head, got)


@pytest.mark.parametrize("cut", range(1, 4))
def test_a_head_ending_inside_a_four_byte_character_passes(cut):
    data = json.dumps({"text": "a\U0001f600b"}, ensure_ascii=False).encode() + b"\n" + b'{"text": "x"}\n'
    start = data.index("\U0001f600".encode())
    assert _check(data, start + cut) is None


def test_a_whole_file_of_exactly_the_head_ending_without_a_newline_checks_its_last_line():
    data = b'{"text": "a"}\n{"text": 1}'
    assert "line 2" in (_check(data, len(data)) or ""), "the last line of a file read whole was skipped"
    assert _check(data, len(data) - 1) is None, "a last line cut by the head was judged"
