"""A Ray head on 127.0.0.1 that this process starts, owns and stops, leaving no Ray process behind.

Every Ray port listens on 127.0.0.1 only: Ray's servers bind to loopback when the node's address is
127.0.0.1, and `ray start` keeps that address only when Ray believes it runs alone
(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0); otherwise it swaps loopback for the host's own address and
its GCS, raylet, agents and workers listen on every interface, unauthenticated.

`ray stop` would kill every Ray process of the user on the machine, including clusters that other
programs started; so the head runs as `ray start --head --block` in its own session and temp dir,
and stopping it signals the process groups of that process's whole tree at once (the job server
starts each job's entrypoint in a group of its own), kills what is left after a short grace, and
only then sweeps for any process still naming the temp dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from automation.errors import DriverError

# Set by the shell for `ray.init()` to join a cluster; inherited by the head, the job's `ray.init()`
# would try to join that cluster instead of this one and give up after a GCS timeout.
INHERITED_ADDRESS = "RAY_ADDRESS"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class HeadPorts:
    """The head's ports: by default each a free one."""

    gcs: int = field(default_factory=free_port)
    dashboard: int = field(default_factory=free_port)
    client_server: int = field(default_factory=free_port)
    dashboard_agent: int = field(default_factory=free_port)


def head_command(temp_dir: str, ports: HeadPorts, num_cpus: int, num_gpus: int) -> list[str]:
    """The `ray start` command line of a loopback-only head with its job server."""
    options = {
        # Ray swaps a loopback node address for the host's own (it expects other nodes to join);
        # the job server, the only thing this driver talks to, stays bound to 127.0.0.1.
        "node-ip-address": "127.0.0.1",
        "port": ports.gcs,
        "dashboard-host": "127.0.0.1",
        "dashboard-port": ports.dashboard,
        "ray-client-server-port": ports.client_server,
        "dashboard-agent-listen-port": ports.dashboard_agent,
        "num-cpus": num_cpus,
        "num-gpus": num_gpus,
        "temp-dir": temp_dir,
        "include-dashboard": "true",
    }
    flags = [f"--{name}={value}" for name, value in options.items()]
    # The `ray` CLI of the interpreter running the driver, so the head uses the same packages.
    script = Path(sys.executable).parent / "ray"
    ray = [str(script)] if script.exists() else [sys.executable, "-m", "ray.scripts.scripts"]
    return [*ray, "start", "--head", "--block", "--disable-usage-stats", *flags]


def head_env(environ: dict[str, str]) -> dict[str, str]:
    """The head's environment: `environ` without RAY_ADDRESS, with every Ray server bound to loopback.

    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 makes `ray start` keep --node-ip-address 127.0.0.1
    (ray python/ray/_private/services.py, `resolve_ip_for_localhost` and `get_node_ip_address`), and
    a node address of 127.0.0.1 makes Ray's gRPC servers listen on 127.0.0.1 instead of 0.0.0.0
    (ray src/ray/rpc/grpc_server.cc, `GrpcServer::Run` with `listen_to_localhost_only`;
    https://github.com/ray-project/ray/blob/master/src/ray/rpc/grpc_server.cc).
    tests/automation/targets/test_local_run.py lists the sockets to prove it.
    """
    env = {k: v for k, v in environ.items() if k != INHERITED_ADDRESS}
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    return env


def client_env(environ: dict[str, str], gcs_address: str) -> dict[str, str]:
    """The environment of a process that joins the head at `gcs_address` (`ray.init()` with no argument), with
    the head's loopback setting: without it Ray waits for this node's raylet at the host's own address forever."""
    return dict(head_env(environ), RAY_ADDRESS=gcs_address)


def process_tree(pid: int) -> list[psutil.Process]:
    """`pid` and every process below it, as far as they still exist."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def process_groups(procs: list[psutil.Process]) -> set[int]:
    """The process groups of `procs`, never this process's own group."""
    groups = set()
    for p in procs:
        with suppress(ProcessLookupError):
            groups.add(os.getpgid(p.pid))
    return groups - {os.getpgrp()}


def processes_naming(text: str) -> list[int]:
    """Pids of processes (other than this one) whose command line contains `text`."""
    found = psutil.process_iter(["cmdline"])  # a process that is gone or not ours to read has cmdline None
    return [p.pid for p in found if p.pid != os.getpid() and text in " ".join(p.info["cmdline"] or ())]


class LocalRayCluster:
    """A single-node Ray cluster on loopback; `stop()` ends all it started (automation/targets/local.py's close)."""

    def __init__(self, num_cpus: int, num_gpus: int = 0, start_timeout_s: float = 90.0):
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.start_timeout_s = start_timeout_s
        self.ports = HeadPorts()
        # Short path: Ray's unix sockets live under it and must stay below 107 characters.
        self.temp_dir = tempfile.mkdtemp(prefix="rek-", dir="/tmp")
        self._proc: subprocess.Popen | None = None
        self._log_path = Path(self.temp_dir) / "ray-start.log"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.dashboard}"

    @property
    def gcs_address(self) -> str:
        return f"127.0.0.1:{self.ports.gcs}"

    def start(self) -> None:
        """Start the head and return once its job server answers; raise DriverError otherwise."""
        cmd = head_command(self.temp_dir, self.ports, self.num_cpus, self.num_gpus)
        env = head_env(dict(os.environ))
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise DriverError(f"`ray start` exited with code {self._proc.returncode}: {self.log_tail()}")
            if self._job_server_up():
                return
            time.sleep(0.5)
        raise DriverError(
            f"the local Ray job server at {self.dashboard_url} did not answer within {self.start_timeout_s:.0f} s: "
            f"{self.log_tail()}"
        )

    def _job_server_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.dashboard_url}/api/version", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self._log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self, grace_s: float = 3.0) -> None:
        """Stop the head and every process it started, within about `grace_s` + 5 s; idempotent. The process
        groups of the head's whole tree get SIGTERM at once (a graceful `ray start` shutdown, child by child,
        takes 10-20 s while the training job keeps running), then SIGKILL for whatever is alive after `grace_s`."""
        proc = self._proc
        if proc is not None:
            tree = process_tree(proc.pid)
            groups = process_groups(tree)
            _signal_groups(groups, signal.SIGTERM)
            _, alive = psutil.wait_procs(tree, timeout=grace_s)
            _signal_groups(process_groups(alive) & groups, signal.SIGKILL)
            for p in alive:
                with suppress(psutil.NoSuchProcess):
                    p.kill()
            psutil.wait_procs(alive, timeout=5)
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=5)
        # A process that left the tree before the stop (its parent died) still names the temp dir.
        for pid in processes_naming(self.temp_dir):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._proc = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _signal_groups(groups: set[int], sig: int) -> None:
    for group in groups:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(group, sig)
