"""--data is checked before any worker starts (workloads/data_check.py): python -m workloads.train
refuses a bad file with exit 2 and one line naming the file, the record and the fix, before Ray."""

from __future__ import annotations

import codecs

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workloads import train
from workloads.data_check import check_data
from workloads.errors import ConfigError


@pytest.fixture
def no_ray(monkeypatch, tmp_path):
    """Fail the test if the launcher gets as far as starting Ray (run directories go under tmp_path)."""
    monkeypatch.chdir(tmp_path)

    def started(cfg):
        raise AssertionError("Ray was started: the data should have been refused before")

    monkeypatch.setattr(train, "run_ray", started)


def _train(capsys, data, *args) -> tuple[int, str]:
    rc = train.main(["--preset", "tiny", "--steps", "1", "--num-workers", "2", "--data", str(data), *args])
    return rc, capsys.readouterr().err


BAD_FILES = {
    "empty.txt": (b"", "is empty"),
    "blank.txt": (b"\n  \n\n", "holds only blank lines"),
    "latin1.txt": ("café au lait\n".encode("latin-1"), "is not UTF-8 (line 1"),
    "utf16.txt": ("hello\n".encode("utf-16"), "is UTF-16, not plain UTF-8"),
    "bom.jsonl": (codecs.BOM_UTF8 + b'{"text": "a"}\n', "UTF-8 with a byte-order mark"),
    "null.jsonl": (b'{"text": "a"}\n{"text": null}\n', "line 2 has text null"),
    "missing.jsonl": (b'{"body": "a"}\n', "line 1 has no 'text' field (it has 'body')"),
    "number.jsonl": (b'{"text": 12}\n', "line 1 has text of type int"),
    "emptytext.jsonl": (b'{"text": ""}\n', "line 1 has empty text"),
    "array.jsonl": (b'["a", "b"]\n', "line 1 is a JSON list"),
    "notjson.jsonl": (b"just words\n", "line 1 is not JSON"),
    "csvlike.jsonl": (b'{"text": "a"}\n{"text": "b",}\n', "line 2 is not JSON"),
    "notparquet.parquet": (b"PAR1 no footer here", "is not a Parquet file"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_bad_data_file_is_refused_before_ray_with_one_line(tmp_path, capsys, no_ray, name):
    body, why = BAD_FILES[name]
    (tmp_path / name).write_bytes(body)
    rc, err = _train(capsys, tmp_path / name)
    assert rc == 2 and err.count("\n") == 1, f"expected exit 2 and one line for {name}, got {rc}: {err!r}"
    assert name in err and why in err, f"expected {why!r} naming {name} in {err!r}"


def test_parquet_without_a_text_column_is_refused_naming_its_columns(tmp_path, capsys, no_ray):
    pq.write_table(pa.table({"body": ["a", "b"]}), tmp_path / "a.parquet")
    rc, err = _train(capsys, tmp_path / "a.parquet")
    assert rc == 2 and "has no 'text' column (it has body)" in err, f"got {rc}: {err!r}"


def test_parquet_text_column_of_numbers_is_refused(tmp_path, capsys, no_ray):
    pq.write_table(pa.table({"text": [1, 2, 3]}), tmp_path / "a.parquet")
    rc, err = _train(capsys, tmp_path / "a.parquet")
    assert rc == 2 and "'text' column of type int64" in err, f"got {rc}: {err!r}"


def test_an_empty_file_among_good_ones_is_named(tmp_path, capsys, no_ray):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    (tmp_path / "b.txt").write_text("")
    rc, err = _train(capsys, tmp_path)
    assert rc == 2 and "b.txt' is empty" in err, f"got {rc}: {err!r}"


def test_a_corpus_too_small_for_the_workers_is_refused_before_ray(tmp_path, capsys, no_ray):
    (tmp_path / "a.txt").write_text("one long document that only one rank can start\n")
    rc, err = _train(capsys, tmp_path / "a.txt", "--num-workers", "2", "--global-batch-size", "2")
    assert rc == 2 and "rank 1's share" in err and "fewer workers" in err, f"got {rc}: {err!r}"


def test_a_good_corpus_passes_the_check(tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(f'{{"text": "document {i}"}}\n' for i in range(20)))
    files = check_data(str(tmp_path), world=4)
    assert files.kind == "json" and len(files.uris) == 1, f"expected one JSONL file, got {files}"


def test_a_record_past_the_head_is_left_to_the_readers(tmp_path, monkeypatch):
    # only the head is read up front: a bad record after it is the workers' to refuse
    monkeypatch.setattr("workloads.data_check.HEAD_BYTES", 64)
    good = "".join(f'{{"text": "document {i}"}}\n' for i in range(10))
    (tmp_path / "a.jsonl").write_text(good + '{"text": null}\n')
    check_data(str(tmp_path), world=1)


def test_a_worker_config_error_inside_rays_error_becomes_the_launchers_one_line():
    class WorkerGroupError(Exception):  # Ray Train V2's shape: worker_failures maps rank -> exception
        def __init__(self, failures):
            super().__init__("Training failed due to worker errors")
            self.worker_failures = failures

    bad = ConfigError("--data file 'x.jsonl' line at byte 17 has text null: drop the record or give it text")
    wrapped = WorkerGroupError({0: RuntimeError("other"), 1: bad})
    got = train.config_error_in(wrapped)
    assert isinstance(got, ConfigError) and str(got) == str(bad), f"expected the worker's ConfigError, got {got!r}"


def test_an_error_without_bad_input_is_not_taken_for_one():
    assert train.config_error_in(RuntimeError("NCCL timeout")) is None, "expected no ConfigError found"


@pytest.fixture(scope="module")
def s3_server():
    """A moto S3 server (moto 5.2.5) that pyarrow reaches through AWS_ENDPOINT_URL_S3, as in
    tests/workloads/test_train_s3.py."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    mp = pytest.MonkeyPatch()
    for k, v in {
        "AWS_ENDPOINT_URL_S3": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        mp.setenv(k, v)
    client = boto3.client("s3")
    client.create_bucket(Bucket="corpus-bucket")
    yield client
    mp.undo()
    server.stop()


def test_an_s3_object_with_a_null_record_fails_the_aws_preflight_before_anything_is_created(s3_server):
    from automation.errors import DriverError
    from automation.steps.preflight import check_job_data
    from workloads.config import TrainConfig

    s3_server.put_object(Bucket="corpus-bucket", Key="nulls/a.jsonl", Body=b'{"text": "a"}\n{"text": null}\n')
    job = TrainConfig(data="s3://corpus-bucket/nulls/", num_workers=2, global_batch_size=2)
    with pytest.raises(DriverError) as err:
        check_job_data(job)
    msg = str(err.value)
    assert (
        err.value.exit_code == 2 and "train.data file 's3://corpus-bucket/nulls/a.jsonl' line 2 has text null" in msg
    ), f"expected exit 2 naming the object and line 2, got {err.value.exit_code}: {msg}"


def test_an_s3_prefix_that_does_not_exist_is_refused(s3_server):
    with pytest.raises(ConfigError, match=r"is empty or does not exist"):
        check_data("s3://corpus-bucket/absent/", world=1)


def test_a_worker_config_error_known_only_by_its_traceback_text_is_found():
    text = (
        "Training failed due to worker errors:\n[Rank 1]\nTraceback (most recent call last):\n  ...\n"
        "workloads.errors.ConfigError: --data file 'c.jsonl' line at byte 1270 has text null: drop the record\n"
    )
    got = train.config_error_in(RuntimeError(text))
    assert str(got) == "--data file 'c.jsonl' line at byte 1270 has text null: drop the record", f"got {got!r}"
