"""`python -m automation bench --stack S` against the fake Kubernetes API: the same job submitted twice
from the head pod (through a scripted exec), once as configured and once forced onto TCP sockets, each
judged from its own NCCL logs; the NCCL logs are real ones from tests/fixtures/nccl (README there)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import pytest
from _bench_world import (
    BASE,
    EFA_LOG,
    SOCKET_LOG,
    TOKENS_PER_S,
    Cluster,
    RunBucket,
    Ui,
    outputs,
    summary,
)
from _cloud_fakes import gpu_nodegroup
from _driver_helpers import KubeWithExec
from conftest import quiet_stack

from automation import cli
from automation.commands import bench
from automation.job import cluster_job
from automation.targets.aws import AwsDeps
from workloads.nccl_check.scope import path_matches_run


def run_bench(tmp_path, logs=None, failed=(), json_mode=True):
    cluster = Cluster(tmp_path, logs or {"efa": EFA_LOG, "tcp": SOCKET_LOG, "bf16": EFA_LOG}, failed)
    ui = Ui()
    argv = ["bench", "--stack", "us-west-2", "--run-id", BASE, "--runs-root", str(tmp_path / "runs")]
    with helpers.FakeKubeApi() as api, gpu_nodegroup() as eks:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        bucket = RunBucket()
        clients = {"eks": eks, "s3": bucket}
        deps = AwsDeps(client=clients.get, stack=lambda: stack, kube=lambda kc: KubeWithExec(kc, cluster.exec))
        args = cli.build_parser().parse_args(argv + (["--json"] if json_mode else []))
        rc = bench.run(args, ui, deps, node_wait_s=0, pod_wait_s=0)
    return rc, ui, cluster


@pytest.fixture(scope="module")
def passing(tmp_path_factory):
    """One bench whose EFA run used EFA and whose TCP run used sockets (shared: it costs a few seconds)."""
    return run_bench(tmp_path_factory.mktemp("bench"))


def test_the_three_jobs_are_submitted_with_distinct_run_ids(passing):
    _, _, cluster = passing
    jobs = [job for job, _ in cluster.submitted]
    expected = [f"{BASE}-efa", f"{BASE}-tcp", f"{BASE}-bf16"]
    assert jobs == expected, f"expected the EFA, the TCP then the bf16 job, got {jobs}"


def test_the_precision_leg_is_the_same_job_over_efa_in_bf16(passing):
    from automation.job import with_run_paths
    from workloads.train import parse_config

    _, _, cluster = passing
    (efa_id, efa_env), _, (bf16_id, bf16_env) = cluster.submitted
    efa, bf16 = (parse_config(list(cluster.jobs.jobs[j].request.entrypoint[3:])) for j in (efa_id, bf16_id))
    expected = dataclasses.replace(with_run_paths(efa, bf16_id, bf16.run_dir), float8="off", name=bf16_id)
    same_env = bf16_env["env_vars"] == efa_env["env_vars"]
    assert (bf16, same_env) == (expected, True), f"expected the EFA job with float8 off, got {bf16}; env {bf16_env}"


def test_precision_ratio_is_float8_tokens_per_s_over_bf16(passing):
    _, ui, _ = passing
    expected = TOKENS_PER_S["efa"] / TOKENS_PER_S["bf16"]
    assert ui.doc["precision_ratio"] == pytest.approx(expected), f"expected {expected}, got {ui.doc['precision_ratio']}"


def test_precision_verdict_judges_the_measured_ratio_against_the_model(passing):
    _, ui, _ = passing
    low = ui.doc["precision_prediction"]["ratio"][0]
    held = TOKENS_PER_S["efa"] / TOKENS_PER_S["bf16"] >= low
    said = ui.doc["precision_verdict"]
    assert said.endswith("assumption stands" if held else "does not hold"), f"model low end {low}: {said}"


def test_each_run_names_the_precision_it_ran(passing):
    _, ui, _ = passing
    got = {name: leg["precision"] for name, leg in ui.doc["runs"].items()}
    expected = {"efa": "float8 tensorwise", "tcp": "float8 tensorwise", "bf16": "bfloat16"}
    assert got == expected, f"expected each run's summary precision {expected}, got {got}"


def test_tcp_job_env_forces_sockets_without_the_ofi_plugin(passing):
    _, _, cluster = passing
    env = cluster.submitted[1][1]["env_vars"]
    forced = {k: env.get(k) for k in ("NCCL_NET", "NCCL_NET_PLUGIN")}
    assert forced == {"NCCL_NET": "Socket", "NCCL_NET_PLUGIN": "none"}, f"TCP job's env_vars: {env}"


def test_efa_job_keeps_the_pods_own_nccl_env(passing):
    _, _, cluster = passing
    env = cluster.submitted[0][1]["env_vars"]
    assert not {"NCCL_NET", "NCCL_NET_PLUGIN"} & set(env), f"expected no network override in the EFA job, got {env}"


def test_each_check_reads_only_its_own_runs_nccl_logs(passing):
    _, _, cluster = passing
    # One read per worker pod: the EFA, TCP and bf16 checks, then the report's copies of the three runs.
    expected = ([f"{BASE}-efa"] * 2 + [f"{BASE}-tcp"] * 2 + [f"{BASE}-bf16"] * 2) * 2
    assert cluster.collected == expected, f"expected each run's own nccl/ from both workers, got {cluster.collected}"


def test_efa_and_bf16_runs_pass_and_tcp_run_is_found_on_sockets(passing):
    rc, ui, _ = passing
    got = {name: (leg["verdict"], leg["require"]) for name, leg in ui.doc["runs"].items()}
    expected = {"efa": ("pass", "efa"), "tcp": ("pass", "socket"), "bf16": ("pass", "efa")}
    assert (rc, got) == (0, expected), f"rc {rc}, verdicts {got}"


def test_ratio_is_efa_tokens_per_s_over_tcp(passing):
    _, ui, _ = passing
    expected = TOKENS_PER_S["efa"] / TOKENS_PER_S["tcp"]
    assert ui.doc["ratio"] == pytest.approx(expected), f"expected {expected}, got {ui.doc['ratio']}"


def test_each_run_reports_tokens_per_s_mfu_and_step_time_from_its_summary(passing):
    _, ui, _ = passing
    got = {name: [leg[k] for k in ("tokens_per_s", "mfu", "step_time_s")] for name, leg in ui.doc["runs"].items()}
    expected = {name: [summary(f"{BASE}-{name}")[k] for k in ("tokens_per_s", "mfu", "step_time_s")] for name in got}
    assert got == expected, f"expected each run's summary numbers {expected}, got {got}"


def test_prediction_is_for_the_layout_the_model_chose_as_the_cluster_job_in_float8(passing):
    _, ui, _ = passing
    model = bench.model
    chosen = model.choose_default(model.candidate_table(model.load_rows(model.DEFAULT_ROWS), {}))["config"]
    got = ui.doc["prediction"]["config"]
    assert got == f"{chosen}+float8=tensorwise+f8only=mlp", f"expected {chosen!r} with float8, got {got!r}"


def test_side_by_side_report_shows_both_runs_with_their_own_requirement(passing):
    _, ui, _ = passing
    page = Path(ui.doc["report"]).read_text()
    wanted = ['<b class="pass">pass</b> (require efa)', '<b class="pass">pass</b> (require socket)']
    missing = [w for w in wanted if w not in page]
    assert not missing, f"expected both verdicts in {ui.doc['report']}, missing {missing}"


def test_tcp_run_found_on_efa_fails_naming_the_evidence(tmp_path):
    rc, ui, _ = run_bench(tmp_path, logs={"efa": EFA_LOG, "tcp": EFA_LOG, "bf16": EFA_LOG})
    error = ui.doc["error"] or ""
    assert rc == 1 and "NET/Libfabric" in error and "NCCL_NET=Socket" in error, f"rc {rc}, error {error!r}"


def test_tcp_run_found_on_efa_gives_no_ratio(tmp_path):
    _, ui, _ = run_bench(tmp_path, logs={"efa": EFA_LOG, "tcp": EFA_LOG, "bf16": EFA_LOG})
    assert ui.doc["ratio"] is None, f"expected no ratio from a void TCP run, got {ui.doc['ratio']}"


def test_efa_run_on_sockets_fails_before_the_tcp_job(tmp_path):
    rc, ui, cluster = run_bench(tmp_path, logs={"efa": SOCKET_LOG, "tcp": SOCKET_LOG, "bf16": SOCKET_LOG})
    jobs = [job for job, _ in cluster.submitted]
    assert (rc, jobs) == (1, [f"{BASE}-efa"]), (
        f"expected exit 1 and only the EFA job, got {rc}, {jobs}: {ui.doc['error']}"
    )


def test_failed_efa_job_names_its_step(tmp_path):
    rc, ui, _ = run_bench(tmp_path, failed=("efa",))
    error = ui.doc["error"] or ""
    assert rc == 1 and f"EFA run {BASE}-efa failed at follow" in error, f"rc {rc}, error {error!r}"


def test_table_has_a_row_per_measure(tmp_path):
    _, ui, _ = run_bench(tmp_path, json_mode=False)
    head = next(i for i, line in enumerate(ui.notes) if "model: EFA / TCP" in line)
    firsts = [line.split("  ")[0][:34] for line in ui.notes[head : head + 10]]
    expected = ["", "run id", "precision", "NCCL verdict", "tokens/s", "MFU", "step time (median)"]
    expected += ["EFA/TCP tokens/s", "float8/bf16 tokens/s", "model's float8 assumption: the L4 "]
    assert firsts == expected, f"expected the table's rows {expected}, got {ui.notes}"


def test_bench_without_stack_is_refused_naming_the_flag(capsys):
    rc = cli.main(["bench"])
    err = capsys.readouterr().err
    assert rc == 2 and "--stack NAME" in err, f"expected exit 2 naming --stack, got {rc}: {err!r}"


def test_an_interrupt_exits_130_through_the_run_controllers_end(tmp_path):
    cluster = Cluster(tmp_path, {"efa": EFA_LOG, "tcp": SOCKET_LOG})
    answer = cluster.answer

    def interrupted(pod, cmd, stdin):
        if cmd[:3] == ["ray", "job", "submit"]:
            raise KeyboardInterrupt
        return answer(pod, cmd, stdin)

    cluster.exec = helpers.ScriptedExec(interrupted)
    argv = ["bench", "--stack", "us-west-2", "--run-id", BASE, "--runs-root", str(tmp_path / "runs")]
    ui = Ui()
    with helpers.FakeKubeApi() as api, gpu_nodegroup() as eks:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        clients = {"eks": eks, "s3": RunBucket()}
        deps = AwsDeps(client=clients.get, stack=lambda: stack, kube=lambda kc: KubeWithExec(kc, cluster.exec))
        rc = bench.run(cli.build_parser().parse_args(argv), ui, deps, node_wait_s=0, pod_wait_s=0)
    said = [e for e in ui.errors if "interrupted during step submit of stack us-west-2" in e]
    assert (rc, len(said)) == (130, 1), f"expected exit 130 naming the step, got {rc}: {ui.errors}"
    assert any(n.startswith("GPU node") for n in ui.notes), f"where the GPU nodes are was not said: {ui.notes}"


def test_job_that_fits_one_node_is_refused_before_any_submit(tmp_path):
    cluster = Cluster(tmp_path, {"efa": EFA_LOG, "tcp": SOCKET_LOG})
    argv = ["bench", "--stack", "us-west-2", "--num-workers", "4", "--runs-root", str(tmp_path / "runs")]
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        deps = AwsDeps(
            client=lambda name: RunBucket(), stack=lambda: stack, kube=lambda kc: KubeWithExec(kc, cluster.exec)
        )
        with pytest.raises(bench.DriverError) as e:
            bench.run(cli.build_parser().parse_args(argv), Ui(), deps)
    said = (e.value.exit_code, "--num-workers 4" in str(e.value), cluster.exec.calls)
    assert said == (2, True, []), f"expected exit 2 naming --num-workers 4 and no pod command, got {said}: {e.value}"


# ---- automation/commands/bench.py without a cluster: the two run ids, and which of the throughput
# model's measured rows (workloads/throughput_model.py) a job's prediction comes from.

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cfg():

    return quiet_stack("us-west-2")


@pytest.mark.parametrize("base", ["20261204-170212-fa9897", "a", "tcp", "efa-tcp"])
def test_neither_run_id_scopes_the_others_nccl_log(base):
    ids = bench.run_ids(base)
    leaks = [
        (mine, other)
        for mine, other in ((ids["efa"], ids["tcp"]), (ids["tcp"], ids["efa"]))
        if path_matches_run(Path(f"/c/runs/{other}/nccl/nccl.{other}.rank0.h.1.log"), mine)
    ]
    assert not leaks, f"run ids {ids}: the NCCL check would count the other run's log for {leaks}"


def test_job_with_an_unmeasured_layout_has_no_model_row(cfg):
    job = dataclasses.replace(cluster_job(cfg, "r1"), seq_len=4096)
    row = bench.model.model_row(bench.model.model_rows(), job, cfg.gpu_nodes.gpus_per_node)
    assert row is None, f"expected no measured row for seq_len 4096, got {row and row['config']}"


def test_prediction_of_another_instance_type_says_the_model_does_not_cover_it(cfg):
    other = dataclasses.replace(cfg, gpu_nodes=dataclasses.replace(cfg.gpu_nodes, instance_type="p5.48xlarge"))
    pred = bench.prediction(cluster_job(cfg, "r1"), other)
    assert pred["config"] is None and "p5.48xlarge" in pred["note"], f"expected a note naming p5.48xlarge, got {pred}"


def test_prediction_ratio_spans_the_models_efa_over_tcp_at_both_l4_rates(cfg):
    job = cluster_job(cfg, "r1")
    model = bench.model
    row = bench.model.model_row(bench.model.model_rows(), job, cfg.gpu_nodes.gpus_per_node)
    at = [model.predict(row, rate) for rate in model.L4_ACHIEVABLE_TFLOPS]
    ratios = [p["efa"]["tokens_per_s"] / p[k]["tokens_per_s"] for p in at for k in ("tcp_best", "tcp_worst")]
    got = bench.prediction(job, cfg)["ratio"]
    assert got == [min(ratios), max(ratios)], f"expected [{min(ratios)}, {max(ratios)}], got {got}"


def test_run_id_too_long_for_its_tcp_suffix_is_refused_naming_the_flag(capsys):
    from automation import cli

    with pytest.raises(SystemExit) as e:
        cli.build_parser().parse_args(["bench", "--stack", "us-west-2", "--run-id", "a" * 61])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--run-id" in err, f"expected exit 2 naming --run-id, got {e.value.code}: {err!r}"


def test_the_precision_leg_runs_the_other_precision(cfg):
    job = cluster_job(cfg, "r1")
    got = (bench.precision_leg(job), bench.precision_leg(dataclasses.replace(job, float8="off")))
    assert got == (("bf16", "off"), ("float8", "tensorwise")), f"expected bf16 against float8 and back, got {got}"


def test_a_measured_float8_gain_below_the_model_says_its_l4_power_assumption_fails(cfg):
    pred = bench.precision_prediction(cluster_job(cfg, "r1"), cfg)
    said = bench.precision_verdict(pred["ratio"][0] - 0.05, pred["ratio"])
    assert "72 W" in pred["assumption"] and said.endswith("does not hold"), f"{pred['assumption']!r}: {said!r}"
