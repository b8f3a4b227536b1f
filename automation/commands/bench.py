"""`python -m automation bench --stack S`: the same training job on the cluster over EFA, over TCP, and over EFA in
the other precision (float8 against bf16).

    python -m automation bench --stack us-west-2               # verify, the EFA run, the TCP run, a table
    python -m automation bench --stack us-west-2 --steps 30    # shorter runs
    python -m automation bench --stack us-west-2 --json        # one JSON document
    python -m automation bench --collectives                   # collective bandwidth, 2 processes on gloo here

The EFA run is the job as the stack configures it (the pods' env: NCCL_NET_PLUGIN=ofi, FI_PROVIDER=efa); its NCCL
logs must pass `--require efa`. The TCP run is the same job with NCCL_NET=Socket and NCCL_NET_PLUGIN=none in its
runtime env; its logs must show TCP sockets (`--require socket`), else the comparison is void and the command fails
naming the lines that show the other network. The precision run is the EFA job on the same nodes in the other
precision: bf16 (`float8: off`) when the job runs float8 (the cluster default), else float8 tensorwise. Each run has
its own run id (`<id>-efa`, `<id>-tcp`, `<id>-bf16` or `<id>-float8`, none a part of another), and the NCCL check
scopes log files by run id, so no run's lines count in another's verdict. It prints tokens/s, MFU and step time
(the job's own summary: the median step) of each run, the EFA/TCP and float8/bf16 ratios, and
workloads/throughput_model.py's prediction for the job's layout in both precisions with the assumption the L4's float8
prediction rests on and what falsifies it; it writes the runs' report side by side (report --compare). Every leg
(and `--collectives`) runs under one run controller (automation/run_controller.py): the GPU nodes scaled up once,
and back to gpuIdleNodes once at the end unless --keep-nodes.

`--collectives` runs workloads/collectives_bench.py instead: all-reduce, all-gather and reduce-scatter over message
sizes, with algorithm and bus bandwidth against the 40 Gbps link. With --stack it runs in one worker pod per GPU
node, over EFA and again with the TCP run's overrides (1 MiB to 1 GiB; automation/collectives_pods.py); without,
the same code with 2 processes on gloo over loopback (up to 16 MiB here). Each leg's file goes under --runs-root as
collectives-<id>[-efa|-tcp].json with the machine, date and command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from automation import collectives_pods as cluster_bench
from automation import flags
from automation.commands import report
from automation.commands.run_steps import add_hang, add_keep_nodes, add_skip_gate, add_yes, aws_target, prepare
from automation.errors import DriverError
from automation.flags import CLUSTER_PARENT, Mode, command_parser, not_in, output_folder, run_id, whole_number
from automation.job import cluster_job, stack_label
from automation.local_ray import free_port
from automation.pipeline import PipelineResult, TrainOutcome, TransportVerdict
from automation.run_controller import RunController
from automation.targets import aws
from automation.ui import Ui
from infra.config import GpuNodesConfig, StackConfig
from workloads import collectives_bench
from workloads import throughput_model as model
from workloads.config import TrainConfig, new_run_id
from workloads.summary import RunSummary

HELP = "run the training job over EFA, over TCP sockets and in the other precision on the cluster, and compare them"
EFA, TCP = "efa", "tcp"
# The precision leg's name by the float8 value it runs: bf16 against a float8 job, float8 against a bf16 one.
BF16, FLOAT8 = "bf16", "float8"
# The TCP baseline: NCCL_NET=Socket forces NCCL's internal TCP network (matched case-insensitively against the net's
# name) and NCCL_NET_PLUGIN=none loads no external plugin, so not aws-ofi-nccl
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; NVIDIA/nccl src/plugin/net.cc,
# initPluginLibsOnceFunc and ncclNetInit). A job's runtime env_vars override the pods' own and are merged key by key
# into its actors' runtime env, so Ray Train's workers (workloads/train.py) inherit them
# (https://docs.ray.io/en/latest/ray-core/handling-dependencies.html, "Inheritance"; ray-project/ray#16378).
# If an image defeats this, the TCP run's check says so.
TCP_ENV = {"NCCL_NET": "Socket", "NCCL_NET_PLUGIN": "none"}


def precision_leg(job: TrainConfig) -> tuple[str, str]:
    """(leg name, its float8 value): the same job in the other precision."""
    return (BF16, "off") if job.float8 != "off" else (FLOAT8, "tensorwise")


@dataclass(frozen=True)
class Leg:
    """One run: its leg's name (efa, tcp, bf16 or float8), target, and what its steps returned."""

    name: str
    target: aws.AwsTarget
    result: PipelineResult

    @property
    def outcome(self) -> TrainOutcome | None:
        trained = self.result.state.follow
        return trained.data if trained is not None else None

    @property
    def verdict(self) -> TransportVerdict | None:
        checked = self.result.state.check
        return checked.data if checked is not None else None

    def summary(self) -> RunSummary:
        """The training summary the job wrote (all fields None when none)."""
        return (self.outcome.summary if self.outcome is not None else None) or RunSummary()

    def to_dict(self) -> dict[str, object]:
        summary, v = self.summary(), self.verdict
        return {
            "run_id": self.target.run_id,
            "job_env": dict(self.target.run.job_env),
            "require": self.target.run.require,
            "ran": True,  # a leg that did not run has no entry; `table` shows it as not run
            "ok": self.result.ok,
            "failed_step": self.result.failed_step,
            "reason": self.result.reason,
            "status": self.outcome.status if self.outcome is not None else None,
            "verdict": v.verdict if v is not None else None,
            "cause": v.cause if v is not None else None,
            "evidence": list(v.evidence) if v is not None else [],
            **{k: getattr(summary, k) for k in ("precision", "tokens_per_s", "mfu", "step_time_s")},
        }


def run_ids(base: str) -> dict[str, str]:
    """The runs' ids by leg: `<base>-efa`, `<base>-tcp`, `<base>-bf16`, `<base>-float8` (none contains another, so
    the NCCL check, which takes a file whose name or folder contains the run id, never mixes them)."""
    return {leg: f"{base}-{leg}" for leg in (EFA, TCP, BF16, FLOAT8)}


def base_run_id(text: str) -> str:
    """A --run-id whose two runs' ids (`<id>-efa`, `<id>-tcp`) are run ids the training module accepts."""
    for name in run_ids(text).values():
        try:
            run_id(name)
        except argparse.ArgumentTypeError as e:
            raise argparse.ArgumentTypeError(f"bench runs {name!r} from it, and {e}") from None
    return text


def require_two_nodes(job: TrainConfig, cfg: StackConfig, flag: str) -> None:
    """Refuse a job whose workers fit on one GPU node: nothing need cross the network bench compares
    (`flag` names where the worker count came from: --num-workers or the stack's train block)."""
    nodes, per_node, key = cfg.gpu_nodes.node_count, cfg.gpu_nodes.gpus_per_node, GpuNodesConfig.keyname("node_count")
    if nodes < 2:
        raise DriverError(
            f"stack {cfg.stack} has {key} {nodes}: EFA against TCP needs traffic between two GPU nodes; "
            f"set {key} to 2 or more",
            exit_code=2,
        )
    wanted = job.num_workers * job.gpus_per_worker
    if wanted <= per_node:
        fill = int(nodes * per_node // job.gpus_per_worker)
        raise DriverError(
            f"{flag} {job.num_workers}: the job's {wanted:g} GPUs fit on one {per_node}-GPU node, so no "
            f"traffic need cross the network bench compares; pass --num-workers {fill}",
            exit_code=2,
        )


def make_targets(
    args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None, precision: tuple[str, str], **opts: Any
) -> dict[str, aws.AwsTarget]:
    """The EFA, TCP and precision targets over one stack: the same job, three run ids, the TCP one forced onto
    sockets, the precision one (``precision``: its leg name and float8 value) in the other precision."""
    ids, (leg, float8) = run_ids(args.run_id or new_run_id()), precision
    own: dict[str, dict[str, Any]] = {EFA: {}, TCP: {"job_env": dict(TCP_ENV)}, leg: {"float8_override": float8}}
    targets: dict[str, aws.AwsTarget] = {}
    for name, options in own.items():
        options["require"] = "socket" if name == TCP else "efa"
        targets[name] = aws_target(args, ui, deps, run_id=ids[name], run_id_given=True, **options, **opts)
        deps = targets[name].deps  # one outside world for all runs: the clients are made once
    return targets


# ---- the two runs --------------------------------------------------------------------------------------
def run_legs(targets: dict[str, aws.AwsTarget], owner: RunController) -> list[Leg]:
    """The GPU nodes scaled up and verified once, then the EFA counters read, train and check of the EFA run, then
    of the TCP run (whose counters must stay flat), then of the precision run over EFA; stop at the first failure
    (a TCP number beside a failed EFA run compares nothing)."""
    legs = []
    for i, (name, target) in enumerate(targets.items()):
        names = ("scale-up", "verify", "gate", "counters", "submit", "follow", "check")[0 if i == 0 else 3 :]
        how = " ".join(f"{k}={v}" for k, v in target.run.job_env.items()) or "the stack's own NCCL env"
        if target.run.float8_override is not None:
            how += f", float8 {target.run.float8_override}"
        owner.ui.note(f"{name.upper()} run {target.run_id} ({how}; its NCCL logs must show {target.run.require})")
        result = owner.steps(names, target)
        legs.append(Leg(name, target, result))
        if not result.ok:
            break
    return legs


def failure(legs: list[Leg]) -> str | None:
    """Why the comparison does not stand (one line), or None when all three runs passed their checks."""
    for leg in legs:
        if leg.result.ok:
            continue
        run_id = leg.target.run_id
        if leg.name == TCP and leg.result.failed_step == "check" and leg.verdict is not None:
            forced = " ".join(f"{k}={v}" for k, v in leg.target.run.job_env.items())
            evidence = "; ".join(leg.verdict.evidence[:3]) or "no evidence line"
            return (
                f"the TCP run {run_id} was not found on TCP sockets although its job set {forced}, so the "
                f"comparison is void (the override did not reach NCCL, e.g. an image that ignores it): "
                f"{leg.verdict.cause}; evidence: {evidence}"
            )
        return f"the {leg.name.upper()} run {run_id} failed at {leg.result.failed_step}: {leg.result.reason}"
    if len(legs) < 3:
        return f"the run after {legs[-1].name.upper()} did not start" if legs else "no run started"
    return None


def ratio(legs: list[Leg], top: str, bottom: str) -> float | None:
    """Leg ``top``'s tokens/s over leg ``bottom``'s, only when both runs passed their NCCL checks."""
    passed = {leg.name: leg.summary().tokens_per_s for leg in legs if leg.result.ok}
    a, b = passed.get(top), passed.get(bottom)
    return a / b if a and b else None


# ---- the model's prediction ------------------------------------------------------------------------------
def _span(values: list[float]) -> list[float]:
    return [min(values), max(values)]


def _spans(points: list[dict]) -> dict[str, list[float]]:
    """tokens/s, step time and MFU of the model's predictions, each as its [min, max]."""
    keys = {"tokens_per_s": "tokens_per_s", "step_time_s": "t", "mfu": "mfu_peak"}
    return {k: _span([p[v] for p in points]) for k, v in keys.items()}


def prediction(job: TrainConfig, cfg: StackConfig) -> dict[str, object]:
    """The model's EFA and TCP tokens/s, step time and MFU for this job, as ranges over the L4's
    achievable matmul rate (54-71 TFLOP/s) and, for TCP, its 10-40 Gbps bracket; or why there is none."""
    if cfg.gpu_nodes.instance_type != "g6.12xlarge":
        return {"config": None, "note": f"the model covers g6.12xlarge only, not {cfg.gpu_nodes.instance_type}"}
    row = model.model_row(model.model_rows(), job, cfg.gpu_nodes.gpus_per_node)
    if row is None:
        return {"config": None, "note": "the model has no measured row with this job's layout (mesh, batch, dtype)"}
    at = [model.predict(row, rate) for rate in model.L4_ACHIEVABLE_TFLOPS]
    tcp = [p[k] for p in at for k in ("tcp_best", "tcp_worst")]
    return {
        "config": row["config"],
        "l4_tflops": list(model.L4_ACHIEVABLE_TFLOPS),
        "tcp_gbps": [model.NIC_GBPS["tcp_worst"], model.NIC_GBPS["tcp_best"]],
        "efa": _spans([p["efa"] for p in at]),
        "tcp": _spans(tcp),
        "ratio": _span(
            [p["efa"]["tokens_per_s"] / t["tokens_per_s"] for p in at for t in (p["tcp_best"], p["tcp_worst"])]
        ),
    }


def precision_prediction(job: TrainConfig, cfg: StackConfig) -> dict[str, object]:
    """The model's float8/bf16 tokens/s over EFA for this job at both L4 rates, the assumption that prediction
    rests on and what falsifies it; or why there is none."""
    said = {"assumption": model.L4_POWER_ASSUMPTION, "falsified_by": model.L4_POWER_FALSIFIED_BY}
    if cfg.gpu_nodes.instance_type != "g6.12xlarge":
        return {**said, "ratio": None, "note": f"the model covers g6.12xlarge only, not {cfg.gpu_nodes.instance_type}"}
    float8 = job.float8 if job.float8 != "off" else "tensorwise"
    rows, per_node = model.model_rows(), cfg.gpu_nodes.gpus_per_node
    f8, bf = (model.model_row(rows, dataclasses.replace(job, float8=v), per_node) for v in (float8, "off"))
    if f8 is None or bf is None:
        return {**said, "ratio": None, "note": "the model has no measured float8 and bf16 rows of this job's layout"}
    rates = model.L4_ACHIEVABLE_TFLOPS
    at = [model.predict(f8, r)["efa"]["tokens_per_s"] / model.predict(bf, r)["efa"]["tokens_per_s"] for r in rates]
    return {**said, "ratio": _span(at)}


def precision_verdict(measured: float | None, predicted: list[float] | None) -> str | None:
    """Whether the measured float8/bf16 ratio keeps the model's L4 power assumption (None: nothing to judge)."""
    if measured is None or not predicted:
        return None
    if measured < predicted[0]:
        return f"{measured:.2f} is below the model's {predicted[0]:.2f}: the L4 power assumption does not hold"
    return f"{measured:.2f} is not below the model's {predicted[0]:.2f}: the L4 power assumption stands"


# ---- the report ------------------------------------------------------------------------------------------
def write_reports(legs: list[Leg], runs_root: Path) -> dict[str, object]:
    """Copy both runs from the cluster, each with its own verdict, and write their report side by side."""
    files = {}
    for leg in legs:
        doc = {"target": "aws", "stack": leg.target.cfg.stack, "job_id": leg.target.run_id, "ok": leg.result.ok}
        doc["transport"] = leg.verdict.to_dict() if leg.verdict is not None else None
        files[leg.name] = report.run_files(leg.target, runs_root, doc)
    missing = [f"{n}: {f.get('report_error')}" for n, f in files.items() if not f.get("metrics_file")]
    if len(legs) < 2 or missing:
        return {"report": None, "report_error": "; ".join(missing) or "the TCP run did not run", "runs": files}
    try:
        runs = [report.load_run(runs_root / leg.target.run_id) for leg in legs]
        page, _ = report.write_report(runs)
    except DriverError as e:
        return {"report": None, "report_error": str(e), "runs": files}
    return {"report": str(page), "runs": files}


# ---- output ----------------------------------------------------------------------------------------------
def _fmt(v: object, spec: str, unit: str = "") -> str:
    return "n/a" if v is None else format(v, spec) + unit


def _range(pair: list[float] | None, spec: str, unit: str = "") -> str:
    return "n/a" if not pair else f"{format(pair[0], spec)}-{format(pair[1], spec)}{unit}"


def table(doc: dict[str, Any]) -> list[str]:
    """The human form of the JSON document: one column per run, then the model's column, then the model's L4
    power assumption and its verdict."""
    runs, pred, prec = doc["runs"], doc["prediction"], doc["precision_prediction"]
    other = BF16 if BF16 in runs or FLOAT8 not in runs else FLOAT8
    cols = [runs.get(leg, {}) for leg in (EFA, TCP, other)]

    def measured(label: str, key: str, spec: str, unit: str, mspec: str, munit: str, scale: float = 1) -> tuple:
        """The runs' ``key``, then the model's EFA / TCP ranges of it (times ``scale``, in ``mspec`` ``munit``)."""
        spans = ((pred.get(leg) or {}).get(key) for leg in (EFA, TCP))
        model = " / ".join(_range(pair and [scale * v for v in pair], mspec, munit) for pair in spans)
        return (label, *(_fmt(c.get(key), spec, unit) for c in cols), model)

    forced = " ".join(f"{k}={v}" for k, v in TCP_ENV.items())
    verdicts = (f"{c.get('verdict') or 'n/a'} (require {c['require']})" if c else "not run" for c in cols)
    rows = [
        ("", "EFA", f"TCP ({forced})", f"EFA, {other}", "model: EFA / TCP"),
        ("run id", *(c.get("run_id", "n/a") for c in cols), pred.get("config") or pred.get("note")),
        ("precision", *(c.get("precision") or "n/a" for c in cols), ""),
        ("NCCL verdict", *verdicts, ""),
        measured("tokens/s", "tokens_per_s", ",.0f", "", ",.0f", ""),
        measured("MFU", "mfu", ".1%", "", ".1f", "%", 100),
        measured("step time (median)", "step_time_s", ".3f", " s", ".2f", " s"),
        ("EFA/TCP tokens/s", _fmt(doc["ratio"], ".2f"), "", "", _range(pred.get("ratio"), ".2f")),
        ("float8/bf16 tokens/s", _fmt(doc["precision_ratio"], ".2f"), "", "", _range(prec.get("ratio"), ".2f")),
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(5)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append(f"model's float8 assumption: {prec['assumption']}; falsified by {prec['falsified_by']}")
    if doc.get("precision_verdict"):
        lines.append(f"float8/bf16 measured: {doc['precision_verdict']}")
    return lines


def document(
    legs: list[Leg], pred: dict[str, object], prec: dict[str, Any], reports: dict[str, object], error: str | None
) -> dict[str, Any]:
    # float8 over bf16, same job and nodes: the EFA run is the float8 one against a bf16 leg, else the bf16 one
    measured = ratio(legs, EFA, BF16) if any(leg.name == BF16 for leg in legs) else ratio(legs, FLOAT8, EFA)
    return {
        "ok": error is None,
        "error": error,
        "runs": {leg.name: leg.to_dict() for leg in legs},
        "ratio": ratio(legs, EFA, TCP),
        "precision_ratio": measured,
        "precision_verdict": precision_verdict(measured, prec.get("ratio")),
        "prediction": pred,
        "precision_prediction": prec,
        "report": reports.get("report"),
        "report_error": reports.get("report_error"),
    }


# ---- the command -----------------------------------------------------------------------------------------
def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = command_parser(sub, "bench", HELP, __doc__, [*parents, CLUSTER_PARENT])
    sweep = Mode("--collectives", lambda a: a.collectives)
    training = Mode("without --collectives", lambda a: not a.collectives)
    trains_nothing = "the sweep trains no job: 2 processes here, one worker pod per GPU node on a stack"
    job_flags = (
        p.add_argument(
            "--steps", type=whole_number, help="training steps of each run (default: the stack's train.steps)"
        ),
        p.add_argument(
            "--num-workers", type=whole_number, help="training workers (default: the stack's train.num_workers)"
        ),
        p.add_argument(
            "--run-id", type=base_run_id, help="base of the two run ids, <id>-efa and <id>-tcp (default: a new one)"
        ),
    )
    not_in((*job_flags, *add_hang(p)), sweep, trains_nothing)
    p.add_argument(
        "--runs-root", type=output_folder, default=Path("runs"), help="where both runs are copied for the report"
    )
    p.add_argument(
        "--collectives",
        action="store_true",
        help="measure all-reduce, all-gather and reduce-scatter bandwidth instead (no --stack: 2 processes on gloo)",
    )
    max_mib = p.add_argument(
        "--max-mib",
        type=whole_number,
        help=f"--collectives: largest message in MiB (default 1024 on a stack, {LOCAL_MAX_MIB} here)",
    )
    iters = p.add_argument("--iters", type=whole_number, help=f"--collectives: timed calls per size (default {ITERS})")
    not_in((max_mib, iters), training, "it sizes the --collectives sweep; the training runs take --steps")
    add_yes(p)
    add_keep_nodes(p)
    # The sweep measures the link itself, so no gate runs before it (and bench's only local mode is the sweep).
    add_skip_gate(p, sweep, "the sweep runs no gate: it measures the link itself")


# ---- --collectives ----------------------------------------------------------------------------------------
LOCAL_MAX_MIB = 16  # gloo on loopback on a 2-core machine: 16 MiB takes about 30 ms a call
ITERS = 5
LOCAL_RANKS = 2


Sweeps = dict[str, tuple[dict, list[str]]]  # each leg's document and the command node 0 ran, by leg name


def local_collectives(max_mib: int, iters: int) -> tuple[dict, list[str]]:
    """workloads/collectives_bench.py under torchrun with LOCAL_RANKS processes on 127.0.0.1: its document and
    command line (the interpreter as `python`), else DriverError with the output's tail."""
    with tempfile.TemporaryDirectory(prefix="collectives-") as tmp:
        out = Path(tmp) / "c.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={LOCAL_RANKS}"]
        cmd += ["--master-addr=127.0.0.1", f"--master-port={free_port()}", "-m", collectives_bench.__name__]
        cmd += [f"--max-mib={max_mib}", f"--iters={iters}", f"--out={out}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or not out.is_file():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise DriverError(f"the collectives bench exited {proc.returncode}: {' | '.join(tail)}")
        # The record names the interpreter as `python`: its absolute path is this machine's, not the command's.
        return json.loads(out.read_text()), ["python", *cmd[1:]]


def cluster_collectives(args: argparse.Namespace, target: aws.AwsTarget, owner: RunController) -> Sweeps:
    """The GPU nodes scaled up and verified, then the sweep in the stack's worker pods, over EFA and then with
    TCP_ENV: each leg's document and the command node 0 ran (automation/collectives_pods.py)."""
    prepare(owner, ("scale-up", "verify"))
    cluster = target.ray_pods()
    pods = cluster_bench.worker_pods(cluster)
    gpus = target.cfg.gpu_nodes.gpus_per_node
    cluster_bench.copy_workloads(cluster.kube.exec, pods, cluster.namespace)
    legs = {}
    for leg, env in ((EFA, {}), (TCP, TCP_ENV)):
        sweep = {"max_mib": args.max_mib or 1024, "iters": args.iters or ITERS, "label": leg}
        owner.ui.note(f"{leg.upper()} sweep on {', '.join(p.node for p in pods)} ({gpus} GPUs each)")
        if target.handles.lease is not None:  # no Ray job runs: the lease alone keeps the idle guard off
            target.handles.lease.renew("collectives")
        doc = cluster_bench.sweep_on(cluster.kube.exec, pods, cluster.namespace, gpus, env, sweep)
        legs[leg] = (doc, cluster_bench.torchrun_command(0, pods, gpus, env, sweep, "OUT"))
    return legs


def collectives(args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None = None, **target_opts: Any) -> int:
    """The sweep (on the stack's pods over EFA and TCP under a run controller, else here on gloo), its table and
    one file per leg under --runs-root (collectives-<id>[-efa|-tcp].json, with machine, date and command)."""
    if not args.stack:
        return write_sweeps(args, ui, {"": local_collectives(args.max_mib or LOCAL_MAX_MIB, args.iters or ITERS)}, None)
    target = aws_target(args, ui, deps, **target_opts)
    owner = RunController(target, ui, keep_nodes=args.keep_nodes)
    return owner.run(
        lambda owner: cluster_collectives(args, target, owner),
        lambda legs: write_sweeps(args, ui, legs, owner.scale_down_line),
    )


def write_sweeps(args: argparse.Namespace, ui: Ui, legs: Sweeps, nodes: str | None) -> int:
    """Each leg's document in its file under --runs-root, with its table (or all of them as one JSON document)
    and ``nodes``, where the GPU nodes were left."""
    base, when = new_run_id(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.runs_root.mkdir(parents=True, exist_ok=True)
    out = {}
    for leg, (doc, cmd) in legs.items():
        path = args.runs_root / f"collectives-{base}{'-' + leg if leg else ''}.json"
        doc = {**doc, "stack": args.stack, "machine": platform.node(), "date": when, "command": cmd}
        path.write_text(json.dumps(doc, indent=2) + "\n")
        out[leg] = {**doc, "file": str(path)}
        if not args.json:
            ui.note(f"{leg.upper() or 'here'}:")
            for line in collectives_bench.table(doc):
                ui.note(line)
            ui.note(f"written: {path}")
    if args.json:
        ui.emit_json(out[""] if "" in out else {**out, "nodes": nodes})
    elif nodes:
        ui.note(nodes)
    return 0


def run(args: argparse.Namespace, ui: Ui, deps: aws.AwsDeps | None = None, **target_opts: Any) -> int:
    """The runs, their comparison and report (exit 0 only when every run passed its NCCL check), or with
    --collectives the bandwidth sweep; `deps` (an AwsDeps) and `target_opts` are for tests."""
    if args.collectives:
        return collectives(args, ui, deps, **target_opts)
    # The job is judged from the stack file alone, before any client exists: a job the stack cannot run, or one
    # that fits on one node, is bad input whatever the cloud says.
    cfg = aws.load_config(flags.need_stack(args, "bench (EFA against TCP runs on a stack's cluster)"), args.project_dir)
    job = cluster_job(cfg, args.run_id or "bench", args.steps, args.num_workers)
    require_two_nodes(job, cfg, "--num-workers" if args.num_workers else stack_label("num_workers"))
    targets = make_targets(args, ui, deps, precision_leg(job), **target_opts)

    def report(legs: list[Leg]) -> int:
        error = failure(legs)
        reports = write_reports([leg for leg in legs if leg.outcome is not None], args.runs_root)
        doc = document(legs, prediction(job, cfg), precision_prediction(job, cfg), reports, error)
        if args.json:
            ui.emit_json({**doc, "nodes": owner.scale_down_line})
        else:
            for line in table(doc):
                ui.note(line)
            ui.note(f"report: {doc['report']}" if doc["report"] else f"no side-by-side report: {doc['report_error']}")
            if owner.scale_down_line:
                ui.note(owner.scale_down_line)
            if error:
                ui.error(error)
        return 0 if error is None else 1

    owner = RunController(targets[EFA], ui, keep_nodes=args.keep_nodes)
    return owner.run(lambda owner: run_legs(targets, owner), report)
