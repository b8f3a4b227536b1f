"""automation.job: the stack's train: block becomes one TrainConfig, judged by TrainConfig's checks
and by the rules that need the cluster and the job together."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys

import pytest
import yaml
from conftest import REPO, quiet_stack

from automation.job import (
    CLUSTER_DEFAULT,
    CLUSTER_JOB,
    DURABILITY_DEFAULT,
    PENDING_RUN_BUCKET,
    STACK_BLOCK,
    TRAIN_DEFAULT,
    check_fits_cluster,
    cluster_job,
    command,
    local_job,
    one_node_note,
    resolve_cluster_job,
)
from automation.storage import CHECKPOINT_EVERY, MAX_FAILURES, Durability, outside_run_bucket
from infra.config import parse_quantity
from workloads.config import BLOCK_FIELDS, DRIVER_FIELDS, TrainConfig, TrainConfigError
from workloads.throughput_model import reserved_limit_gib
from workloads.train import parse_config


def stack_cfg(**train):
    cfg = quiet_stack("us-west-2")
    return dataclasses.replace(cfg, train=train)


def test_pulumi_yaml_documents_exactly_the_fields_a_stack_may_set():
    description = yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"]["train"]["description"]
    keys = description.split("Keys: ", 1)[1].removesuffix(".").split(", ")
    assert keys == list(BLOCK_FIELDS), f"Pulumi.yaml documents {keys}, TrainConfig offers {list(BLOCK_FIELDS)}"


def test_cluster_defaults_are_the_reference_job():
    job = cluster_job(stack_cfg(), "r1")
    got = (job.preset, job.num_workers, job.gpus_per_worker, job.use_gpu, job.micro_batch, job.seq_len)
    assert got == ("qwen2.5-1.5b", 8, 1.0, True, 8, 2048), f"unexpected cluster job {got}"
    layout = (job.mesh, job.reduce_dtype, job.grad_accum)
    assert layout == ("hsdp", "bfloat16", 1), f"expected the layout BENCHMARKS.md chooses, got {layout}"
    assert job.activation_checkpointing, "the cluster job must recompute activations to fit an L4"


def test_stack_block_overrides_a_default_key_by_key():
    job = cluster_job(stack_cfg(steps=7), "r1")
    assert (job.steps, job.preset) == (7, CLUSTER_JOB["preset"]), f"got steps {job.steps}, preset {job.preset}"


@pytest.mark.parametrize(
    ("block", "meaningless"),
    [({"activation_checkpointing": False}, "ac_policy"), ({"loss": "full"}, "loss_chunk_size")],
)
def test_a_cluster_default_the_block_leaves_without_meaning_goes_back_to_trainconfigs(block, meaningless):
    resolved = resolve_cluster_job(stack_cfg(**block), "r1")
    got = (getattr(resolved.config, meaningless), resolved.source(meaningless))
    default = TrainConfig.__dataclass_fields__[meaningless].default
    assert got == (default, TRAIN_DEFAULT), f"{block}: expected {meaningless} {default!r} by default, got {got}"


def test_unknown_key_in_the_block_names_the_close_match():
    with pytest.raises(TrainConfigError) as err:
        cluster_job(stack_cfg(global_batchsize=64), "r1")
    assert "ray-efa-eks:train.global_batchsize" in str(err.value) and "'global_batch_size'" in str(err.value), str(
        err.value
    )


def test_bad_value_in_the_block_is_judged_by_trainconfig():
    with pytest.raises(TrainConfigError, match=r"ray-efa-eks:train.seq_len 999999 exceeds the 131072 positions"):
        cluster_job(stack_cfg(seq_len=999999), "r1")


def test_driver_fields_are_refused_in_the_block():
    with pytest.raises(TrainConfigError, match="ray-efa-eks:train.run_dir is set by the driver"):
        cluster_job(stack_cfg(run_dir="/x"), "r1")


def test_driver_fields_are_not_documented_for_stacks():
    leaked = set(DRIVER_FIELDS) & set(BLOCK_FIELDS)
    assert not leaked, f"driver-set fields offered to stacks: {leaked}"


def test_more_gpus_than_the_cluster_has_is_refused():
    with pytest.raises(TrainConfigError) as err:
        cluster_job(stack_cfg(num_workers=16, global_batch_size=128), "r1")
    for text in ("ray-efa-eks:train.num_workers 16", "16 GPUs", "has 8", "at most 8"):
        assert text in str(err.value), f"expected {text!r} in {err.value}"


def test_more_gpus_per_worker_than_a_node_has_is_refused():
    job = TrainConfig(use_gpu=True, num_workers=1, gpus_per_worker=8.0)
    with pytest.raises(TrainConfigError, match="exceeds the 4 GPUs of one node"):
        check_fits_cluster(job, nodes=2, gpus_per_node=4)


def test_cpu_job_is_refused_on_the_gpu_cluster():
    with pytest.raises(TrainConfigError, match="ray-efa-eks:train.use_gpu is false"):
        cluster_job(stack_cfg(use_gpu=False), "r1")


def test_job_that_fits_one_of_several_nodes_warns():
    note = one_node_note(TrainConfig(use_gpu=True, num_workers=4), nodes=2, gpus_per_node=4)
    assert note and "fit on one node" in note, f"expected a one-node warning, got {note!r}"


def test_job_spanning_the_nodes_does_not_warn():
    note = one_node_note(TrainConfig(use_gpu=True, num_workers=8), nodes=2, gpus_per_node=4)
    assert note is None, f"expected no warning, got {note!r}"


def test_cluster_job_workers_fit_in_their_pods_cpus():
    cfg = stack_cfg()
    job = cluster_job(cfg, "r1")
    per_pod = cfg.ray.worker.num_gpus // job.gpus_per_worker
    assert job.cpus_per_worker * per_pod < parse_quantity("cpu", cfg.ray.worker.cpu), (
        f"{per_pod} workers x {job.cpus_per_worker} CPUs must leave room in a {cfg.ray.worker.cpu}-CPU pod"
    )


def test_cluster_job_writes_under_the_cluster_run_directory():
    job = cluster_job(stack_cfg(), "r1")
    got = (job.run_dir, job.nccl_log_dir, job.summary_json)
    want = ("/tmp/ray-efa-eks/runs/r1", "/tmp/ray-efa-eks/runs/r1/nccl", "/tmp/ray-efa-eks/runs/r1/summary.json")
    assert got == want, f"expected {want}, got {got}"


def test_cli_overrides_win_over_the_block():
    job = cluster_job(stack_cfg(steps=7), "r1", steps=3, num_workers=4)
    assert (job.steps, job.num_workers) == (3, 4), f"got steps {job.steps}, workers {job.num_workers}"


def test_submitted_command_parses_back_into_the_same_job():
    job = cluster_job(stack_cfg(lr=1e-5), "r1")
    assert TrainConfig.from_argv(command(job)[2:]) == job, f"command {command(job)} does not rebuild the job"


def test_local_job_is_the_tiny_preset_on_cpu(tmp_path):
    job = local_job("r1", tmp_path)
    got = (job.preset, job.use_gpu, job.num_workers, job.run_dir)
    assert got == ("tiny", False, 2, str(tmp_path / "r1")), f"got {got}"


def test_cluster_job_runs_float8_and_the_local_job_bf16(tmp_path):
    # Float8 needs float8 tensor cores (compute capability 8.9+): the cluster's L4s have them, the local CPU not.
    got = (cluster_job(stack_cfg(), "r1").precision, local_job("r1", tmp_path).precision)
    assert got == ("float8 tensorwise", "bfloat16"), f"expected float8 on the cluster and bf16 locally, got {got}"


def test_float8_off_in_the_train_block_runs_the_bf16_job():
    resolved = resolve_cluster_job(stack_cfg(float8="off"), "r1")
    got = (resolved.config.precision, resolved.precision().startswith("precision: bfloat16 (float8 off: stack"))
    assert got == ("bfloat16", True), f"expected bf16 from the train: block, got {got}: {resolved.precision()}"


def test_shown_job_says_which_precision_runs_and_the_key_that_changes_it():
    text = resolve_cluster_job(stack_cfg(), "r1").text("job")
    last = text.splitlines()[-1]
    expected = ("precision: float8 tensorwise", "(cluster default)", "ray-efa-eks:train.float8: off runs bf16")
    assert all(e in last for e in expected), f"expected {expected} in the job's last line, got {last!r}"


def test_local_job_bad_override_is_refused(tmp_path):
    with pytest.raises(TrainConfigError, match="--num-workers 0 is below 1"):
        local_job("r1", tmp_path, num_workers=0)


MEASURED = REPO / "bench" / "results" / "2026-12-05-h100"
# The cluster default with --float8 tensorwise, measured the same way (2026-12-06, one H100); its `f8only=mlp` was
# the bench's knob for what is now the module's rule (workloads/model.py `float8_eligible`), so it is dropped.
MEASURED_FLOAT8 = REPO / "bench" / "results" / "2026-12-06-h100" / "run2-fake8.jsonl"
COMPARED = (
    "float8",
    "mesh",
    "micro_batch",
    "grad_accum",
    "reduce_dtype",
    "activation_checkpointing",
    "ac_policy",
    "ac_blocks",
    "reshard_after_forward",
    "loss_chunk_size",
    "seq_len",
)


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    assert spec and spec.loader, f"bench/{name}.py cannot be loaded"
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def test_cluster_job_fits_an_l4_by_measured_memory():
    """The stack's default job, as the driver submits it, was measured (bench/fake_rank_step.py, rank 0 of
    a fake world of 8 on an H100) and its peak reserved memory fits workloads/throughput_model.py's L4 budget."""
    job = parse_config(command(cluster_job(stack_cfg(), "r1"))[2:])
    fake = _bench("fake_rank_step")
    # fake_rank_step's own base: TrainConfig's defaults, the rest from the row's config string
    base = TrainConfig(preset=job.preset, seq_len=job.seq_len, num_workers=job.num_workers, use_gpu=True)
    files = [*sorted(MEASURED.glob("sac-sweep?.jsonl")), MEASURED_FLOAT8]
    rows = [json.loads(line.replace("+f8only=mlp", "")) for f in files for line in f.read_text().splitlines()]
    key = tuple(getattr(job, k) for k in COMPARED)
    reserved = [
        r["peak_reserved_gib"]
        for r in rows
        if r["world"] == job.num_workers
        and tuple(getattr(fake.parse_config(r["config"], base, r["world"]), k) for k in COMPARED) == key
    ]
    assert reserved, f"no measured row in {MEASURED} for the cluster job {key}: measure it before making it the default"
    limit = reserved_limit_gib()
    assert max(reserved) <= limit, (
        f"cluster job {key} reserves {max(reserved):.1f} GiB, over the L4 budget's {limit:.2f}"
    )


def test_aws_preflight_refuses_a_bad_train_block_before_calling_aws():
    from automation.errors import DriverError
    from automation.steps import preflight
    from automation.targets.aws import AwsDeps, AwsRun, AwsTarget

    def no_aws(*_):
        raise AssertionError("preflight called AWS despite a bad train: block")

    target = AwsTarget(AwsRun(stack_cfg(num_workers=16, global_batch_size=128), "r1"), AwsDeps(no_aws, no_aws, no_aws))
    with pytest.raises(DriverError) as err:
        preflight.run(target, {})
    assert err.value.exit_code == 2 and "num_workers 16" in str(err.value), (
        f"got exit {err.value.exit_code}: {err.value}"
    )


# ---- one precedence: cluster defaults, durability defaults, the train: block, CLI flags --------------
RUN_BUCKET = "s3://ray-efa-eks-us-west-2-render/us-west-2/runs"  # a storage_uri output, as infra/storage.py forms it
DURABLE = vars(Durability(storage_path=RUN_BUCKET))


@pytest.mark.parametrize(
    ("key", "value"),
    [("checkpoint_every", 50), ("max_failures", 0), ("storage_path", "s3://mine/x")],
)
def test_train_block_value_wins_over_the_durability_default(key, value):
    job = resolve_cluster_job(stack_cfg(**{key: value}), "r1", DURABLE).config
    assert getattr(job, key) == value, f"train: {key}: {value!r} reached the job as {getattr(job, key)!r}"


def test_durability_defaults_fill_what_the_block_leaves_out():
    job = resolve_cluster_job(stack_cfg(steps=7), "r1", DURABLE).config
    got = (job.storage_path, job.checkpoint_every, job.max_failures)
    assert got == (RUN_BUCKET, CHECKPOINT_EVERY, MAX_FAILURES), f"expected the durability defaults, got {got}"


def test_a_cli_flag_wins_over_the_train_block():
    job = resolve_cluster_job(stack_cfg(steps=7), "r1", DURABLE, flags={"steps": 3}).config
    assert job.steps == 3, f"--steps 3 over train: steps: 7 gave {job.steps}"


def test_each_value_names_the_layer_it_came_from():
    resolved = resolve_cluster_job(stack_cfg(steps=7, max_failures=1), "r1", DURABLE, flags={"num_workers": 4})
    got = {k: resolved.source(k) for k in ("preset", "checkpoint_every", "max_failures", "steps", "num_workers", "lr")}
    want = {
        "preset": CLUSTER_DEFAULT,
        "checkpoint_every": DURABILITY_DEFAULT,
        "max_failures": STACK_BLOCK,
        "steps": STACK_BLOCK,
        "num_workers": "--num-workers",
        "lr": TRAIN_DEFAULT,
    }
    assert got == want, f"expected sources {want}, got {got}"


def test_shown_job_lists_changed_fields_and_the_durability_ones_only():
    resolved = resolve_cluster_job(stack_cfg(max_failures=0), "r1", DURABLE)
    shown = {name for name, _, _ in resolved.shown()}
    assert {"preset", "storage_path", "checkpoint_every", "max_failures"} <= shown and "lr" not in shown, (
        f"expected the changed and durability fields without the defaults (lr), got {sorted(shown)}"
    )


def test_run_bucket_before_up_is_shown_as_pending_not_as_empty():
    resolved = resolve_cluster_job(stack_cfg(), "r1", vars(Durability()))
    row = next(r for r in resolved.shown() if r[0] == "storage_path")
    assert row == ("storage_path", PENDING_RUN_BUCKET, DURABILITY_DEFAULT), f"got {row}"


@pytest.mark.parametrize("path", ["/tmp/checkpoints", "file:///tmp/checkpoints", "ckpts"])
def test_a_local_storage_path_on_the_cluster_is_refused_naming_the_key_value_and_fix(path):
    with pytest.raises(TrainConfigError) as err:
        resolve_cluster_job(stack_cfg(storage_path=path), "r1", DURABLE)
    for text in (f"ray-efa-eks:train.storage_path {path!r}", "s3://<bucket>/<prefix>", "remove it"):
        assert text in str(err.value), f"expected {text!r} in {err.value}"


def test_aws_preflight_refuses_a_local_storage_path_before_calling_aws():
    from automation.errors import DriverError
    from automation.steps import preflight
    from automation.targets.aws import AwsDeps, AwsRun, AwsTarget

    def no_aws(*_):
        raise AssertionError("preflight called AWS despite a local storage_path")

    target = AwsTarget(AwsRun(stack_cfg(storage_path="/mnt/ckpt"), "r1"), AwsDeps(no_aws, no_aws, no_aws))
    with pytest.raises(DriverError) as err:
        preflight.run(target, {})
    assert err.value.exit_code == 2 and "train.storage_path '/mnt/ckpt'" in str(err.value), (
        f"got exit {err.value.exit_code}: {err.value}"
    )


def test_storage_outside_the_run_bucket_is_noted_with_the_fix():
    note = outside_run_bucket("s3://mine/x", RUN_BUCKET)
    assert note and "s3://mine/x" in note and RUN_BUCKET in note and "remove the key" in note, note


def test_storage_under_the_run_bucket_is_not_noted():
    assert outside_run_bucket(f"{RUN_BUCKET}/team-a", RUN_BUCKET) is None, "a path under the run bucket was noted"


def test_an_unsharded_job_is_told_to_turn_off_the_durability_checkpoints():
    with pytest.raises(TrainConfigError, match=r"set ray-efa-eks:train.checkpoint_every 0"):
        resolve_cluster_job(stack_cfg(unsharded=True, num_workers=1, global_batch_size=8), "r1", DURABLE)


# ---- The estimate in docs/aws-first-run.md and the README of how long the default AWS job trains follows from its
# defaults
# (automation/job.py, CLUSTER_JOB) and the tokens/s predicted for it (bench/results/2026-12-05-h100/README.md, "The
# re-chosen default and its prediction", the **new default** row), so a change to either shows here.


def _predicted_tokens_per_s() -> tuple[int, int]:
    text = (REPO / "bench" / "results" / "2026-12-05-h100" / "README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| **new default** |"))
    found = re.search(r"\*\*([\d,]+)–([\d,]+)\*\*", row)
    assert found, f"no predicted range in {row!r}"
    low, high = found.groups()
    return int(low.replace(",", "")), int(high.replace(",", ""))


@pytest.mark.parametrize("page", ["docs/aws-first-run.md", "README.md"])
def test_the_stated_training_time_follows_from_the_defaults_and_the_prediction(page):
    tokens = CLUSTER_JOB["steps"] * CLUSTER_JOB["global_batch_size"] * CLUSTER_JOB["seq_len"]
    low, high = _predicted_tokens_per_s()
    fastest, slowest = tokens / high / 60, tokens / low / 60
    text = " ".join((REPO / page).read_text().split())  # the README wraps the sentence
    stated = re.search(r"about (\d+(?:\.\d+)?) to (\d+(?:\.\d+)?) minutes of training", text)
    assert stated, f"{page} states no 'about A to B minutes of training'"
    got = (float(stated.group(1)), float(stated.group(2)))
    assert abs(got[0] - fastest) <= 0.5 and abs(got[1] - slowest) <= 0.5, (
        f"expected about {fastest:.1f} to {slowest:.1f} minutes ({tokens} tokens at {high}-{low} tokens/s), "
        f"{page} says {got}"
    )
