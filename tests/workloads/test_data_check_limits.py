"""The limits and messages of `--data`'s check (workloads/data_check.py), on both sides of each limit.

Written against the survivors of a mutmut run (bench/results/mutation/2026-12-06-data-verdict-verify-schema.md).
The head size is written here as a number, 1 MiB, from the module's docstring ("Only a head of each file is read
(HEAD_BYTES of text ...)"), not imported from the code under test.
"""

from __future__ import annotations

import io
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workloads import data_check
from workloads.data_check import check_data
from workloads.errors import ConfigError

HEAD = 1 << 20  # 1 MiB: the head of a text file that the check reads


def _refusal(path, world=1, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        check_data(str(path), world, **kw)
    return str(e.value)


def _write(tmp_path, name: str, data: bytes):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _parquet(tmp_path, name: str, table: pa.Table):
    p = tmp_path / name
    pq.write_table(table, p)
    return p


def _good_lines(n: int) -> bytes:
    """``n`` bytes of good JSONL records, each line ending in a newline."""
    line = b'{"text": "abcdefgh"}\n'  # 21 bytes
    body = line * (n // len(line) - 1)
    rest = n - len(body)  # 21 to 41 bytes: one last record of that length
    return body + b'{"text": "' + b"x" * (rest - 13) + b'"}\n'


def test_without_a_flag_the_message_names_data(tmp_path):
    msg = _refusal(_write(tmp_path, "a.txt", b"\n\n"))
    assert msg.startswith("--data file "), msg


def test_a_too_small_corpus_names_the_flag_it_came_from(tmp_path):
    msg = _refusal(_write(tmp_path, "a.txt", b"a"), world=2, flag="--eval-data")
    assert msg.startswith("--eval-data holds 1 bytes"), msg


def test_a_file_that_is_not_utf8_names_the_flag_it_came_from(tmp_path):
    msg = _refusal(_write(tmp_path, "a.txt", b"\xff\n"), flag="--eval-data")
    assert msg.startswith("--eval-data file "), msg


def test_a_text_corpus_smaller_than_the_workers_is_counted_in_bytes(tmp_path):
    msg = _refusal(_write(tmp_path, "a.txt", b"a"), world=2)
    assert "holds 1 bytes, fewer than the 2 workers: use fewer workers" in msg, msg


def test_a_parquet_corpus_smaller_than_the_workers_is_counted_in_rows(tmp_path):
    p = _parquet(tmp_path, "a.parquet", pa.table({"text": ["one"]}))
    msg = _refusal(p, world=2)
    assert "holds 1 rows, fewer than the 2 workers" in msg, msg


def test_a_parquet_corpus_of_exactly_one_row_per_worker_passes(tmp_path):
    p = _parquet(tmp_path, "a.parquet", pa.table({"text": ["one", "two"]}))
    assert check_data(str(p), 2).kind == "parquet"


def test_a_parquet_text_column_of_large_strings_passes(tmp_path):
    table = pa.table({"text": pa.array(["one", "two"], type=pa.large_string())})
    assert check_data(str(_parquet(tmp_path, "a.parquet", table)), 1).kind == "parquet"


def test_a_parquet_without_text_names_its_first_five_columns(tmp_path):
    table = pa.table({c: [1] for c in "abcdef"})
    msg = _refusal(_parquet(tmp_path, "a.parquet", table))
    assert "(it has a, b, c, d, e): name it 'text'" in msg, msg


def test_a_bad_byte_is_located_by_its_line(tmp_path):
    msg = _refusal(_write(tmp_path, "a.txt", b"one\ntwo\nthr\xffee\n"))
    assert "(line 3, byte 11:" in msg, msg


def test_a_bad_byte_is_shown_with_the_three_bytes_after_it(tmp_path):
    msg = _refusal(_write(tmp_path, "a.txt", b"ok\n\xff\xfeabcdef\n"))
    assert r"byte 3: b'\xff\xfeab')" in msg, msg


def test_a_file_that_is_not_utf8_is_told_how_to_convert_it(tmp_path):
    msg = _refusal(_write(tmp_path, "a.txt", b"caf\xe9\n"))
    assert msg.endswith("save it as UTF-8 (iconv -f LATIN1 -t UTF-8, or your editor's 'save with encoding')"), msg


def test_a_whole_file_ending_inside_a_utf8_character_is_refused(tmp_path):
    # "é" is C3 A9 in UTF-8: the file stops after its first byte.
    msg = _refusal(_write(tmp_path, "a.txt", b"caf\xc3"))
    assert "is not UTF-8 (line 1, byte 3" in msg, msg


def test_a_bad_record_after_a_blank_line_is_refused(tmp_path):
    msg = _refusal(_write(tmp_path, "a.jsonl", b'{"text": "a"}\n\n{"text": null}\n'))
    assert "line 3 has text null" in msg, msg


def test_a_file_of_exactly_the_head_is_read_to_its_last_line(tmp_path):
    bad = b'{"text": null}'  # no newline: the file's last line
    p = _write(tmp_path, "a.jsonl", _good_lines(HEAD - len(bad)) + bad)
    assert p.stat().st_size == HEAD
    assert "has text null" in _refusal(p)


def test_a_bad_record_on_line_two_of_a_large_file_is_refused(tmp_path):
    p = _write(tmp_path, "a.jsonl", b'{"text": "a"}\n{"text": null}\n' + _good_lines(HEAD + 100))
    assert "line 2 has text null" in _refusal(p)


def test_the_last_whole_line_of_a_head_cut_mid_line_is_checked(tmp_path):
    bad = b'{"text": null}\n'
    # The bad record ends 10 bytes before the head's end; a long line runs past it.
    p = _write(tmp_path, "a.jsonl", _good_lines(HEAD - 10 - len(bad)) + bad + b'{"text": "' + b"y" * 100 + b'"}\n')
    assert "has text null" in _refusal(p)


def test_a_small_corpus_whose_second_share_holds_no_document_is_refused(tmp_path):
    # One document of exactly 1 MiB: it starts in rank 0's share, so rank 1's holds none.
    p = _write(tmp_path, "a.txt", b"x" * (HEAD - 1) + b"\n")
    msg = _refusal(p, world=2)
    assert msg.endswith("rank 1's share of its 1048576 bytes holds no document; use fewer workers or more data"), msg


def test_a_corpus_past_the_head_is_not_read_whole_for_the_shares(tmp_path):
    # The same one-document corpus, one byte past the head: its shares are left to the workers' readers.
    p = _write(tmp_path, "a.txt", b"x" * HEAD + b"\n")
    assert check_data(str(p), 2).sizes == (HEAD + 1,)


class _CountingStream(io.BytesIO):
    def __enter__(self):
        return self


class _CountingFs:
    """A stand-in of pyarrow's filesystem (`open_input_stream`, as workloads/shards.py's `_filesystem`
    returns it) that records how many bytes were handed out."""

    def __init__(self, data: bytes):
        self.data, self.read = data, 0

    def open_input_stream(self, path):
        fs = self

        class Stream(_CountingStream):
            def read(self, n=-1):
                out = super().read(n)
                fs.read += len(out)
                return out

        return Stream(self.data)


def test_only_the_head_of_a_text_file_is_read(tmp_path, monkeypatch):
    p = _write(tmp_path, "a.txt", b"doc\n" * (HEAD // 2))  # 2 MiB
    fs = _CountingFs(p.read_bytes())
    monkeypatch.setattr(data_check, "_filesystem", lambda name: (fs, name))
    data_check._text_head("text", str(p), "--data")
    assert fs.read == HEAD + 1, f"read {fs.read} bytes, expected the head and one byte to know it was cut"


def test_a_head_read_that_hangs_is_refused_after_the_network_timeout(tmp_path, monkeypatch):
    p = _write(tmp_path, "a.txt", b"doc\n")
    release = threading.Event()

    class HangingFs:
        def open_input_stream(self, path):
            release.wait(10)  # a network path that drops packets; released when the test ends
            return _CountingStream(b"doc\n")

    monkeypatch.setattr(data_check, "_filesystem", lambda name: (HangingFs(), name))
    monkeypatch.setattr(data_check, "NETWORK_TIMEOUT_S", 0.05)
    try:
        msg = _refusal(p)
    finally:
        release.set()
    assert msg.startswith(f"reading the head of --data file {str(p)!r} did not answer within 0.05 s"), msg
