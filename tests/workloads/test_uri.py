"""workloads/uri.py: one parser for every path flag and key. Local paths, file:///abs and
s3://bucket/prefix are read; every other form is refused naming the flag, the value and the forms."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.errors import TrainConfigError
from workloads.uri import ACCEPTED, Location, parse_location, within


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
    with pytest.raises(TrainConfigError) as err:
        parse_location("--storage-path", text)
    msg = str(err.value)
    assert msg.startswith(f"--storage-path {text!r}") and why in msg and ACCEPTED in msg, f"got {msg!r}"


def test_a_file_written_here_refuses_s3():
    with pytest.raises(TrainConfigError, match=r"--summary-json 's3://b-1/x.json' is remote"):
        parse_location("--summary-json", "s3://b-1/x.json", remote=False)


def test_a_call_that_hangs_ends_with_a_message_at_its_deadline():
    never = threading.Event()
    with pytest.raises(TrainConfigError, match=r"listing --data 's3://b-1/x' did not answer within 0.2 s"):
        within(0.2, "listing --data 's3://b-1/x'", never.wait)
    never.set()


def test_a_call_that_answers_in_time_gives_its_value_or_its_error():
    assert within(5, "x", lambda: 7) == 7, "expected the call's value"
    with pytest.raises(KeyError):
        within(5, "x", lambda: {}["missing"])


# ---- The path forms users type, each pinned to the whole Location or the whole refusal (issue 48): S3 with and without
# a key or trailing slash, the wrong case and slash counts, bucket names at S3's length and character limits
# (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html), relative, absolute and ~ paths,
# file URIs, and a local-only flag.

LOCAL_ONLY = "a local path (or file:///absolute/path)"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("s3://bkt", Location("s3", "s3://bkt/", bucket="bkt", key="")),
        ("s3://bkt/", Location("s3", "s3://bkt/", bucket="bkt", key="")),
        ("s3://bkt/p", Location("s3", "s3://bkt/p", bucket="bkt", key="p")),
        ("s3://bkt/p/q.jsonl", Location("s3", "s3://bkt/p/q.jsonl", bucket="bkt", key="p/q.jsonl")),
        ("s3://bkt//p", Location("s3", "s3://bkt//p", bucket="bkt", key="/p")),
        ("s3://" + "a" * 63 + "/k", Location("s3", "s3://" + "a" * 63 + "/k", bucket="a" * 63, key="k")),
        ("s3://a.b-c/k", Location("s3", "s3://a.b-c/k", bucket="a.b-c", key="k")),
        ("data/x.jsonl", Location("local", "data/x.jsonl", path="data/x.jsonl")),
        ("./x", Location("local", "./x", path="x")),
        ("../x", Location("local", "../x", path="../x")),
        ("/abs/x", Location("local", "/abs/x", path="/abs/x")),
        ("c:/x", Location("local", "c:/x", path="c:/x")),
        ("file:///a%20b/c", Location("local", "file:///a%20b/c", path="/a b/c")),
        ("file:///", Location("local", "file:///", path="/")),
    ],
)
def test_each_accepted_form_is_the_whole_location(text, want):
    assert parse_location("--data", text) == want


@pytest.mark.parametrize("text", ["~/x", "~"])
def test_a_home_path_is_expanded_and_the_text_kept(text, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    want = Location("local", text, path=str(tmp_path / text[2:]) if text != "~" else str(tmp_path))
    assert parse_location("--out", text) == want


def test_a_location_is_remote_only_for_s3():
    assert (parse_location("--data", "s3://bkt/k").remote, parse_location("--data", "/k").remote) == (True, False)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("S3://bkt/x", "is not a path this project reads (write s3://bucket/prefix (two slashes))"),
        ("s3:/bkt", "is not a path this project reads (write s3://bucket/prefix (two slashes))"),
        ("Gs://bkt", "is not a path this project reads (Gs: is not read here)"),
        ("file:/abs", "is not a path this project reads (file: is not read here)"),
        ("file://host/abs", "is not a path this project reads (file: is not read here)"),
    ],
)
def test_a_foreign_or_misspelt_scheme_is_refused_whole(text, why):
    with pytest.raises(TrainConfigError) as err:
        parse_location("--data", text)
    assert str(err.value) == f"--data {text!r} {why}: pass {ACCEPTED}; for a local folder of that name write ./{text}"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("s3://", "names no bucket"),
        ("s3:///k", "names no bucket"),
        ("s3://ab/k", "has no valid bucket name ('ab': 3-63 of a-z 0-9 . -)"),
        ("s3://" + "a" * 64, f"has no valid bucket name ({'a' * 64!r}: 3-63 of a-z 0-9 . -)"),
        ("s3://bkt-/k", "has no valid bucket name ('bkt-': 3-63 of a-z 0-9 . -)"),
        ("s3://.bkt/k", "has no valid bucket name ('.bkt': 3-63 of a-z 0-9 . -)"),
        ("s3://Bkt/k", "has no valid bucket name ('Bkt': 3-63 of a-z 0-9 . -)"),
        ("s3://b_k/k", "has no valid bucket name ('b_k': 3-63 of a-z 0-9 . -)"),
    ],
)
def test_an_s3_uri_without_a_valid_bucket_is_refused_whole(text, why):
    with pytest.raises(TrainConfigError) as err:
        parse_location("--data", text)
    assert str(err.value) == f"--data {text!r} {why}: pass {ACCEPTED}"


@pytest.mark.parametrize(
    ("text", "remote", "why"),
    [
        ("", True, f"is empty: pass {ACCEPTED}"),
        (" \t", False, f"is empty: pass {LOCAL_ONLY}"),
        ("x\0", True, f"holds a NUL byte: pass {ACCEPTED}"),
        ("s3://bkt/k", False, f"is remote but this file is written on this machine: pass {LOCAL_ONLY}"),
        (
            "gs://bkt",
            False,
            f"is not a path this project reads (gs: is not read here): pass {LOCAL_ONLY}; "
            "for a local folder of that name write ./gs://bkt",
        ),
    ],
)
def test_empty_nul_and_remote_for_a_local_flag_are_refused_whole(text, remote, why):
    with pytest.raises(TrainConfigError) as err:
        parse_location("--summary-json", text, remote=remote)
    assert str(err.value) == f"--summary-json {text!r} {why}"


def test_a_local_only_flag_takes_local_paths_and_file_uris():
    got = [parse_location("--summary-json", t, remote=False).path for t in ("out/s.json", "file:///tmp/s.json")]
    assert got == ["out/s.json", "/tmp/s.json"]


_bucket = st.from_regex(r"\A[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")
_key = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=40)


@given(bucket=_bucket, key=_key)
def test_every_valid_bucket_and_key_round_trip(bucket, key):
    got = parse_location("--data", f"s3://{bucket}/{key}")
    assert (got.kind, got.bucket, got.key, got.uri) == ("s3", bucket, key, f"s3://{bucket}/{key}")


@given(text=st.text(st.characters(codec="utf-8", exclude_characters="\0:~"), min_size=1, max_size=40))
def test_every_path_without_a_scheme_is_local_as_typed(text):
    if not text.strip():
        return
    assert parse_location("--data", text) == Location("local", text, path=str(Path(text)))


def test_a_call_past_its_deadline_names_what_and_the_seconds():
    never = threading.Event()
    with pytest.raises(TrainConfigError) as err:
        within(0.05, "reading x", never.wait)
    never.set()
    assert str(err.value) == (
        "reading x did not answer within 0.05 s: check the network, the AWS region and credentials "
        "(aws s3 ls on the same URI), then retry"
    )


def test_a_call_that_exits_hands_its_exit_to_the_caller():
    def leave() -> None:
        raise SystemExit(3)

    with pytest.raises(SystemExit) as err:
        within(5, "x", leave)
    assert err.value.code == 3


def test_the_call_runs_in_a_daemon_thread_named_after_what():
    seen = within(5, "probe", lambda: (threading.current_thread().name, threading.current_thread().daemon))
    assert seen == ("within-probe", True)
