"""Scale-to-zero between runs: the GPU node group's desired size, set by the driver (`run`, `scale`).

The Pulumi program leaves ``scalingConfig.desiredSize`` to the driver (infra/manifests.py,
``DRIVER_OWNED_PROPERTIES``), ``minSize`` 0, so `up` neither fights nor undoes a scale-down. A command that needs
the GPU nodes scales the group to ``gpuNodeCount`` (`scale-up` step); when it ends (pass, fail or Ctrl-C) its run
controller scales it to ``gpuIdleNodes`` unless ``--keep-nodes``.

EKS's UpdateNodegroupConfig takes a desiredSize within minSize..maxSize, and a group still CREATING or UPDATING
answers ResourceInUseException
(https://docs.aws.amazon.com/eks/latest/APIReference/API_UpdateNodegroupConfig.html#API_UpdateNodegroupConfig_Errors);
the API is eventually consistent. So ``set_desired`` waits (bounded, shown) for the group to leave CREATING/UPDATING,
retries a refusal with backoff, and waits until DescribeNodegroup reports the new size.

Nothing scales down under a job: the Ray job API on the head is asked first (``head_jobs``); a PENDING or RUNNING
job, or a head that cannot be asked, keeps the nodes unless forced. While a run starts (up to about 53 minutes
before the job exists) it holds a ``Lease`` the idle guard honours (infra/idle_guard_script.py); a lease not
renewed expires, so a driver that died cannot keep the GPUs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from automation.aws_clients import ApiJson, Eks
from automation.errors import DriverError
from automation.kube import ConfigMaps, RayClusterPods
from automation.pipeline import SYSTEM_CLOCK, Clock, Prior, Scaled, StepResult
from automation.ray_head import HEAD_JOB_SERVER
from automation.start_phases import ready_condition
from automation.targets.aws import AwsTarget
from infra.config import GpuNodesConfig
from infra.idle_guard_script import ACTIVE, LEASE_KEY, RECORD_KEY, lease_doc
from infra.names import GPU_NODE_SELECTOR, IDLE_GUARD_RECORD

NODE_WAIT_S = 1200.0  # a GPU node from a scaled-up group takes minutes to join; 20 min before giving up
POLL_S = 10.0
# A managed node group update (a size change, a version or launch template update) keeps the group UPDATING
# for minutes; 20 minutes bounds the wait before the driver gives up and says how to look.
BUSY_WAIT_S = 1200.0
BUSY = ("CREATING", "UPDATING")
BROKEN = ("DELETING", "CREATE_FAILED", "DELETE_FAILED")  # no update will be taken: say so, do not wait
BACKOFF_S = (5.0, 10.0, 20.0, 40.0, 60.0)  # after a ResourceInUseException; the last repeats
LEASE_S = 20 * 60.0  # a lease not renewed for 20 minutes is ignored by the guard
RENEW_AFTER_S = 60.0  # a renewal writes the record at most once a minute
_T = TypeVar("_T")


@dataclass(frozen=True)
class NodeGroupRef:
    cluster: str
    nodegroup: str


def nodegroup_ref(outputs: dict, stack: str) -> NodeGroupRef:
    """The GPU node group named by the stack outputs; DriverError (exit 2) when the stack has none."""
    cluster, nodegroup = outputs.get("cluster_name"), outputs.get("nodegroup_name")
    if not cluster or not nodegroup:
        raise DriverError(
            f"stack {stack} exports no cluster_name/nodegroup_name: nothing is up; run "
            f"`python -m automation up --stack {stack}`",
            exit_code=2,
        )
    return NodeGroupRef(str(cluster), str(nodegroup))


def describe(eks: Eks, ref: NodeGroupRef) -> ApiJson:
    return eks.describe_nodegroup(clusterName=ref.cluster, nodegroupName=ref.nodegroup)["nodegroup"]


def sizes(eks: Eks, ref: NodeGroupRef) -> dict[str, int]:
    return dict(describe(eks, ref)["scalingConfig"])


# ---- the desired size, once EKS will take it --------------------------------------------------------------
@dataclass(frozen=True)
class EksWait:
    """One bounded wait on a node group: every poll said, the whole within ``timeout_s`` of ``started``."""

    eks: Eks
    ref: NodeGroupRef
    clock: Clock
    on_progress: Callable[[str], None]
    started: float
    timeout_s: float

    def waited(self) -> float:
        return self.clock.now() - self.started

    def _poll(self, late: str, waiting: str) -> None:
        """One poll of the waits below: DriverError ``late`` past the bound, else ``waiting`` said and a sleep."""
        if self.waited() >= self.timeout_s:
            raise DriverError(late)
        self.on_progress(f"{waiting} ({self.waited():.0f} s of {self.timeout_s:.0f})")
        self.clock.sleep(POLL_S)

    def not_busy(self, first: ApiJson | None = None) -> tuple[ApiJson, str]:
        """The group (``first``: as just described) once not BUSY, and the status it waited out ('' if none);
        DriverError when it is BROKEN or still busy past the bound."""
        ref, waited_out = self.ref, ""
        while True:
            group, first = first or describe(self.eks, ref), None
            status = str(group.get("status") or "ACTIVE")
            if status in BROKEN:
                raise DriverError(
                    f"node group {ref.nodegroup} is {status}: EKS takes no size change; `aws eks describe-nodegroup "
                    f"--cluster-name {ref.cluster} --nodegroup-name {ref.nodegroup}` shows its health"
                )
            if status not in BUSY:
                return group, waited_out
            waited_out = status
            self._poll(
                f"node group {ref.nodegroup} is still {status} after {self.waited():.0f} s: an update of it is "
                f"running; try again once `aws eks describe-nodegroup --cluster-name {ref.cluster} "
                f"--nodegroup-name {ref.nodegroup}` says ACTIVE",
                f"node group {ref.nodegroup} is {status}: waiting to scale it",
            )

    def update(self, desired: int) -> str:
        """UpdateNodegroupConfig, retried while EKS answers ResourceInUseException (the group went busy between
        the describe and the call); what it waited out ('' if nothing)."""
        waited_out, attempt = "", 0
        while True:
            try:
                self.eks.update_nodegroup_config(
                    clusterName=self.ref.cluster,
                    nodegroupName=self.ref.nodegroup,
                    scalingConfig={"desiredSize": desired},
                )
                return waited_out
            except ClientError as e:
                code = e.response.get("Error", {}).get("Code", "")
                if code != "ResourceInUseException" or self.waited() >= self.timeout_s:
                    raise
                pause = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
                attempt += 1
                self.on_progress(f"EKS answered {code} for node group {self.ref.nodegroup}: again in {pause:.0f} s")
                self.clock.sleep(pause)
                waited_out = self.not_busy()[1] or code

    def reported(self, desired: int) -> None:
        """Until DescribeNodegroup reports ``desired``; DriverError past the bound."""
        while (reported := sizes(self.eks, self.ref)["desiredSize"]) != desired:
            self._poll(
                f"EKS took the new size {desired} of node group {self.ref.nodegroup} but still reports "
                f"{reported} after {self.waited():.0f} s: `python -m automation status` shows the size it reports",
                f"waiting for EKS to report node group {self.ref.nodegroup} at {desired}, says {reported}",
            )

    def gone(self) -> None:
        """Until DescribeNodegroup answers ResourceNotFoundException; DriverError past the bound."""
        while True:
            try:
                status = describe(self.eks, self.ref).get("status")
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                    return
                raise
            self._poll(
                f"node group {self.ref.nodegroup} is still {status} after {self.waited():.0f} s",
                f"node group {self.ref.nodegroup} is {status}: waiting for EKS to delete it",
            )


def set_desired(
    eks: Eks,
    ref: NodeGroupRef,
    desired: int,
    on_progress: Callable[[str], None] = lambda s: None,
    clock: Clock = SYSTEM_CLOCK,
    timeout_s: float = BUSY_WAIT_S,
) -> Scaled:
    """The desired size at ``desired`` (no call when it already is), by EksWait's steps within ``timeout_s``;
    DriverError naming the fix on refusal."""
    wait = EksWait(eks, ref, clock, on_progress, clock.now(), timeout_s)
    try:
        first = describe(eks, ref)
        now = first["scalingConfig"]
        if not now["minSize"] <= desired <= now["maxSize"]:
            raise DriverError(
                f"--gpu-nodes {desired} is outside node group {ref.nodegroup}'s {now['minSize']}..{now['maxSize']}: "
                f"pass a count within it (the maximum is {GpuNodesConfig.keyname('node_count')}; "
                "`up` applies a new one)",
                exit_code=2,
            )
        if now["desiredSize"] == desired:
            return Scaled(ref.nodegroup, desired, desired)
        group, busy = wait.not_busy(first)
        before = int(group["scalingConfig"]["desiredSize"])
        accepted = wait.started
        if before != desired:
            busy = wait.update(desired) or busy
            accepted = clock.now()
            wait.reported(desired)
    except ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        raise DriverError(f"EKS refused to scale node group {ref.nodegroup} to {desired}: {code}: {e}") from None
    except BotoCoreError as e:
        raise DriverError(f"EKS could not be reached to scale node group {ref.nodegroup}: {e}") from None
    waited = round(accepted - wait.started, 1) if busy else 0.0  # until EKS took the change
    return Scaled(ref.nodegroup, before, desired, waited=waited, waited_for=busy)


def live_desired_size(eks: Eks, outputs: dict, stack: str) -> int | None:
    """The GPU node group's desired size as EKS reports it now (for `up`: infra/efa_nodegroup.py
    ``driver_scaling``); None when the stack has no node group yet. DriverError when EKS cannot be asked: an
    `up` that guessed could start GPU nodes."""
    if not outputs.get("nodegroup_name"):
        return None
    ref = nodegroup_ref(outputs, stack)
    try:
        return int(sizes(eks, ref)["desiredSize"])
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return None
        raise DriverError(f"EKS refused to describe node group {ref.nodegroup} before `up`: {e}") from None
    except BotoCoreError as e:
        raise DriverError(f"EKS could not be reached to read node group {ref.nodegroup} before `up`: {e}") from None


# ---- the nodes ---------------------------------------------------------------------------------------------
def ready_count(nodes: list[dict]) -> int:
    return sum(ready_condition(n) is not None for n in nodes)


def wait_ready(
    list_nodes: Callable[[], list[dict]],
    want: int,
    timeout_s: float = NODE_WAIT_S,
    on_progress: Callable[[str], None] = lambda s: None,
    clock: Clock = SYSTEM_CLOCK,
) -> float:
    """Seconds until ``want`` GPU nodes are Ready; DriverError when ``timeout_s`` passes first."""
    start = clock.now()
    while True:
        ready = ready_count(list_nodes())
        waited = clock.now() - start
        if ready >= want:
            return waited
        if waited >= timeout_s:
            raise DriverError(
                f"{ready} of {want} GPU nodes Ready after {waited:.0f} s: the node group may lack capacity in its "
                "AZ; `python -m automation status --stack STACK` and `python -m automation capacity` say more"
            )
        on_progress(f"waiting for GPU nodes: {ready} of {want} Ready after {waited:.0f} s")
        clock.sleep(POLL_S)


def ready_after(nodes: list[dict], started: datetime) -> tuple[tuple[str, float], ...]:
    """Each Ready node's seconds from ``started`` to its Ready condition's lastTransitionTime (nodes that were
    Ready before ``started`` are left out: they did not come up for this scale)."""
    ready = ((n["metadata"]["name"], c.get("lastTransitionTime")) for n in nodes if (c := ready_condition(n)))
    took = ((name, (datetime.fromisoformat(at) - started).total_seconds()) for name, at in ready if at)
    return tuple(sorted((name, round(s, 1)) for name, s in took if s >= 0))


def scale_up_for_run(
    eks: Eks,
    ref: NodeGroupRef,
    count: int,
    list_nodes: Callable[[], list[dict]],
    on_progress: Callable[[str], None],
    clock: Clock = SYSTEM_CLOCK,
    timeout_s: float = NODE_WAIT_S,
) -> Scaled:
    """The group at ``count`` and its nodes Ready, with how long they took (all, each) and EKS kept it busy."""
    started = datetime.fromtimestamp(clock.now(), UTC)
    scaled = set_desired(eks, ref, count, on_progress, clock)
    if not scaled.changed and ready_count(list_nodes()) >= count:
        return scaled
    on_progress(f"scaling GPU node group {ref.nodegroup} from {scaled.before} to {count} node(s)")
    seconds = wait_ready(list_nodes, count, timeout_s, on_progress, clock)
    per_node = ready_after(list_nodes(), started)
    return Scaled(ref.nodegroup, scaled.before, count, round(seconds, 1), per_node, scaled.waited, scaled.waited_for)


# ---- the Ray jobs on the nodes -----------------------------------------------------------------------------
# `ray job list` (Ray 2.58, ray/dashboard/modules/job/cli.py, `def list`) prints `pprint.pformat` of the
# JobDetails objects and has no JSON output, so the head's own job server is read instead: GET /api/jobs/ (the
# REST API behind JobSubmissionClient.list_jobs, ray/dashboard/modules/job/sdk.py), as the idle guard reads it.
JOBS_SNIPPET = (
    "import json, urllib.request; "
    f"print(json.dumps(json.load(urllib.request.urlopen('{HEAD_JOB_SERVER}/api/jobs/', timeout=20))))"
)


def head_jobs(pods: RayClusterPods) -> list[dict]:
    """The Ray job list, asked by exec into the head pod; DriverError when it cannot be asked."""
    head = pods.head_pod()
    res = pods.kube.exec(head, pods.namespace, ["python", "-c", JOBS_SNIPPET], timeout_s=60)
    try:
        jobs = json.loads(res.stdout)
    except ValueError:
        jobs = None
    if res.rc != 0 or not isinstance(jobs, list):
        raise DriverError(
            f"the job server in {pods.namespace}/{head} did not answer (rc {res.rc}): "
            f"{(res.stderr or res.stdout).strip()[-300:]}"
        )
    return jobs


def active_job(jobs: list[dict]) -> str:
    active = (j for j in jobs if j.get("status") in ACTIVE)
    return next((f"Ray job {j.get('submission_id') or j.get('job_id')} is {j['status']}" for j in active), "")


def job_keeps_nodes(target: AwsTarget) -> str:
    """Why the GPU nodes must stay ('' when nothing holds them): a PENDING or RUNNING job, or a job API that
    cannot be asked, which may hide one."""
    try:
        return active_job(head_jobs(target.ray_pods()))
    except DriverError as e:
        return f"the Ray job API could not be asked, so a job may be running ({e})"


# ---- the idle guard's lease --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lease:
    """`run`'s claim on the GPU nodes while it starts: ``lease_doc`` under LEASE_KEY of the idle guard's record,
    honoured until its ``until`` (infra/idle_guard_script.py ``lease_holds``); a long wait renews it. Without the
    guard (gpuIdleMinutes 0) or a cluster to reach, the lease does nothing."""

    kube: ConfigMaps | None
    namespace: str
    run_id: str
    clock: Clock = SYSTEM_CLOCK

    @classmethod
    def of(cls, target: AwsTarget) -> Lease:
        kube = None
        if target.cfg.gpu_nodes.idle_minutes > 0 and target.outputs():
            with suppress(DriverError):
                kube = target.kube()
        return cls(kube, target.cfg.ray.namespace if kube else "", target.run_id, target.deps.clock)

    def held(self) -> dict | None:
        """The lease in the record now (None: none, or unreadable)."""
        if self.kube is None:
            return None
        try:
            data = self.kube.get_configmap(self.namespace, IDLE_GUARD_RECORD).get("data") or {}
            doc = json.loads(data.get(LEASE_KEY) or "null")
        except (DriverError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def _write(self, value: str | None) -> bool:
        if self.kube is None:
            return False
        try:
            self.kube.patch_configmap(self.namespace, IDLE_GUARD_RECORD, {"data": {LEASE_KEY: value}})
        except DriverError:
            return False  # the guard then decides by the job API and the node group's activity alone
        return True

    def renew(self, what: str = "starting") -> bool:
        """Write (or extend) the lease to now + LEASE_S unless this run's lease was written under a minute ago."""
        now = self.clock.now()
        held = self.held()
        if held and held.get("run") == self.run_id and float(held.get("until", 0)) - now > LEASE_S - RENEW_AFTER_S:
            return True
        return self._write(json.dumps(lease_doc(self.run_id, what, now + LEASE_S), sort_keys=True))

    def release(self) -> bool:
        return self._write(None)  # a JSON merge patch with null deletes the key

    def renewing(self, act: Callable[[_T], None]) -> Callable[[_T], None]:
        """``act`` (a wait's progress or sleep callback) that renews the lease first: every poll keeps the nodes."""

        def renewed(arg: _T) -> None:
            self.renew()
            act(arg)

        return renewed


# ---- run's start and end -----------------------------------------------------------------------------------
def scale_up(target: AwsTarget, prior: Prior) -> StepResult:
    """The `scale-up` step: the price asked about when the group must grow, the idle guard's lease taken (held by
    the target until the run's end), then the group at gpuNodeCount and its nodes Ready. Skipped with --kubeconfig:
    the node group's name comes from the stack's outputs."""
    outputs = target.outputs()
    if not outputs:
        return StepResult("scale-up", "skip", "the GPU node group is not known with --kubeconfig: not scaled")
    ref, count = nodegroup_ref(outputs, target.cfg.stack), target.cfg.gpu_nodes.node_count
    eks = target.deps.client("eks")
    now = sizes(eks, ref)["desiredSize"]
    if now < count:
        target.go_ahead(
            f"scaling GPU node group {ref.nodegroup} of stack {target.cfg.stack} from {now} to {count} node(s) "
            f"costs money ({count} x {target.cfg.gpu_nodes.instance_type}: {target.price(count).text()} On-Demand with "
            "the system nodes). Go ahead?"
        )
    lease = target.handles.lease = Lease.of(target)
    if lease.kube is not None and not lease.renew():
        target.note("the idle guard's lease could not be written: it may scale the nodes down during a long start")
    kube = target.kube()
    listed = lambda: kube.list_nodes(GPU_NODE_SELECTOR)  # noqa: E731
    scaled = scale_up_for_run(eks, ref, count, listed, lease.renewing(target.on_progress), lease.clock)
    return StepResult("scale-up", "pass", scaled.text(), data=scaled)


def after_run(target: AwsTarget, keep_nodes: bool) -> str:
    """When `run` on AWS ends: the lease released and the GPU nodes at gpuIdleNodes unless ``keep_nodes`` or a job
    holds them; the line saying what happened and what runs now."""
    stack, idle = target.cfg.stack, target.cfg.gpu_nodes.idle_nodes
    by_hand = f"`python -m automation scale --stack {stack} --gpu-nodes {idle}`"
    group = "the GPU node group"  # named once the stack's outputs say which, so a failure names what bills
    try:
        if keep_nodes:
            return (
                f"GPU nodes kept (--keep-nodes): they cost money until {by_hand} (or the idle guard, after "
                f"{GpuNodesConfig.keyname('idle_minutes')} {target.cfg.gpu_nodes.idle_minutes})"
            )
        outputs = target.outputs()
        if not outputs:
            return f"GPU nodes not scaled: no stack outputs were read (--kubeconfig); they cost money until {by_hand}"
        eks, ref = target.deps.client("eks"), nodegroup_ref(outputs, stack)
        group = f"GPU node group {ref.nodegroup}"
        now = sizes(eks, ref)["desiredSize"]
        if now > idle and (why := job_keeps_nodes(target)):
            return (
                f"GPU nodes kept at {now}: {why}; they cost money until the job ends and {by_hand} (add --force if "
                f"no job runs), or the idle guard scales them down {GpuNodesConfig.keyname('idle_minutes')} "
                f"{target.cfg.gpu_nodes.idle_minutes} after the last job"
            )
        scaled = set_desired(eks, ref, idle, target.on_progress, target.deps.clock)
    except Exception as e:  # noqa: BLE001 - the clean-up of any exit must not hide the run's own failure
        why = str(e) if isinstance(e, (DriverError, ClientError, BotoCoreError)) else f"{type(e).__name__}: {e}"
        return f"GPU nodes NOT scaled down ({why}): the nodes of {group} that run cost money until {by_hand}"
    finally:
        with suppress(Exception):  # an unreleased lease expires on its own (LEASE_S)
            Lease.of(target).release()
    keep = f"pass --keep-nodes to keep them, `python -m automation scale --stack {stack} --gpu-nodes N` by hand"
    return f"{scaled.text()} ({GpuNodesConfig.keyname('idle_nodes')} {idle}); {running_line(target, idle)}; {keep}"


def running_line(target: AwsTarget, gpu_nodes: int) -> str:
    gpu, system, cost = target.cfg.gpu_nodes, target.cfg.system_nodes, target.price(gpu_nodes).text()
    what = f"{gpu_nodes} x {gpu.instance_type} and {system.count} x {system.instance_type}"
    return f"running now: {what}, {cost} On-Demand (plus the EKS control plane and the NAT gateway)"


def now_running(target: AwsTarget) -> dict[str, object]:
    """What runs now and its On-Demand cost per hour (`status`): the GPU node group's desired size from EKS."""
    outputs = target.outputs()
    if not outputs.get("nodegroup_name"):
        return {"gpu_nodes": None, "note": "the GPU node group's name comes from the stack outputs (not read)"}
    try:
        gpu = sizes(target.deps.client("eks"), nodegroup_ref(outputs, target.cfg.stack))["desiredSize"]
    except (ClientError, BotoCoreError, DriverError) as e:
        return {"gpu_nodes": None, "note": f"EKS: {e}"}
    return {"gpu_nodes": gpu, "text": running_line(target, gpu), "cost": target.price(gpu).to_dict()}


def guard_record(kube: ConfigMaps, namespace: str) -> dict | str:
    """The idle guard's last decision (its record ConfigMap), or why there is none."""
    try:
        data = kube.get_configmap(namespace, IDLE_GUARD_RECORD).get("data") or {}
    except DriverError as e:
        return f"no record ({e}): {GpuNodesConfig.keyname('idle_minutes')} 0 renders no guard"
    try:
        return json.loads(data.get(RECORD_KEY, "{}"))
    except ValueError:
        return f"the record {namespace}/{IDLE_GUARD_RECORD} is not JSON: {data.get(RECORD_KEY)!r}"
