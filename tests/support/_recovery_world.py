"""The lost-node world (tests/automation/test_recovery_worlds.py, test_run_controller_logs.py): the followed-job
world of _attach_world.py whose job fails at step LOST_AT as a GPU node stops posting status, and where EKS node
repair brings a replacement on the same fake clock (EKS user guide, node-health: "node auto repair"; how long the
repair waits before it acts is not stated per condition there: REPAIR_S is illustrative). A new node's EFA counters
start from boot."""

from __future__ import annotations

import copy
import json

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
from _attach_world import World, outputs
from _aws_run import KubeWithExec
from _pod_requests import PodAction, pod_request
from _ray_jobs import JobScript, train_lines
from _worlds import GPU_NODE, node

from automation import cli, scaling, steps
from automation.commands import run_steps
from automation.kube import ExecResult
from automation.pipeline import StepResult
from automation.targets import aws
from automation.targets.aws import RESUMED

STEPS = 1000
LOST_AT = 400
STEP_S = 20.0
REPAIR_S = 12 * 60  # from the node's loss to its replacement Ready with the worker Running
NEW_NODE = "ip-10-30-1-99.us-west-2.compute.internal"
# Ray's lines when a worker's node dies mid-step (a traceback, as a real job log has one: the cluster's evidence,
# not the log's, makes it infrastructure).
NODE_DIED = (
    "Traceback (most recent call last):",
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
)
APP_ERROR = ("Traceback (most recent call last):", '  File "workloads/loop.py", line 212', "KeyError: 'input_ids'")


class LostNodeWorld(World):
    """The job of 1,000 steps fails at step ``LOST_AT`` as GPU_NODE goes NotReady (``losses`` times, each attempt;
    the resumed job starts at the step after its last checkpoint); ``app_error``: it fails with a traceback and
    the cluster stays healthy."""

    def __init__(self, eks, losses: int = 1, app_error: bool = False) -> None:
        super().__init__(eks)
        self.objects = helpers.load_k8s()
        self.losses, self.app_error = losses, app_error
        self.lost_at: float | None = None
        self.jobs.script = self.script
        self.boot = copy.deepcopy(self.efa.tree[GPU_NODE])
        self.current = GPU_NODE  # the GPU node a loss takes
        self.lost_by: list[str] = []  # the jobs whose node was lost
        self.set_aside: list[tuple[str, int]] = []  # (worker pod, jobs submitted by then)
        self.doc: dict = {}  # the command's JSON document, once `_run` ran it

    def script(self, job_id: str) -> JobScript:
        resumed = RESUMED in job_id
        first = LOST_AT + 1 if resumed else 1
        lines = tuple(line for line in train_lines(STEPS) if _step(line, first))
        attempt = sum(RESUMED in j for j in self.jobs.jobs) + (1 if resumed else 0)
        if self.app_error or attempt < self.losses:
            cut = lines[: 2 * (LOST_AT - first + 1)]
            tail = APP_ERROR if self.app_error else NODE_DIED
            return JobScript(cut + tail, run_s=len(cut) / 2 * STEP_S, ends="FAILED", message="Job entrypoint failed")
        return JobScript(lines, run_s=len(lines) / 2 * STEP_S)

    def exec(self, pod, namespace, command, **kw) -> ExecResult:
        request = pod_request(list(command))
        if request is not None and request.action is PodAction.SET_ASIDE:
            self.set_aside.append((pod, len(self.jobs.jobs)))
            return ExecResult(0, "", "")
        return super().exec(pod, namespace, command, **kw)

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        now = self.clock()
        for job in self.jobs.jobs.values():
            failing = job.script.ends == "FAILED" and not self.app_error
            if failing and now >= job.ended_at and job.job_id not in self.lost_by:
                self.lost_by.append(job.job_id)
                self.lose_node()
        if self.lost_at is not None and now >= self.lost_at + REPAIR_S:
            self.replace_node()

    def lose_node(self) -> None:
        """The node under the first worker stops posting status (as _worlds.node_not_ready does to GPU_NODE)."""
        self.lost_at = self.clock()
        for c in node(self.objects, self.current)["status"]["conditions"]:
            if c["type"] == "Ready":
                c.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")

    def replace_node(self) -> None:
        """The NotReady node gone, a new one Ready in its place with the worker and the counter reader on it."""
        old, new = self.current, NEW_NODE.replace("-99.", f"-{99 + len(self.lost_by)}.")
        fresh = copy.deepcopy(node(self.objects, old))
        fresh["metadata"]["name"] = fresh["metadata"]["labels"]["kubernetes.io/hostname"] = new
        for c in fresh["status"]["conditions"]:
            if c["type"] == "Ready":
                c.update(status="True", reason="KubeletReady", message="kubelet is posting ready status")
        nodes = self.objects["nodes"]["items"]
        self.objects["nodes"]["items"] = [n for n in nodes if n["metadata"]["name"] != old] + [fresh]
        for pod in self.objects["pods"]["items"]:
            if pod["spec"].get("nodeName") == old:
                pod["spec"]["nodeName"] = new
        for table in (self.efa.pods, self.efa.readers):
            for pod, on in table.items():
                if on == old:
                    table[pod] = new
        self.efa.tree.pop(old)
        self.efa.tree[new] = copy.deepcopy(self.boot)  # a new node: its counters count from its boot
        self.current, self.lost_at = new, None


def _step(line: str, first: int) -> bool:
    """Whether a line of the whole job belongs to a job that starts at step ``first``: its step lines and the
    heartbeats between them from that step on (a resumed job does not replay the steps before its checkpoint)."""
    if line.startswith("[train] step "):
        return int(line.split()[2].split("/")[0]) >= first
    return " heartbeat " not in line or int(line.split(" heartbeat ")[1].split()[0]) >= first


FORWARDED = ("yes", "max_recoveries", "recovery_minutes")  # the command's options the world's target takes


def run_on(world: LostNodeWorld, monkeypatch, argv: list[str], forwarded: tuple[str, ...] = FORWARDED) -> int:
    """`python -m automation ARGV --json` on ``world``, its target given the command's ``forwarded`` options: the
    exit code."""
    with helpers.FakeKubeApi(world.objects) as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))

        def open_stack(name, *, run_id=None, **options):
            deps = aws.AwsDeps(
                client=world.client,
                stack=lambda: stack,
                kube=lambda kc: KubeWithExec(kc, world.exec),
                clock=scaling.Clock(now=world.clock, sleep=world.sleep),
                interactive=lambda: False,
            )
            known = {k: options[k] for k in forwarded if k in options}
            return aws.AwsTarget(
                aws.AwsRun(helpers.stack_config(), run_id or "r1", **known), deps, on_note=world.notes.append
            )

        monkeypatch.setattr(aws, "open_stack", open_stack)
        monkeypatch.setattr(aws.AwsTarget, "price", lambda self, n=None: aws.CostEstimate(9.5, (), "stood in"))
        for name in ("preflight", "preview", "up", "verify"):
            monkeypatch.setitem(steps.STEPS, name, lambda t, p, name=name: StepResult(name, "pass", "stood in"))

        def run_files(target: object, root: object, doc: dict) -> dict:
            world.reports.append(doc)
            return {}

        monkeypatch.setattr(run_steps, "run_files", run_files)
        return cli.main([*argv, "--json"])


def _run(world: LostNodeWorld, monkeypatch, capsys, *extra: str) -> int:
    rc = run_on(world, monkeypatch, ["run", "--stack", "us-west-2", "--yes", *extra])
    world.doc = json.loads(capsys.readouterr().out)
    return rc
