"""Bad input to the training CLI is refused with one line naming the flag and the fix, before any
worker starts (exit status 2)."""

from __future__ import annotations

import pytest

from workloads import train
from workloads.config import ConfigError, TrainConfig, check_gpu_capacity, validate


def _run(capsys, *args) -> tuple[int, str]:
    rc = train.main(["--preset", "tiny", "--steps", "1", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, flag, fix",
    [
        (["--seq-len", "0"], "--seq-len", "positive"),
        (["--seq-len", "-5"], "--seq-len", "positive"),
        (["--num-workers", "3", "--batch-size", "8"], "--batch-size 8", "multiple of 3"),
        (
            ["--num-workers", "2", "--batch-size", "8", "--micro-batch-size", "3"],
            "--micro-batch-size 3",
            "divisor of 4",
        ),
        (["--preset", "huge"], "--preset 'huge'", "tiny, qwen2.5-1.5b"),
        (["--data", "/nonexistent/corpus.txt"], "--data '/nonexistent/corpus.txt'", "does not exist"),
        (["--storage-path", "/etc/passwd/results"], "--storage-path '/etc/passwd/results'", "writable directory"),
        (["--task", "words"], "--task 'words'", "random, learnable"),
        (["--reduce-dtype", "float16"], "--reduce-dtype 'float16'", "float32, bfloat16"),
        (["--param-dtype", "fp32"], "--param-dtype 'fp32'", "bfloat16, float32"),
        (["--run-id", "bad id!"], "--run-id", "letters, digits"),
    ],
)
def test_bad_input_exits_2_naming_flag_and_fix(capsys, args, flag, fix):
    rc, err = _run(capsys, *args)
    assert rc == 2, f"expected exit 2 for {args}, got {rc}"
    assert err.startswith("error: ") and err.count("\n") == 1, f"expected one error line, got {err!r}"
    assert flag in err and fix in err, f"expected {flag!r} and {fix!r} in {err!r}"


def test_empty_data_directory_is_refused(tmp_path, capsys):
    rc, err = _run(capsys, "--data", str(tmp_path))
    assert rc == 2 and "empty directory" in err, err


def test_more_gpu_workers_than_gpus_is_refused():
    cfg = TrainConfig(use_gpu=True, num_workers=8, gpus_per_worker=1)
    with pytest.raises(ConfigError, match=r"needs 8 GPUs but 4 are available: lower --num-workers to 4"):
        check_gpu_capacity(cfg, 4.0)


def test_gpu_capacity_is_not_checked_on_cpu():
    check_gpu_capacity(TrainConfig(use_gpu=False, num_workers=8), 0.0)  # no error: CPU workers need no GPU


def test_unknown_option_in_worker_config_is_refused():
    with pytest.raises(ConfigError, match="unknown training option"):
        TrainConfig.from_dict({"preset": "tiny", "sequence_length": 5})


def test_defaults_resolve_absolute_run_directories_from_run_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # workers run elsewhere: every path must be absolute
    cfg = TrainConfig(run_id="r1").resolved()
    got = (cfg.run_dir, cfg.nccl_log_dir, cfg.storage_path, cfg.name)
    want = (str(tmp_path / "runs/r1"), str(tmp_path / "runs/r1/nccl"), str(tmp_path / "runs/r1/ray_results"), "r1")
    assert got == want


def test_grad_accumulation_follows_micro_batch():
    cfg = TrainConfig(num_workers=2, batch_size=16, micro_batch_size=2)
    validate(cfg)
    assert (cfg.micro_batch, cfg.grad_accum) == (2, 4)


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    out = capsys.readouterr().out
    import dataclasses

    missing = [f.name for f in dataclasses.fields(TrainConfig) if "--" + f.name.replace("_", "-") not in out]
    assert not missing, f"flags missing from --help: {missing}"


def test_unreadable_data_file_is_refused(tmp_path, capsys, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello\n")
    real_access = __import__("os").access
    # Tests run as root, for whom chmod 000 still reads: make the check see an unreadable file.
    monkeypatch.setattr(
        "workloads.config.os.access", lambda p, mode: False if str(p) == str(corpus) else real_access(p, mode)
    )
    rc, err = _run(capsys, "--data", str(corpus))
    assert rc == 2 and "is not readable" in err and "chmod" in err, err
