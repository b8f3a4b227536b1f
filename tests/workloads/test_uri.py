"""workloads/uri.py: one parser for every path flag and key. Local paths, file:///abs and
s3://bucket/prefix are read; every other form is refused naming the flag, the value and the forms."""

from __future__ import annotations

import threading

import pytest

from workloads.errors import ConfigError
from workloads.uri import ACCEPTED, parse_location, within


@pytest.mark.parametrize(
    "text, kind, where",
    [
        ("data/corpus.jsonl", "local", "data/corpus.jsonl"),
        ("/abs/dir", "local", "/abs/dir"),
        ("./s3:odd-name", "local", "s3:odd-name"),
        ("file:///mnt/shared/ckpt", "local", "/mnt/shared/ckpt"),
        ("s3://my-bucket/runs/x", "s3", "s3://my-bucket/runs/x"),
        ("s3://my.bucket.1", "s3", "s3://my.bucket.1/"),
    ],
)
def test_accepted_forms_parse_to_their_place(text, kind, where):
    loc = parse_location("--storage-path", text)
    got = loc.path if kind == "local" else loc.uri
    assert (loc.kind, got) == (kind, where), f"expected {kind} {where!r} for {text!r}, got {loc}"


@pytest.mark.parametrize(
    "text, why",
    [
        ("s3:/bucket/x", "two slashes"),
        ("s3:bucket/x", "two slashes"),
        ("S3:/Bucket", "two slashes"),
        ("s3://", "names no bucket"),
        ("s3:///key", "names no bucket"),
        ("s3://Bad_Bucket/x", "no valid bucket name"),
        ("s3://ab/x", "no valid bucket name"),
        ("s3://-bucket/x", "no valid bucket name"),
        ("gs://bucket/x", "gs: is not read here"),
        ("http://example.com/data", "http: is not read here"),
        ("https://example.com/data", "https: is not read here"),
        ("hdfs://namenode/x", "hdfs: is not read here"),
        ("file://relative/x", "file: is not read here"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("a\0b", "NUL byte"),
    ],
)
def test_other_forms_are_refused_with_the_accepted_ones(text, why):
    with pytest.raises(ConfigError) as err:
        parse_location("--storage-path", text)
    msg = str(err.value)
    assert msg.startswith(f"--storage-path {text!r}") and why in msg and ACCEPTED in msg, f"got {msg!r}"


def test_a_file_written_here_refuses_s3():
    with pytest.raises(ConfigError, match=r"--summary-json 's3://b-1/x.json' is remote"):
        parse_location("--summary-json", "s3://b-1/x.json", remote=False)


def test_a_call_that_hangs_ends_with_a_message_at_its_deadline():
    never = threading.Event()
    with pytest.raises(ConfigError, match=r"listing --data 's3://b-1/x' did not answer within 0.2 s"):
        within(0.2, "listing --data 's3://b-1/x'", never.wait)
    never.set()


def test_a_call_that_answers_in_time_gives_its_value_or_its_error():
    assert within(5, "x", lambda: 7) == 7, "expected the call's value"
    with pytest.raises(KeyError):
        within(5, "x", lambda: {}["missing"])
