"""Test doubles for the driver: a fake Kubernetes API server (serving recorded JSON to the real
kubernetes client), a scripted pod exec, and a stack with the Pulumi Automation API's interface."""

from __future__ import annotations

import base64
import copy
import io
import json
import re
import tarfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, urlparse

from _pod_requests import PodAction, PodRequest
from conftest import REPO, quiet_stack

from automation.kube import ExecResult, KubeApi, PodExec
from automation.pulumi_stack import StackLike
from automation.targets.aws import READER_SYSFS_ROOT
from infra.names import APP_LABEL, EFA_COUNTER_READER

if TYPE_CHECKING:
    from _ray_jobs import FakeRayJobs

K8S_FIXTURES = REPO / "tests" / "fixtures" / "k8s"
EFA_FIXTURES = REPO / "tests" / "fixtures" / "efa"


class KubeWithExec(KubeApi):
    """The driver's Kubernetes client over a fake API server, its pod exec answered by ``pod_exec``."""

    def __init__(self, kubeconfig: dict, pod_exec: PodExec) -> None:
        super().__init__(kubeconfig)
        self.exec = pod_exec  # type: ignore[method-assign]


def fi_info_answer(devices: bool = True, fixture: str | None = "fi_info_efa.txt") -> ExecResult:
    """What verify's fi_info script prints in a worker pod: the device line, then `fi_info -p efa`."""
    head = f"EFA_DEVICES {'present' if devices else 'none'}\n"
    if fixture is None:
        return ExecResult(0, head + "FI_INFO missing\n", "")
    text = (EFA_FIXTURES / fixture).read_text()
    rc = 0 if "FI_EP_RDM" in text else 61
    return ExecResult(0, f"{head}{text}FI_INFO_RC {rc}\n", "")


def load_k8s(directory: Path = K8S_FIXTURES) -> dict[str, Any]:
    """A fresh, mutable copy of every recorded object list in `directory`, by file stem."""
    return {p.stem: json.loads(p.read_text()) for p in directory.glob("*.json")}


def _matches(obj: dict, selector: str) -> bool:
    labels = obj.get("metadata", {}).get("labels", {})
    for term in filter(None, selector.split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True


class FakeKubeApi:
    """An HTTP server answering the few API paths the driver reads, from `self.objects`."""

    def __init__(self, objects: dict[str, Any] | None = None):
        self.objects = objects if objects is not None else load_k8s()
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep pytest output clean
                pass

            def do_GET(self):
                outer.requests.append(self.path)
                self._answer(*outer.route(self.path))

            def do_PATCH(self):
                outer.requests.append(f"PATCH {self.path}")
                n = int(self.headers.get("Content-Length") or 0)
                patch = json.loads(self.rfile.read(n)) if n else {}
                self._answer(*outer.patch(self.path, self.headers.get("Content-Type", ""), patch))

            def _answer(self, status: int, body: Any) -> None:
                text = isinstance(body, str)
                data = body.encode() if text else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if text else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # serve_forever checks for shutdown every poll_interval (0.5 s by default): each test's __exit__ waited it.
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def route(self, path: str) -> tuple[int, Any]:
        u = urlparse(path)
        sel = parse_qs(u.query).get("labelSelector", [""])[0]

        def listed(name: str, namespace: str | None = None) -> tuple[int, Any]:
            lst = copy.deepcopy(self.objects[name])
            lst["items"] = [
                o for o in lst["items"] if _matches(o, sel) and namespace in (None, o["metadata"].get("namespace"))
            ]
            return 200, lst

        if u.path == "/api/v1/nodes":
            return listed("nodes")
        if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", u.path):
            return listed("pods", m.group(1))
        if u.path == "/api/v1/pods":
            return listed("pods")
        if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/events", u.path):
            return listed("events", m.group(1))
        if u.path == "/apis/apps/v1/daemonsets":
            return listed("daemonsets")
        if u.path == "/apis/apps/v1/deployments":
            return listed("deployments")
        if m := re.fullmatch(r"/apis/ray.io/v1/namespaces/([^/]+)/rayclusters/([^/]+)", u.path):
            rc = self.objects["raycluster"]
            if rc["metadata"]["namespace"] == m.group(1) and rc["metadata"]["name"] == m.group(2):
                return 200, rc
        if (m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/configmaps/([^/]+)", u.path)) and (
            cm := self._cm(*m.groups())
        ):
            return 200, cm
        if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/log", u.path):
            # objects["logs"]: {"<namespace>/<pod>/<container>": "text"}; tailLines as the API applies it
            container = parse_qs(u.query).get("container", [""])[0]
            text = self.objects.get("logs", {}).get(f"{m.group(1)}/{m.group(2)}/{container}")
            if text is not None:
                tail = int(parse_qs(u.query).get("tailLines", ["0"])[0])
                return 200, "".join(text.splitlines(keepends=True)[-tail:] if tail else text)
        return _not_found(u.path)

    def _cm(self, namespace: str, name: str) -> dict | None:
        """A ConfigMap of objects["configmaps"] (a ConfigMapList), or None."""
        items = self.objects.get("configmaps", {}).get("items", [])
        return next(
            (c for c in items if (c["metadata"].get("namespace"), c["metadata"]["name"]) == (namespace, name)), None
        )

    def patch(self, path: str, content_type: str, patch: dict) -> tuple[int, Any]:
        """A JSON merge patch (RFC 7386: a null removes the key) of a ConfigMap's data or of a node's spec
        (`kubectl cordon`: spec.unschedulable), as the API applies one."""
        if n := re.fullmatch(r"/api/v1/nodes/([^/]+)", urlparse(path).path):
            node = next((o for o in self.objects["nodes"]["items"] if o["metadata"]["name"] == n.group(1)), None)
            if node is None or content_type != "application/merge-patch+json":
                return _not_found(path) if node is None else (415, {"kind": "Status", "code": 415})
            node.setdefault("spec", {}).update(patch.get("spec") or {})
            return 200, node
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/configmaps/([^/]+)", urlparse(path).path)
        cm = self._cm(*m.groups()) if m else None
        if cm is None:
            return _not_found(path)
        if content_type != "application/merge-patch+json":
            return 415, {"kind": "Status", "code": 415, "message": f"unsupported patch type {content_type}"}
        data = cm.setdefault("data", {})
        for k, v in (patch.get("data") or {}).items():
            if v is None:
                data.pop(k, None)
            else:
                data[k] = v
        return 200, cm

    def kubeconfig(self) -> dict:
        return kubeconfig_for(self.url)

    def __enter__(self) -> FakeKubeApi:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _not_found(path: str) -> tuple[int, Any]:
    return 404, {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "NotFound",
        "code": 404,
        "message": f"{path} not found",
    }


def tar_b64(files: dict[str, bytes]) -> str:
    """``files`` (name: bytes) as a base64 .tar.gz: what a pod prints for automation/run_files.py."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return base64.b64encode(buf.getvalue()).decode()


def kubeconfig_for(server: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": {"token": "test-token"}}],
    }


def no_kube(kubeconfig: dict) -> KubeApi:
    """`AwsDeps.kube` for a step that never reaches the cluster's API (destroy, `up`)."""
    raise AssertionError("the step asked for the cluster's Kubernetes API")


@dataclass
class ScriptedExec:
    """Stands in for `kubectl exec`: records each call; `answer(pod, command, stdin)` scripts the result."""

    answer: Callable[[str, list[str], str | None], ExecResult]
    calls: list[tuple[str, str, list[str], str | None]] = field(default_factory=list)
    jobs: FakeRayJobs | None = None  # the head pod's job server behind the exec, where one answers

    def __call__(self, pod, namespace, command, *, stdin=None, on_line=None, timeout_s=600) -> ExecResult:
        self.calls.append((pod, namespace, list(command), stdin))
        res = self.answer(pod, list(command), stdin)
        if on_line:
            for line in res.stdout.splitlines():
                on_line(line)
        return res


class FakeStack:
    """A stack with the Automation API's interface; results are the Automation API's own classes.

    `fail` maps an operation name to the CommandError text it raises; `calls` records the order.
    """

    def __init__(
        self,
        name: str,
        outputs: dict[str, Any] | None = None,
        fail: dict[str, str] | None = None,
        changes: dict[str, int] | None = None,
        events: list[dict] | None = None,
    ):
        self.name = name
        self._outputs = outputs or {}
        self.fail = fail or {}
        self.changes = changes if changes is not None else {"create": 42}
        self.events = events or []
        self.calls: list[str] = []
        self.config: dict[str, Any] = {}

    def _maybe_fail(self, op: str, on_event) -> None:
        from pulumi.automation import CommandError, EngineEvent
        from pulumi.automation._cmd import CommandResult

        self.calls.append(op)
        for ev in self.events:
            if on_event:
                on_event(EngineEvent.from_json(ev))
        if op in self.fail:
            raise CommandError(CommandResult(stdout="", stderr=self.fail[op], code=255))

    def _summary(self, kind: str):
        from pulumi.automation import OpType, UpdateSummary

        return UpdateSummary(
            kind=kind,
            start_time=datetime.now(),
            message="",
            environment={},
            config={},
            result="succeeded",
            end_time=datetime.now(),
            resource_changes=cast("dict[OpType, int]", dict(self.changes)),  # OpType is a str Enum
        )

    def preview(self, on_event=None):
        from pulumi.automation import PreviewResult

        self._maybe_fail("preview", on_event)
        return PreviewResult(stdout="", stderr="", change_summary=dict(self.changes))

    def up(self, on_event=None):
        from pulumi.automation import OutputValue, UpResult

        self._maybe_fail("up", on_event)
        outs = {k: OutputValue(value=v, secret=(k == "kubeconfig")) for k, v in self._outputs.items()}
        return UpResult(stdout="", stderr="", summary=self._summary("update"), outputs=outs)

    def destroy(self, on_event=None):
        from pulumi.automation import DestroyResult

        self._maybe_fail("destroy", on_event)
        return DestroyResult(stdout="", stderr="", summary=self._summary("destroy"))

    def set_config(self, key, value, *, path=False):
        """Records the value (a pulumi.automation.ConfigValue) like `pulumi config set` would store it."""
        self.calls.append(f"set_config {key}")
        self.config[key] = value

    def remove_config(self, key, *, path=False):
        """Forgets the key like `pulumi config rm` would."""
        self.calls.append(f"remove_config {key}")
        self.config.pop(key, None)

    def outputs(self):
        from pulumi.automation import OutputValue

        self.calls.append("outputs")
        return {k: OutputValue(value=v, secret=(k == "kubeconfig")) for k, v in self._outputs.items()}


# The stand-in for this machine's public address (TEST-NET-3, RFC 5737), what checkip.amazonaws.com would answer:
# the shipped stacks leave apiPublicAccessCidrs to the driver, which writes it before preview/up.
DEPLOYER_IP = "203.0.113.7"


def deployer_ip() -> str:
    return DEPLOYER_IP


def stack_config(stack: str = "us-west-2"):
    """The real, validated config of one of the project's stacks."""
    return quiet_stack(stack)


# ---- the EFA driver's sysfs tree on the fake cluster's GPU nodes ----------------------------------------
# The port counters of the EFA kernel driver, in the order of EFA_DEFINE_PORT_STATS (amzn/amzn-drivers
# kernel/linux/efa/src/efa_verbs.c at tag efa_linux_3.1.0), each one file under
# /sys/class/infiniband/<device>/ports/1/hw_counters/ beside a `lifespan` file (Linux
# drivers/infiniband/core/sysfs.c). One device per node: g6.12xlarge has one EFA interface (EC2
# DescribeInstanceTypes, MaximumEfaInterfaces 1); named as in the EC2 user guide's example
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-working-monitor.html: rdmap0s31).
EFA_PORT_COUNTERS = (
    "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs", "recv_bytes", "recv_wrs",
    "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err", "rdma_read_resp_bytes", "rdma_write_wrs",
    "rdma_write_bytes", "rdma_write_wr_err", "rdma_write_recv_bytes", "retrans_bytes", "retrans_pkts",
    "retrans_timeout_events", "unresponsive_remote_events", "impaired_remote_conn_events",
)  # fmt: skip
EFA_DEVICE = "rdmap0s31"
# What the fake NIC carries beside the collectives' payload: EFA's SRD packet headers and NCCL's flags,
# a stand-in figure (no public capture gives one for g6), small beside MIN_FRACTION's margin.
WIRE_OVERHEAD = 1.04
# The counters are cumulative since launch (EC2 guide above): earlier jobs left 5 TB on them.
BOOT_BYTES = 5 * 10**12


# Two views of one node's RDMA devices, as the kernel gives them (Linux drivers/infiniband/core):
# - the host's (the initial network namespace): the full device, whose ports/1/ holds hw_counters/ (sysfs.c,
#   `setup_port`: `bool is_full_dev = &device->coredev == coredev;` ... `if (port_num && is_full_dev)
#   { ret = setup_hw_port_stats(...) }`). The reader pod sees it: the host's /sys, bound read-only at /host/sys,
#   keeps the namespace it was mounted in (nebius/soperator#403 reads InfiniBand counters that way).
# - a pod's own (its own network namespace, RDMA netns mode "shared"): a compat copy of each device (device.c,
#   `add_one_compat_dev`, which calls `ib_setup_port_attrs(cdev)`) whose ports/1/ has gids and pkeys but no
#   hw_counters (is_full_dev is false; linux-rdma "RDMA: don't expose hw_stats into non-init net namespaces",
#   2025-02, hid the device-level ones too). The Ray worker pods see this one.
# /sys/class/infiniband/<dev> is a relative link into /sys/devices/ (sysfs class directories), so a view is
# only whole with /sys/devices beside it.
PCI_PATH = "devices/pci0000:00/0000:00:1f.0"  # illustrative PCI address; rdmap0s31 names slot 31 (0x1f)


def write_sysfs(root: Path, devices: dict[str, dict[str, int]], *, full: bool) -> Path:
    """``devices`` laid out under ``root`` as sysfs shows them, the host's view (``full``) or a pod's: returns
    ``root/class/infiniband``, the folder the read script is given."""
    klass = root / "class" / "infiniband"
    klass.mkdir(parents=True)
    for device, counters in devices.items():
        port = root / PCI_PATH / "infiniband" / device / "ports" / "1"
        (port / "gids").mkdir(parents=True)
        (port / "gids" / "0").write_text("fe80:0000:0000:0000:0000:0000:0000:0000\n")
        if full:
            (port / "hw_counters").mkdir()
            for name, value in {**counters, "lifespan": 10}.items():
                (port / "hw_counters" / name).write_text(f"{value}\n")
        (klass / device).symlink_to(Path("..", "..", PCI_PATH, "infiniband", device))
    return klass


class FakeEfaNodes:
    """Each GPU node's EFA counters, cumulative since boot, advancing with the fake job, and what a read shows
    from where it runs: the reader pods (the fixture's efa-counter-reader pods, one per GPU node) at the host's
    sysfs see the counters; any other pod, or the reader at its own /sys, sees the pod's view, with none.

    `pods` maps a Ray worker pod to its node, `readers` a reader pod to its node (the recorded pods.json). Fault
    switches, one per failure world: `flat` (the job's collectives do not reach the NIC), `missing_after` (the
    device is gone after the job), `reset` (the driver restarts during the job: counters start again from 0),
    `unreadable` (the node whose reads fail with EIO, as a sysfs read of a failed admin command does),
    `no_devices` (the node whose host view lists no EFA device)."""

    def __init__(self, pods: dict[str, str], nodes: list[str], readers: dict[str, str] | None = None, *, flat=False,
                 missing_after=False, reset=False, unreadable: str | None = None,
                 no_devices: str | None = None) -> None:  # fmt: skip
        self.pods, self.readers = pods, readers or {}
        boot = {c: BOOT_BYTES + 1000 * i for i, c in enumerate(EFA_PORT_COUNTERS)}
        self.tree = {n: ({} if n == no_devices else {EFA_DEVICE: dict(boot)}) for n in nodes}
        self.flat, self.missing_after, self.reset, self.unreadable = flat, missing_after, reset, unreadable
        self.reads = 0

    @classmethod
    def of_fixture(cls, **faults) -> FakeEfaNodes:
        pods = load_k8s()["pods"]["items"]
        workers = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if "worker" in p["metadata"]["name"]}
        readers = {
            p["metadata"]["name"]: p["spec"]["nodeName"]
            for p in pods
            if p["metadata"]["labels"].get(APP_LABEL) == EFA_COUNTER_READER
        }
        return cls(workers, sorted(set(workers.values())), readers, **faults)

    def job_ran(self, payload_bytes: float, over_efa: bool = True) -> None:
        """The job sent (and received) `payload_bytes` per NIC across nodes; over EFA unless sockets carried it."""
        moved = 0 if (self.flat or not over_efa) else int(payload_bytes * WIRE_OVERHEAD)
        for devices in self.tree.values():
            if EFA_DEVICE not in devices:
                continue
            counters = devices[EFA_DEVICE]
            for name in ("tx_bytes", "rx_bytes", "send_bytes", "recv_bytes"):
                counters[name] = moved // 3 if self.reset else counters[name] + moved
            if self.missing_after:
                devices.clear()

    def view(self, pod: str, root: str) -> tuple[str, dict[str, dict[str, int]], bool]:
        """(node, devices, full): what the read script given ``root`` finds in ``pod``."""
        node = self.readers.get(pod) or self.pods[pod]
        return node, self.tree[node], pod in self.readers and root == READER_SYSFS_ROOT

    def answer(self, pod: str, root: str) -> ExecResult:
        """What the read script prints in `pod` for `root`: a device's counters only in the host's view, files in
        name order as a shell glob lists them (`write_sysfs` lays the same views out for the real script)."""
        self.reads += 1
        node, devices, full = self.view(pod, root)
        lines = ["EFA_COUNTERS_BEGIN"]
        for device, counters in sorted(devices.items()) if full else ():
            lines.append(f"DEVICE {device}")
            for name in sorted(counters):
                lines.append(f"UNREADABLE {name}" if node == self.unreadable else f"{name} {counters[name]}")
        lines += ([] if full and devices else ["NO_DEVICES"]) + ["EFA_COUNTERS_END"]
        return ExecResult(0, "\n".join(lines) + "\n", "")


# What `nvidia-smi --query-gpu=index,name,uuid,ecc...,remapped_rows.pending,remapped_rows.failure
# --format=csv,noheader,nounits` prints on a healthy g6.12xlarge: four L4s. The `index, name, uuid` shape is a public
# capture's (`580.105.08, NVIDIA L4, GPU-c2f76b33-7953-256e-8f33-1343419b1a1c`, a DRA driver check record in a public
# repository, found with find_string "NVIDIA L4, GPU-"); the other UUIDs are made up in its form. The L4's GDDR6 is
# taken to leave row remapping unreported, `[N/A]` (nvidia-smi(1): unsupported data is shown as N/A), and its ECC
# count 0: what the real L4 prints for those two fields was not read here.
L4_UUIDS = [f"GPU-c2f76b33-7953-256e-8f33-1343419b1a{i}c" for i in range(1, 5)]
HEALTHY_SMI = "".join(f"{i}, NVIDIA L4, {u}, 0, [N/A], [N/A]\n" for i, u in enumerate(L4_UUIDS))
# The gate's all-reduce as rank 0's document (workloads/collectives_bench.py `row`): 8 ranks on 2 nodes, 256 MiB in
# 0.2 s is a bus bandwidth of 2.35 GB/s = 18.8 Gbps, under the 20 Gbps the gate asks (half the model's 40 Gbps);
# 0.1 s is 37.6 Gbps, a healthy link. Test values, not a measurement.
HEALTHY_LINK_S = 0.1
SLOW_LINK_S = 0.2


def collectives_doc(seconds: float) -> dict:
    from workloads.collectives_bench import row

    rows = [row(op, 256 << 20, 8, seconds) for op in ("all_reduce", "all_gather", "reduce_scatter")]
    return {"backend": "nccl", "world": 8, "nodes": 2, "nccl_tests": None, "rows": rows}


def gate_answer(request: PodRequest, smi: str = HEALTHY_SMI, link_s: float = HEALTHY_LINK_S) -> ExecResult | None:
    """The gate's requests: `smi` from nvidia-smi, a sweep that succeeds and its document at `link_s` per call."""
    if request.action is PodAction.NVIDIA_SMI:
        return ExecResult(0, smi, "")
    if request.action is PodAction.COLLECTIVES:
        return ExecResult(0, "table\n", "")
    if request.action is PodAction.READ_FILE and request.arg.endswith("/collectives-gate.json"):
        return ExecResult(0, json.dumps(collectives_doc(link_s)), "")
    return None


def routine_answer(request: PodRequest, pod: str, efa: FakeEfaNodes) -> ExecResult | None:
    """What every fake cluster answers alike: its nodes' EFA counters, a healthy gate, and an upload of the job's
    source that succeeds; None for any other request."""
    if (gate := gate_answer(request)) is not None:
        return gate
    if request.action is PodAction.EFA_COUNTERS:
        return efa.answer(pod, request.arg)
    if request.action is PodAction.UPLOAD:
        return ExecResult(0, "", "")
    return None


def predicted_job_bytes(steps: int) -> float:
    """The bytes per NIC workloads/throughput_model.py predicts for `steps` of the cluster's default job."""
    from automation.job import cluster_job
    from workloads.throughput_model import nic_bytes_per_step

    job = cluster_job(stack_config(), "r1", None, None)
    per_step = nic_bytes_per_step(job, 4)
    assert per_step is not None, "the default job's bytes per step are modelled"
    return per_step * steps


def _as_the_driver_takes_them(stack: FakeStack, exec_: ScriptedExec) -> tuple[StackLike, PodExec]:
    """Never called: mypy (tests/support is in pyproject's [tool.mypy] files) holds each stand-in to the protocol
    the driver takes it as, so a fake that drifts from its protocol fails CI, not a run on AWS."""
    return stack, exec_
