"""A Ray head on 127.0.0.1 that this process starts, owns and stops, leaving no Ray process behind.

`ray stop` would kill every Ray process of the user on the machine, including clusters that other
programs started; so the head runs as `ray start --head --block` in its own session and temp dir,
and stopping it signals that session, then ends any process still naming the temp dir, by pid.
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
from dataclasses import dataclass
from pathlib import Path

from automation.errors import DriverError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_executable() -> list[str]:
    """The `ray` CLI of the interpreter running the driver, so the head uses the same packages."""
    script = Path(sys.executable).parent / "ray"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "ray.scripts.scripts"]


@dataclass(frozen=True)
class HeadPorts:
    gcs: int
    dashboard: int
    client_server: int
    dashboard_agent: int

    @classmethod
    def pick(cls) -> HeadPorts:
        return cls(gcs=free_port(), dashboard=free_port(), client_server=free_port(), dashboard_agent=free_port())


def head_command(temp_dir: str, ports: HeadPorts, num_cpus: int, num_gpus: int) -> list[str]:
    """The `ray start` command line of a loopback-only head with its job server."""
    return [
        *ray_executable(),
        "start",
        "--head",
        "--block",
        # Ray swaps a loopback node address for the host's own (it expects other nodes to join);
        # the job server, the only thing this driver talks to, stays bound to 127.0.0.1.
        "--node-ip-address",
        "127.0.0.1",
        "--port",
        str(ports.gcs),
        "--dashboard-host",
        "127.0.0.1",
        "--dashboard-port",
        str(ports.dashboard),
        "--ray-client-server-port",
        str(ports.client_server),
        "--dashboard-agent-listen-port",
        str(ports.dashboard_agent),
        "--num-cpus",
        str(num_cpus),
        "--num-gpus",
        str(num_gpus),
        "--temp-dir",
        temp_dir,
        "--disable-usage-stats",
        "--include-dashboard",
        "true",
    ]


def processes_naming(text: str) -> list[int]:
    """Pids of processes (other than this one) whose command line contains `text`.

    Reads /proc: the driver runs on Linux (CI, the EKS tooling) and this avoids a dependency.
    """
    pids = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry.name))
    return pids


class LocalRayCluster:
    """A single-node Ray cluster on loopback. Use as a context manager: it always stops what it started."""

    def __init__(self, num_cpus: int, num_gpus: int = 0, start_timeout_s: float = 90.0):
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.start_timeout_s = start_timeout_s
        self.ports = HeadPorts.pick()
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
        env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
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

    def leftover_pids(self) -> list[int]:
        return processes_naming(self.temp_dir)

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the head and every process it started; idempotent, safe to call from a signal handler path."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            # Only the `ray start --block` process: on SIGTERM it shuts its own children down in
            # order; signalling the whole group at once leaves it waiting on dead children.
            _signal(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait(timeout=5)
        # Workers and agents that re-parented or left the session still carry the temp dir in argv.
        deadline = time.monotonic() + grace_s
        while (pids := self.leftover_pids()) and time.monotonic() < deadline:
            for pid in pids:
                _signal(pid, signal.SIGTERM)
            time.sleep(0.5)
        for pid in self.leftover_pids():
            _signal(pid, signal.SIGKILL)
        self._proc = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
