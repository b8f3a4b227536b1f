"""TrainConfig is the one description of a training job: bad input to the training CLI is refused
with one line naming the flag, the value and the fix, before Ray or torchrun starts (exit status 2);
the command line and --help come from the fields."""

from __future__ import annotations

import dataclasses

import pytest

from workloads import train
from workloads.config import TrainConfig, TrainConfigError, check_gpu_capacity, validate


def _run(capsys, *args) -> tuple[int, str]:
    rc = train.main(["--preset", "tiny", "--steps", "1", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(
    "args, flag, fix",
    [
        (["--seq-len", "0"], "--seq-len 0", "set it to 1 or more"),
        (["--seq-len", "-5"], "--seq-len -5", "set it to 1 or more"),
        (["--seq-len", "99999999"], "--seq-len 99999999", "set it to 4096 or less"),
        (["--num-workers", "0"], "--num-workers 0", "set it to 1 or more"),
        (["--micro-batch-size", "0"], "--micro-batch-size 0", "set it to 1 or more"),
        (["--warmup-steps", "-1"], "--warmup-steps -1", "set it to 0 or more"),
        (["--grad-clip", "0"], "--grad-clip 0.0", "positive"),
        (["--num-workers", "3", "--global-batch-size", "8"], "--global-batch-size 8", "multiple of 3"),
        (
            ["--num-workers", "2", "--global-batch-size", "8", "--micro-batch-size", "3"],
            "--micro-batch-size 3",
            "divisor of 4",
        ),
        (["--preset", "huge"], "--preset 'huge'", "tiny, qwen2.5-1.5b"),
        (["--gpus-per-worker", "1.5", "--use-gpu"], "--gpus-per-worker 1.5", "set 1 or 2"),
        (["--data", "/nonexistent/corpus.txt"], "--data '/nonexistent/corpus.txt'", "does not exist"),
        (["--storage-path", "/etc/passwd/results"], "--storage-path '/etc/passwd/results'", "writable directory"),
        (["--task", "words"], "--task 'words'", "random, learnable"),
        (["--reduce-dtype", "float16"], "--reduce-dtype 'float16'", "float32, bfloat16"),
        (["--param-dtype", "fp32"], "--param-dtype 'fp32'", "bfloat16, float32"),
        (["--run-id", "bad id!"], "--run-id", "letters, digits"),
        (["--unsharded", "--num-workers", "2"], "--num-workers 2", "drop --unsharded"),
        (["--unsharded", "--checkpoint-every", "5"], "--checkpoint-every", "set --checkpoint-every 0"),
        (["--float8", "tensorwise"], "--float8 'tensorwise' needs --use-gpu", "set --float8 to off to train on CPU"),
        (["--float8", "e5m2"], "--float8 'e5m2'", "off, tensorwise, rowwise"),
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
    with pytest.raises(TrainConfigError, match=r"needs 8 GPUs but this machine has 4: lower --num-workers to 4"):
        check_gpu_capacity(cfg, 4.0)


def test_use_gpu_without_a_gpu_advises_dropping_the_flag():
    with pytest.raises(TrainConfigError) as err:
        check_gpu_capacity(TrainConfig(use_gpu=True, num_workers=2), 0.0)
    assert "drop --use-gpu" in str(err.value) and "to 0" not in str(err.value), f"got: {err.value}"


def test_use_gpu_on_a_machine_without_gpus_exits_2_before_ray_starts(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("workloads.train.run_ray", lambda cfg: pytest.fail("Ray started despite no GPU"))
    monkeypatch.setattr("torch.cuda.device_count", lambda: 0)
    rc, err = _run(capsys, "--use-gpu")
    assert rc == 2 and "has no GPU: drop --use-gpu" in err, f"expected exit 2 and the advice, got {rc}: {err!r}"


def test_bad_value_is_refused_before_ray_starts(capsys, monkeypatch):
    monkeypatch.setattr("workloads.train.run_ray", lambda cfg: pytest.fail("Ray started with a bad --seq-len"))
    rc, _ = _run(capsys, "--seq-len", "99999999")
    assert rc == 2, f"expected exit 2, got {rc}"


def test_gpu_capacity_is_not_checked_on_cpu():
    check_gpu_capacity(TrainConfig(use_gpu=False, num_workers=8), 0.0)  # no error: CPU workers need no GPU


def test_unknown_option_in_worker_config_is_refused_with_the_close_match():
    with pytest.raises(TrainConfigError, match="did you mean 'seq_len'"):
        TrainConfig.from_dict({"preset": "tiny", "seq_lenn": 5})


def test_option_of_the_wrong_type_is_refused():
    with pytest.raises(TrainConfigError, match="--steps 'ten' is not a whole number"):
        TrainConfig.from_dict({"steps": "ten"})


def test_whole_number_is_accepted_for_a_float_option():
    got = TrainConfig.from_dict({"gpus_per_worker": 2}).gpus_per_worker
    assert got == 2.0 and isinstance(got, float), f"expected 2.0 as a float, got {got!r}"


SAMPLE = TrainConfig(
    preset="qwen2.5-1.5b",
    num_workers=8,
    use_gpu=True,
    gpus_per_worker=1.0,
    cpus_per_worker=4.5,
    global_batch_size=64,
    micro_batch_size=4,
    lr=1e-5,
    compile=False,
    activation_checkpointing=True,
    run_id="r1",
    summary_json="/tmp/x/summary.json",
)


def test_command_line_rebuilds_the_same_config():
    argv = SAMPLE.to_argv()
    assert TrainConfig.from_argv(argv) == SAMPLE, f"argv {argv} parsed into a different config"


def test_command_line_holds_only_what_differs_from_the_defaults():
    assert TrainConfig().to_argv() == [], f"expected no flags for the defaults, got {TrainConfig().to_argv()}"


def test_false_boolean_over_a_true_default_becomes_a_no_flag():
    assert "--no-compile" in SAMPLE.to_argv(), f"expected --no-compile in {SAMPLE.to_argv()}"


def test_no_arguments_trains_the_tiny_preset():
    assert TrainConfig.from_argv([]).preset == "tiny", "python -m workloads.train alone should not train a 1.5B model"


def test_defaults_resolve_absolute_run_directories_from_run_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # workers run elsewhere: every path must be absolute
    cfg = TrainConfig(run_id="r1").resolved()
    got = (cfg.run_dir, cfg.nccl_log_dir, cfg.storage_path, cfg.name)
    want = (str(tmp_path / "runs/r1"), str(tmp_path / "runs/r1/nccl"), str(tmp_path / "runs/r1/ray_results"), "r1")
    assert got == want


def test_grad_accumulation_follows_micro_batch():
    cfg = TrainConfig(num_workers=2, global_batch_size=16, micro_batch_size=2)
    validate(cfg)
    assert (cfg.micro_batch, cfg.grad_accum) == (2, 4)


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    out = capsys.readouterr().out
    missing = [f.name for f in dataclasses.fields(TrainConfig) if "--" + f.name.replace("_", "-") not in out]
    assert not missing, f"flags missing from --help: {missing}"


def test_help_documents_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert all(c in out for c in ("0 trained", "1 training failed", "2 bad input")), f"exit codes missing in {out!r}"


def test_every_field_has_help_text():
    bare = [f.name for f in dataclasses.fields(TrainConfig) if not f.metadata.get("help")]
    assert not bare, f"fields without help text: {bare}"


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


def test_help_text_comes_from_the_field_metadata(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    field = next(f for f in dataclasses.fields(TrainConfig) if f.name == "global_batch_size")
    assert field.metadata["help"] in out, f"expected {field.metadata['help']!r} in --help"


def test_torchrun_with_more_processes_than_gpus_names_nproc_per_node(capsys, monkeypatch):
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr("workloads.train.run_torchrun", lambda cfg: pytest.fail("torchrun worker started"))
    rc, err = _run(capsys, "--launcher", "torchrun", "--use-gpu", "--global-batch-size", "2")
    assert rc == 2 and "lower torchrun --nproc-per-node to 1" in err, f"expected exit 2 and the fix, got {rc}: {err!r}"


@pytest.mark.parametrize(
    "flag, value", [("--lr", "nan"), ("--lr", "inf"), ("--weight-decay", "nan"), ("--grad-clip", "inf")]
)
def test_nan_or_infinite_hyperparameter_is_refused_before_ray_starts(capsys, flag, value):
    # nan passed `value <= 0` checks (every comparison with nan is False) and crashed the optimizer in the workers
    rc, err = _run(capsys, flag, value)
    assert rc == 2 and f"{flag} {float(value)!r} is not a finite number" in err, f"expected exit 2, got {rc}: {err!r}"


def test_nan_in_a_stack_train_block_is_refused():
    cfg = TrainConfig.from_dict({"lr": float("nan")})
    with pytest.raises(TrainConfigError, match="not a finite number"):
        validate(cfg, local_paths=False)
