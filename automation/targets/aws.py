"""The AWS target: one Pulumi stack, its EKS cluster and its RayCluster, as the steps and commands use them.

`open_stack` is the one way a command opens it. Every outside system comes through `AwsDeps` (boto3 clients, the
Pulumi stack, the Kubernetes API, the prompt), so tests hand in moto clients, a fake stack and recorded API objects.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from pulumi.automation import ConfigValue

from automation.aws_clients import ClientFactory, Pricing
from automation.cost import CostEstimate, estimate
from automation.errors import DriverError
from automation.hang import HangBound, RankEvidence, pod_evidence
from automation.job import CLUSTER_ROOT, ResolvedJob, resolve_cluster_job, stack_label
from automation.job_modules import job_modules
from automation.kube import KubeApi, PodExec, RayClusterPods, parse_kubeconfig, read_kubeconfig_file, running_on
from automation.pipeline import (
    SYSTEM_CLOCK,
    Advice,
    ChangeSummary,
    Clock,
    Expectations,
    Finding,
    PipelineResult,
    Prior,
    SubmittedJob,
    TrainOutcome,
    expectations_from,
)
from automation.pulumi_setup import pulumi_rows
from automation.pulumi_stack import PULUMI_MISSING, StackLike, outputs_dict, select_stack
from automation.ray_head import POLL_S, HeadJobs, run_to_end
from automation.recovery import MAX_RECOVERIES, RECOVERY_MINUTES, Failure, classify, wait_for_nodes
from automation.run_files import KEPT_LOGS, archive_run, collect_logs, fetch_run, set_aside_command
from automation.start_phases import observe
from automation.storage import (
    Durability,
    download_tree,
    outside_run_bucket,
    require_credentials,
    require_run,
    run_locations,
    split_s3_uri,
    upload_tree,
)
from automation.ui import Ui, tty_confirm
from infra.config import ClusterConfig, GpuNodesConfig, StackConfig, StackConfigError, load_stack
from infra.names import (
    APP_LABEL,
    EFA_COUNTER_READER,
    EFA_COUNTER_READER_NAMESPACE,
    EFA_RESOURCE,
    GPU_NODE_SELECTOR,
    HOST_SYS_MOUNT,
)
from workloads.config import TrainConfig, TrainConfigError, new_run_id
from workloads.env import NCCL_DEBUG_LEVEL
from workloads.nccl_check.counters import NodeReading, parse_reading, read_script

READER_SYSFS_ROOT = f"{HOST_SYS_MOUNT}/class/infiniband"  # the host's RDMA devices, as the reader pod sees them
PIPELINE = ("preflight", "preview", "up", "scale-up", "verify", "gate", "counters", "submit", "follow", "check")
GPU_AZ_KEY = GpuNodesConfig.keyname("availability_zone", prefixed=True)
API_CIDRS_KEY = ClusterConfig.keyname("public_access_cidrs", prefixed=True)
DRIVER_CIDR_KEY = ClusterConfig.keyname("driver_cidr", prefixed=True)
PLAN = ("preflight", "preview")
DETACHED = PIPELINE[: PIPELINE.index("submit") + 1]  # `run --detach`: submit, say how to attach, return
ATTACH = ("attach", "follow", "check")
# the command that runs a step which has none of its own
STEP_COMMAND = {"submit": "train", "scale-up": "train", "follow": "train", "gate": "train"}
KEEP_LOGS_S = 300  # the logs' copy at a run's end, before any scale-down: bounded so it cannot hold the nodes up
RESUMED = "-resumed-"  # a resumed run's job id: <run id>-resumed-<new id> (Ray keeps a finished job's id)
# The EFA counters before the job (automation/efa_witness.py), kept in the run bucket for a check on another machine.
COUNTERS_BEFORE_FILE = "efa_counters_before.json"


@dataclass
class AwsDeps:
    """Factories for the outside world; `real()` builds the production ones."""

    client: ClientFactory  # boto3 client by service name, in the stack's region
    stack: Callable[[], StackLike]
    kube: Callable[[dict], KubeApi]  # kubeconfig dict -> KubeApi or a stand-in with its methods (reads + exec)
    confirm: Callable[[str], bool] = tty_confirm
    pricing: Callable[[], Pricing] | None = None
    # preflight's rows for this machine's pulumi CLI, backend and passphrase (None: a stand-in stack, not checked)
    pulumi_setup: Callable[[], list[Finding]] | None = None
    # What every wait reads and sleeps on (follow's polls, EKS waits, the idle guard's lease); tests move a fake one.
    clock: Clock = SYSTEM_CLOCK
    interactive: Callable[[], bool] = lambda: sys.stdin.isatty()  # whether Ctrl-C may ask before leaving a job
    # This machine's public IPv4 (checkip_address), for a stack that leaves apiPublicAccessCidrs to the driver;
    # None: a stand-in, nothing to ask, and a stack that needs an address stops with the key to set.
    public_ip: Callable[[], str] | None = None
    # The local folders a job ships as its py_modules (automation/job_modules.py: torchao for float8, fetched into
    # this user's cache); None: a stand-in world, nothing fetched or shipped.
    job_modules: Callable[[TrainConfig], list[Path]] | None = None

    @classmethod
    def real(cls, cfg: StackConfig, project_dir: Path) -> AwsDeps:
        import boto3
        from botocore.exceptions import ProfileNotFound

        check_aws_files(os.environ)
        require_credentials(stack_label("storage_path"), str(cfg.train.get("storage_path", "")))
        try:
            session = boto3.Session(region_name=cfg.region)
        except ProfileNotFound as e:
            raise DriverError(
                f"AWS_PROFILE={os.environ.get('AWS_PROFILE', '')!r}: {e}: pick one of `aws configure list-profiles` "
                "or unset AWS_PROFILE; `python -m automation run` (no --stack) runs the same job locally without AWS",
                exit_code=2,
            ) from None
        return cls(
            client=lambda name: session.client(name),
            stack=lambda: select_stack(cfg.stack, project_dir),
            kube=KubeApi,
            # The Pricing API lives in us-east-1 whatever the stack's region.
            pricing=lambda: session.client("pricing", region_name="us-east-1"),
            pulumi_setup=lambda: pulumi_rows(os.environ, Path.home(), project_dir, cfg.stack, shutil.which),
            public_ip=checkip_address,
            job_modules=job_modules,
        )


# AWS's own "what is my IP" service: its answer is one line, the caller's public IPv4 and a newline.
CHECKIP_URL = "https://checkip.amazonaws.com"


def checkip_address(urlopen: Callable[..., Any] = urllib.request.urlopen, timeout_s: float = 10.0) -> str:
    """This machine's public IPv4 as checkip.amazonaws.com sees it; DriverError naming the key to set without one."""
    fix = f"set '{API_CIDRS_KEY}: [x.x.x.x/32]' in Pulumi.<stack>.yaml with your address"
    try:
        with urlopen(CHECKIP_URL, timeout=timeout_s) as answer:
            text = answer.read(64).decode("ascii", "replace").strip()
    except OSError as e:  # URLError, timeouts and refused connections are all OSError
        why = f"could not read this machine's address from {CHECKIP_URL} ({e})"
        raise DriverError(f"{why}: {fix}", exit_code=2) from None
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise DriverError(f"{CHECKIP_URL} answered {text!r}, not an IPv4 address: {fix}", exit_code=2) from None


# The files the AWS SDK and CLI read, by the variable that moves each (AWS CLI v2 user guide,
# https://docs.aws.amazon.com/cli/latest/userguide/cli-configure-files.html).
AWS_FILES = (("AWS_CONFIG_FILE", "~/.aws/config"), ("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"))


def check_aws_files(environ: Mapping[str, str]) -> None:
    """The AWS config and credentials files read with botocore's own parser before any AWS call: one line naming the
    file and the fix where botocore would raise with a traceback (unparsable, unreadable) or ignore it (a folder)."""
    from botocore.configloader import raw_config_parse
    from botocore.exceptions import ConfigParseError

    for var, default in AWS_FILES:
        path = Path(environ.get(var) or default).expanduser()
        named = f"{path} ({var})" if environ.get(var) else str(path)
        if path.is_dir():
            raise DriverError(f"AWS file {named} is a folder: point {var} at a file, or unset it", exit_code=2)
        if not path.is_file():
            continue  # absent, or /dev/null: botocore reads no profiles from it, as it should
        try:
            raw_config_parse(str(path))
        except ConfigParseError:
            why = "it must be INI sections such as [default] with key = value lines (`aws configure` writes one)"
            raise DriverError(f"AWS file {named} cannot be parsed: {why}", exit_code=2) from None
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
            raise DriverError(
                f"AWS file {named} cannot be read ({why}): fix its permissions or encoding", exit_code=2
            ) from None


def newest_cluster_run(pod_exec: PodExec, pod: str, namespace: str) -> str:
    """The most recent run directory under CLUSTER_ROOT/runs in `pod`; DriverError if there is none."""
    res = pod_exec(pod, namespace, ["sh", "-c", f"ls -1t {CLUSTER_ROOT}/runs 2>/dev/null | head -n 1"], timeout_s=60)
    run_id = res.stdout.strip()
    if res.rc != 0 or not run_id:
        raise DriverError(
            f"no run under {CLUSTER_ROOT}/runs in {namespace}/{pod}: run `train` first or pass --run-id", exit_code=2
        )
    return run_id


@dataclass(frozen=True)
class AwsRun:
    """One command's run on one stack as it was asked for: the stack config, the run id and the flags. Frozen:
    what the run changes (the GPU AZ it moved to, the run of the job it attached to) is a new AwsRun."""

    cfg: StackConfig
    run_id: str
    run_id_given: bool = False
    resume: bool = False  # continue run_id from its last checkpoint in the run bucket
    yes: bool = False
    kubeconfig_path: Path | None = None
    steps_override: int | None = None
    workers_override: int | None = None
    float8_override: str | None = None  # `bench`'s precision leg: the same job in the other precision
    # The job's runtime env on top of NCCL_DEBUG=INFO, and what its NCCL logs must show (check's
    # require): `bench` runs a TCP baseline with NCCL_NET=Socket and require "socket".
    job_env: Mapping[str, str] = field(default_factory=dict)
    require: str = "efa"
    node_wait_s: float = 180
    auto_az: bool = False  # `up --auto-az`: move the GPU node group to the next ranked AZ when EC2 has no capacity
    pod_wait_s: float = 900
    detach: bool = False  # `run --detach`: the pipeline ends at submit
    job_timeout_s: float | None = None  # --timeout: stop the job after this long (None: no limit)
    hang_bound: HangBound | None = HangBound()  # --hang-factor, --hang-floor
    attach_job: str | None = None  # `attach JOB`: the job to follow (None: the newest submitted)
    # After an infrastructure failure: resumed runs at most, and minutes for all of them (automation/recovery.py)
    max_recoveries: int = MAX_RECOVERIES
    recovery_minutes: float = RECOVERY_MINUTES
    skip_gate: bool = False  # --skip-gate: the gate step skips (automation/steps/gate.py)


class HeldLease(Protocol):
    """The idle guard's lease a run holds (automation/scaling.py's Lease, which imports this module)."""

    def renew(self, what: str = "starting") -> bool: ...
    def renewing(self, act: Callable[[float], None]) -> Callable[[float], None]: ...


@dataclass
class AwsHandles:
    """What a run acts through, each made by ``AwsTarget.deps`` on first use and kept."""

    stack: StackLike | None = None
    outputs: dict | None = None
    kube: KubeApi | None = None
    jobs: HeadJobs | None = None
    lease: HeldLease | None = None  # the idle guard's lease, held from the `scale-up` step to the run's end


@dataclass(eq=False)
class AwsTarget:
    """One stack as the steps and commands use it (automation.targets.Target and more): ``run``, what was asked
    (frozen), ``deps``, the outside world, and ``handles``, made from it."""

    run: AwsRun
    deps: AwsDeps
    on_line: Callable[[str], None] = lambda s: None
    on_progress: Callable[[str], None] = lambda s: None
    on_note: Callable[[str], None] = lambda s: None
    notes: list[str] = field(default_factory=list)
    handles: AwsHandles = field(default_factory=AwsHandles)
    name = "aws"
    poll_s = POLL_S

    @property
    def cfg(self) -> StackConfig:
        return self.run.cfg

    @cfg.setter
    def cfg(self, cfg: StackConfig) -> None:
        self.run = dataclasses.replace(self.run, cfg=cfg)

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def job_timeout_s(self) -> float | None:
        return self.run.job_timeout_s

    @property
    def hang_bound(self) -> HangBound | None:
        return self.run.hang_bound

    def hang_evidence(self) -> list[RankEvidence]:
        """Each worker rank's stack and last NCCL lines (automation/hang.py), each call bounded, none raised."""
        try:
            pods = self.ray_pods()
            nodes = pods.node_of_pods("worker")
        except DriverError as e:
            return [RankEvidence(None, "?", "?", stack_error=f"the worker pods were not listed: {e}")]
        nccl_dir, ns = f"{CLUSTER_ROOT}/runs/{self.run_id}/nccl", pods.namespace
        return [r for pod, node in sorted(nodes.items()) for r in pod_evidence(pods.kube.exec, pod, node, ns, nccl_dir)]

    @property
    def stack_name(self) -> str:
        return self.cfg.stack

    def pipeline(self, command: str, plan: bool) -> tuple[str, ...]:
        if command == "run":
            return PLAN if plan else DETACHED if self.run.detach else PIPELINE
        # train verifies before its gate: the gate runs in the worker pods, which verify waits for
        return {"train": ("scale-up", "verify", "gate", "submit", "follow"), "attach": ATTACH}.get(command, (command,))

    def resolved_job(self, storage_uri: str | None = None) -> ResolvedJob:
        """This run's job and each value's source (automation/job.py); one the cluster cannot run is bad input."""
        r = self.run
        flags = {"steps": r.steps_override, "num_workers": r.workers_override, "float8": r.float8_override}
        try:
            return resolve_cluster_job(self.cfg, self.run_id, vars(Durability(storage_uri)), flags)
        except TrainConfigError as e:
            raise DriverError(str(e), exit_code=2) from None

    def note(self, text: str) -> None:
        """A line for the user now (on_note) and again among the report's notes."""
        self.notes.append(text)
        self.on_note(text)

    def set_gpu_az(self, az: str) -> None:
        """Set gpuAvailabilityZone in the stack with the Automation API (`pulumi config set`, which writes
        Pulumi.<stack>.yaml), so the program sees it now and later runs reuse it."""
        self.stack().set_config(GPU_AZ_KEY, ConfigValue(value=az))
        gpu_nodes = dataclasses.replace(self.cfg.gpu_nodes, availability_zone=az)
        self.cfg = dataclasses.replace(self.cfg, gpu_nodes=gpu_nodes)

    def deployer_cidr(self) -> str:
        """This machine's public address as x.x.x.x/32, for an apiPublicAccessCidrs left empty."""
        if self.deps.public_ip is None:
            raise DriverError(
                f"stack {self.cfg.stack} leaves {API_CIDRS_KEY} empty and this run has no way to learn this "
                f"machine's address: set '{API_CIDRS_KEY}: [x.x.x.x/32]' in Pulumi.{self.cfg.stack}.yaml",
                exit_code=2,
            )
        return f"{self.deps.public_ip()}/32"

    def set_api_cidr(self, index: int, cidr: str) -> None:
        """Set entry ``index`` of apiPublicAccessCidrs to ``cidr`` (`pulumi config set --path`) and name it in
        apiPublicAccessDriverCidr as the driver's, so later runs reuse it and a run from another address replaces it."""
        self.stack().set_config(f"{API_CIDRS_KEY}[{index}]", ConfigValue(value=cidr), path=True)
        self.stack().set_config(DRIVER_CIDR_KEY, ConfigValue(value=cidr))
        cidrs = [*self.cfg.cluster.public_access_cidrs]
        cidrs[index : index + 1] = [cidr]
        cluster = dataclasses.replace(self.cfg.cluster, public_access_cidrs=tuple(cidrs), driver_cidr=cidr)
        self.cfg = dataclasses.replace(self.cfg, cluster=cluster)

    def stack(self) -> StackLike:
        if self.handles.stack is None:
            self.handles.stack = self.deps.stack()
        return self.handles.stack

    def confirm(self, question: str) -> bool:
        return self.run.yes or self.deps.confirm(question)

    def go_ahead(self, question: str) -> None:
        """Ask ``question`` about a change that costs money (--yes answers it); DriverError when declined."""
        if not self.confirm(question):
            raise DriverError("not confirmed: nothing was changed (pass --yes to skip the question)")

    def stack_changed(self, summary: ChangeSummary) -> None:
        """After `up`: its outputs are the stack's from now on."""
        self.handles.outputs = dict(summary.outputs)

    def outputs(self) -> dict:
        """The stack outputs (from this run's `up`, else the stack); {} when --kubeconfig replaces them."""
        if self.handles.outputs is None:
            self.handles.outputs = {} if self.run.kubeconfig_path is not None else outputs_dict(self.stack().outputs())
        return self.handles.outputs

    def kube(self) -> KubeApi:
        if self.handles.kube is None:
            if self.run.kubeconfig_path is not None:
                kubeconfig = read_kubeconfig_file(self.run.kubeconfig_path)
            else:
                raw = self._output("kubeconfig", "has no kubeconfig output (is it up?)", " or pass --kubeconfig PATH")
                kubeconfig = (
                    raw if isinstance(raw, dict) else parse_kubeconfig(str(raw), f"stack {self.cfg.stack}'s output")
                )
            self.handles.kube = self.deps.kube(kubeconfig)
        return self.handles.kube

    def expectations(self) -> Expectations:
        return expectations_from(self.cfg, self.outputs())

    def ray_pods(self) -> RayClusterPods:
        """The RayCluster's pods, through the cluster's Kubernetes API."""
        exp = self.expectations()
        return RayClusterPods(self.kube(), exp.namespace, exp.raycluster, self.cfg.stack)

    def _output(self, key: str, missing: str, instead: str = "") -> object:
        """Stack output ``key``; bad input naming `up` when the stack has none."""
        if not (value := self.outputs().get(key)):
            s = self.cfg.stack
            raise DriverError(f"stack {s} {missing}: run `python -m automation up --stack {s}`{instead}", exit_code=2)
        return value

    def storage_uri(self) -> str:
        return str(self._output("storage_uri", "exports no storage_uri (created before the run bucket existed)"))

    def train_job(self) -> TrainConfig:
        """The job as submitted, durable (storage in the run bucket) unless the train: block says otherwise; the
        resolved job and its sources go into the report's notes (preflight printed them before storage was known)."""
        uri = self.storage_uri()
        resolved = self.resolved_job(uri)
        job = resolved.config
        self.notes.append(resolved.text(f"job of run {self.run_id}"))
        if self.run.resume:
            require_run(self.deps.client("s3"), job.storage_path, self.run_id)
        if outside := outside_run_bucket(job.storage_path, uri):
            self.note(outside)
        self.notes.extend(run_locations(job.storage_path, self.run_id))
        return job

    # ---- the job, detached (automation/ray_head.py) ------------------------------------------------
    def jobs(self) -> HeadJobs:
        """The head pod's job server, through short exec calls (the head pod is looked up once)."""
        if self.handles.jobs is None:
            pods = self.ray_pods()
            self.handles.jobs = HeadJobs(pods.kube.exec, pods.head_pod(), pods.namespace)
        return self.handles.jobs

    def submit_job(self, job: TrainConfig) -> SubmittedJob:
        # Ray keeps a finished job's id: a resumed run needs a job id of its own.
        submission_id = f"{self.run_id}{RESUMED}{new_run_id()}" if self.run.resume else job.run_id
        jobs = self.jobs()
        self.on_progress(f"copying workloads/ into {jobs.pod} and submitting job {submission_id}")
        env = {"NCCL_DEBUG": NCCL_DEBUG_LEVEL, **self.run.job_env}
        modules = self.deps.job_modules(job) if self.deps.job_modules else []
        return SubmittedJob(jobs.submit(job, env, submission_id, modules), job)

    def find_job(self) -> SubmittedJob:
        """The job `attach` names, else the newest submitted, with the training job of its run."""
        job_id = self.run.attach_job or self.jobs().newest_job()
        self.run = dataclasses.replace(self.run, run_id=job_id.split(RESUMED)[0])
        return SubmittedJob(job_id, self.train_job())

    def clock(self) -> float:
        return self.deps.clock.now()

    def sleep(self, seconds: float) -> None:
        self.deps.clock.sleep(seconds)

    def ask_stop(self, question: str) -> bool | None:
        """Asked on a terminal only (--yes never stops a job); a second Ctrl-C or end of input keeps it."""
        if not self.deps.interactive():
            return None
        try:
            return self.deps.confirm(question)
        except (KeyboardInterrupt, EOFError, DriverError):
            return False

    def attach_command(self, job_id: str) -> str:
        return f"python -m automation attach --stack {self.cfg.stack} {job_id}"

    def run_job_to_end(self, job: TrainConfig) -> TrainOutcome:
        return run_to_end(self, job)

    def start_phases(self, first_step_at: float | None) -> dict | None:
        """The phases of the RayCluster's last start (node join, image pull, pod start, first step), read while
        its pods and GPU nodes still exist; ``first_step_at``: when this command saw the first step line."""
        pods = self.ray_pods()
        seen = None if first_step_at is None else datetime.fromtimestamp(first_step_at, UTC)
        return observe(pods.kube, pods.namespace, pods.raycluster, seen).to_dict()

    def nccl_expectation(self) -> tuple[str, str]:
        return self.run.require, ""

    def _worker_pods(self) -> list[str]:
        pods = self.ray_pods()
        if not (names := pods.pods("worker")):
            raise DriverError(f"no worker pods of RayCluster {pods.namespace}/{pods.raycluster} to read NCCL logs from")
        return names

    def efa_counters(self) -> dict[str, NodeReading]:
        """Every GPU node's EFA port counters, read with `cat` in the node's efa-counter-reader pod, which sees the
        host's sysfs (a Ray worker pod sees no port counters: infra/manifests.py `efa_counter_reader_daemonset`);
        a node without a Running reader, or showing fewer EFA devices than it advertises, carries the reason."""
        kube = self.kube()
        pods = kube.list_pods(EFA_COUNTER_READER_NAMESPACE, f"{APP_LABEL}={EFA_COUNTER_READER}")
        readers = {node: pod for pod, node in sorted(running_on(pods).items(), reverse=True)}  # the first by name
        out = {}
        for node in kube.list_nodes(GPU_NODE_SELECTOR):
            name = node["metadata"]["name"]
            advertised = int(node.get("status", {}).get("allocatable", {}).get(EFA_RESOURCE, 0))
            out[name] = dataclasses.replace(self._read_counters(readers.get(name)), advertised=advertised)
        return out

    def _read_counters(self, pod: str | None) -> NodeReading:
        if pod is None:
            return NodeReading(error=f"no Running {EFA_COUNTER_READER} pod on this node (`up` installs its DaemonSet)")
        script = read_script(READER_SYSFS_ROOT)
        try:
            res = self.kube().exec(pod, EFA_COUNTER_READER_NAMESPACE, ["sh", "-c", script], timeout_s=60)
        except DriverError as e:
            return NodeReading(error=f"exec in pod {pod} failed: {e}")
        if res.rc != 0:
            return NodeReading(error=f"the read in pod {pod} exited {res.rc}: {res.stderr.strip()[-200:]}")
        return parse_reading(res.stdout)

    def host_nodes(self) -> dict[str, str]:
        """Each Running Ray worker pod -> its node: NCCL in a pod logs the pod's host name, its pod name."""
        return self.ray_pods().node_of_pods("worker")

    def keep_counters(self, doc: dict) -> str:
        """The reading before the job, kept in the run bucket for `attach` on another machine; its s3:// URI."""
        bucket, key = self._run_key(self.run_id, COUNTERS_BEFORE_FILE)
        try:
            self.deps.client("s3").put_object(Bucket=bucket, Key=key, Body=json.dumps(doc).encode())
        except (ClientError, BotoCoreError) as e:
            raise DriverError(f"cannot write s3://{bucket}/{key}: {type(e).__name__}: {e}") from None
        return f"s3://{bucket}/{key}"

    def kept_counters(self, job_id: str) -> dict | None:
        """The reading `keep_counters` kept for job `job_id`'s run; None when there is none or it cannot be read."""
        try:
            bucket, key = self._run_key(job_id, COUNTERS_BEFORE_FILE)
            body = self.deps.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
            doc = json.loads(body)
        except (ClientError, BotoCoreError, DriverError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def checked_run_id(self) -> str:
        """The --run-id given, else the newest run in the first worker pod."""
        if self.run.run_id_given:
            return self.run_id
        return newest_cluster_run(self.kube().exec, self._worker_pods()[0], self.expectations().namespace)

    def nccl_logs(self, run_id: str, dest: Path) -> list[Path]:
        """Every worker pod's NCCL logs of `run_id`, copied under `dest/<pod>/`; once the pods are gone or hold
        none of them, the ones the run's end kept in the run bucket (`keep_logs`), said so."""
        try:
            workers = self._worker_pods()
            nccl = f"{CLUSTER_ROOT}/runs/{run_id}/nccl"
            files = collect_logs(self.kube().exec, workers, self.expectations().namespace, nccl, dest)
            gone = "" if files else f"no NCCL logs of run {run_id} in worker pods {', '.join(workers)}"
        except DriverError as e:
            files, gone = [], str(e)
        if gone:
            files = self.kept_logs(run_id, dest, "nccl/")
            self.note(f"{gone}: read the {len(files)} NCCL log files kept in the run bucket instead")
        else:
            self.on_progress(f"{len(files)} NCCL log files from {len(workers)} worker pods")
        return files

    def _run_key(self, run_id: str, name: str) -> tuple[str, str]:
        """The run bucket and the key `<storage_uri>/<run id>/<name>` of a run (a resumed run's job shares it)."""
        bucket, prefix = split_s3_uri(self.storage_uri())
        return bucket, f"{prefix}/{run_id.split(RESUMED)[0]}/{name}".lstrip("/")

    def keep_logs(self, job_ids: Sequence[str], since: float) -> str:
        """The run's files and logs, from the pods (automation/run_files.py `archive_run`: NCCL of every attempt,
        Ray's worker logs written since ``since``) and the job server (`ray job logs` of each of ``job_ids``),
        put under `<storage_uri>/<run id>/logs/` within KEEP_LOGS_S; the line saying where, and what was cut."""
        now = self.deps.clock.now
        deadline, minutes = now() + KEEP_LOGS_S, math.ceil((now() - since) / 60) + 1
        bucket, prefix = self._run_key(self.run_id, f"{KEPT_LOGS}/")
        with tempfile.TemporaryDirectory(prefix="logs-") as tmp:
            dest, cut = Path(tmp) / self.run_id, ""
            (dest / "job").mkdir(parents=True)
            try:
                for job_id in job_ids:
                    lines = self.jobs().job_logs(job_id, 0, final=True).lines
                    (dest / "job" / f"{job_id}.log").write_text("".join(f"{line}\n" for line in lines))
                archive_run(self.ray_pods(), self.run_id, minutes, dest, lambda: now() > deadline)
            except DriverError as e:  # what was read is kept all the same
                cut = f"; the rest not read: {e}"
            try:
                count = upload_tree(self.deps.client("s3"), bucket, prefix, dest)
            except (ClientError, BotoCoreError) as e:
                raise DriverError(f"cannot write s3://{bucket}/{prefix}: {type(e).__name__}: {e}") from None
        return f"logs of run {self.run_id} kept in the run bucket: s3://{bucket}/{prefix} ({count} files){cut}"

    def kept_logs(self, run_id: str, dest: Path, under: str = "") -> list[Path]:
        """What `keep_logs` kept of run ``run_id`` under `logs/<under>`, written into ``dest``; [] when none."""
        bucket, prefix = self._run_key(run_id, f"{KEPT_LOGS}/")
        try:
            return download_tree(self.deps.client("s3"), bucket, prefix + under, dest)
        except (ClientError, BotoCoreError) as e:
            raise DriverError(f"cannot read s3://{bucket}/{prefix}{under}: {type(e).__name__}: {e}") from None

    def _gpu_nodes_and_workers(self) -> tuple[list[dict], list[dict]]:
        pods = self.ray_pods()
        return pods.kube.list_nodes(GPU_NODE_SELECTOR), pods.kube.list_pods(pods.namespace, pods.selector("worker"))

    def failure_of(self, outcome: TrainOutcome) -> Failure:
        """The class of a failed job from what the cluster shows now (automation/recovery.py)."""
        return classify(*self._gpu_nodes_and_workers(), self.cfg.gpu_nodes.node_count, outcome.log_tail)

    def wait_for_replacement(self, deadline: float) -> float:
        """Seconds until the GPU nodes are back at gpuNodeCount and the worker pods Running, by ``deadline``."""
        clock = self.deps.clock
        want = (self.cfg.gpu_nodes.node_count, self.expectations().worker_replicas)
        return wait_for_nodes(self._gpu_nodes_and_workers, *want, deadline, clock.now, clock.sleep, self.on_progress)

    def set_aside_nccl_logs(self, attempt: int) -> None:
        """Move the NCCL logs of attempt ``attempt`` in the worker pods that outlived it to nccl-attempt-<n>/, so
        `check` reads only the resumed attempt's logs (the logs upload keeps both)."""
        move = set_aside_command(f"{CLUSTER_ROOT}/runs/{self.run_id}/nccl", attempt)
        for pod in self.ray_pods().pods("worker"):
            self.kube().exec(pod, self.expectations().namespace, move, timeout_s=60)

    def collect_run(self, runs_root: Path, run_id: str | None = None) -> Path:
        """Run ``run_id`` (default: this one) copied into `runs_root/<run id>` from the cluster's pods, else, once
        they are gone or no longer hold it, from what its end kept in the run bucket (`keep_logs`), said so."""
        run_id = run_id or self.run_id
        dest = runs_root / run_id
        try:
            return fetch_run(self.ray_pods(), run_id, dest)
        except DriverError as e:
            if not self.kept_logs(run_id, dest):
                raise
            self.on_note(f"{e}: read run {run_id} from what its end kept in the run bucket instead")
            return dest

    # ---- after a failure ---------------------------------------------------------------------------
    def advise(self, failed: str, prior: Prior) -> Advice:
        s = self.cfg.stack
        resume = f"python -m automation run --stack {s}"
        teardown = f"python -m automation destroy --stack {s}"
        if failed in ("preflight", "preview"):
            return Advice(
                "nothing was created: preflight and preview change nothing", (f"fix the failing rows, then: {resume}",)
            )
        if failed == "up":
            return self._maybe_created(f"; {self.cost_line()}")
        if failed == "destroy":
            return Advice(f"some resources of stack {s} may remain", (f"retry: {teardown}",))
        if not prior.cluster_seen:
            return Advice(
                f"this command has not seen the cluster of stack {s} (no `up` ran and `verify` did not reach it): "
                f"`python -m automation status --stack {s}` says what exists; a cluster costs money until "
                f"destroyed ({self.cost_line()})",
                (f"resume (idempotent): {resume}", f"tear down if it exists: {teardown}"),
            )
        return Advice(
            f"the cluster of stack {s} is up and costs money until destroyed ({self.cost_line()})",
            (
                f"resume (idempotent): {resume}",
                f"or only this step: python -m automation {STEP_COMMAND.get(failed, failed)} --stack {s}",
                f"tear down: {teardown}",
            ),
        )

    def interrupted(self, advice: Advice | None) -> Advice:
        """Nothing is stopped for AWS: the cluster (or half of it) keeps running and costing money."""
        return advice or self._maybe_created("")

    def _maybe_created(self, cost: str) -> Advice:
        s = self.cfg.stack
        return Advice(
            f"stack {s} may be partly created (GPU nodes cost money while they exist{cost}): "
            f"`python -m automation status --stack {s}` lists what is there",
            (
                f"resume (idempotent): python -m automation run --stack {s}",
                f"or tear down: python -m automation destroy --stack {s}",
            ),
        )

    def where(self) -> str:
        return f" of stack {self.cfg.stack}"

    def files(self, result: PipelineResult) -> str:
        trained = result.state.follow
        run_id = trained.data.job_id if trained is not None and trained.data is not None else self.run_id
        return (
            f"{CLUSTER_ROOT}/runs/{run_id} in the RayCluster's pods of stack {self.cfg.stack} "
            "(summary.json in the head pod, nccl/ in each worker pod)"
        )

    def close(self) -> None:
        """Nothing to stop: what the stack created outlives the run on purpose."""

    def cost(self, command: str) -> CostEstimate | None:
        """The cluster's On-Demand price per hour after `run` or `up`; None after the other commands."""
        return self.price() if command in ("run", "up") else None

    def cost_line(self) -> str:
        """What `price` says the instances cost per hour while they stay up, or why that is unknown."""
        est = self.price()
        if est.usd_per_hour is None:
            return f"cost per hour unknown: {est.note}"
        nodes = ", ".join(f"{n} x {t}" for t, n, _ in est.items)
        return f"{est.text()} On-Demand for {nodes}"

    def price(self, gpu_nodes: int | None = None) -> CostEstimate:
        """On-Demand USD per hour of ``gpu_nodes`` GPU nodes (default: the stack's count) and the system nodes; the
        EKS control plane and the NAT gateway come on top (docs/cost-and-capacity.md, "What it costs")."""
        if self.deps.pricing is None:
            return CostEstimate(None, (), "no Pricing API client")
        try:
            pricing = self.deps.pricing()
        except Exception as e:  # noqa: BLE001 - "unknown" is the promised answer when pricing is unreachable
            return CostEstimate(None, (), f"Pricing API: {type(e).__name__}")
        cfg = self.cfg
        gpu = cfg.gpu_nodes.node_count if gpu_nodes is None else gpu_nodes
        groups = [(cfg.gpu_nodes.instance_type, gpu), (cfg.system_nodes.instance_type, cfg.system_nodes.count)]
        return estimate(pricing, cfg.region, groups)


def load_config(stack: str, project_dir: Path) -> StackConfig:
    """The validated stack config; its StackConfigError becomes a one-line bad-input error."""
    try:
        return load_stack(stack, project_dir)
    except StackConfigError as e:
        raise DriverError(str(e), exit_code=2) from None


# Whether a command reads or changes the stack through the Automation API (and so the pulumi CLI): "always"
# (preview, up, destroy, run), "without-kubeconfig" (a --kubeconfig replaces the stack's output), "never" (preflight).
PulumiUse = Literal["always", "without-kubeconfig", "never"]


def open_stack(
    stack: str,
    *,
    project_dir: Path,
    ui: Ui | None = None,
    kubeconfig: Path | None = None,
    pulumi: PulumiUse = "without-kubeconfig",
    deps: AwsDeps | None = None,
    run_id: str | None = None,
    **options: Any,
) -> AwsTarget:
    """The AWS target of `stack`: its validated config and the real outside world (or `deps`); `options` are AwsRun's
    fields and the target's on_line, on_progress, on_note (over ``ui``'s). A missing pulumi CLI is reported before any
    step: preflight passing and then `preview` failing would waste the user's time."""
    cfg = load_config(stack, project_dir)
    if kubeconfig is not None:
        read_kubeconfig_file(kubeconfig)  # a missing or broken --kubeconfig is refused before any client exists
    if deps is None:
        needed = pulumi == "always" or (pulumi == "without-kubeconfig" and kubeconfig is None)
        if needed and shutil.which("pulumi") is None:
            instead = " (or pass --kubeconfig PATH)" if pulumi == "without-kubeconfig" else ""
            raise DriverError(PULUMI_MISSING + instead, exit_code=2)
        deps = AwsDeps.real(cfg, project_dir)
    said = {k: options.pop(k) for k in ("on_line", "on_progress", "on_note") if k in options}
    if ui is not None:
        said = {"on_line": ui.log, "on_progress": ui.progress, "on_note": ui.note, **said}
    run = AwsRun(cfg, run_id or new_run_id(), kubeconfig_path=kubeconfig, **options)
    return AwsTarget(run, deps, notes=list(cfg.warnings), **said)  # ConfigWarnings open the report's notes
