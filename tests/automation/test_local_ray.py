"""The local head is bound to 127.0.0.1, from its command line and environment alone (no Ray started).

The real proof, every listening socket of a running head and its workers on loopback, is the slow
test `tests/automation/targets/test_local_run.py::test_every_ray_port_of_the_local_cluster_listens_on_loopback_only`;
these fail at once when a flag or a variable that keeps Ray on loopback is dropped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from automation.local_ray import HeadPorts, LocalRayCluster, client_env, head_command, head_env, processes_naming

PORTS = HeadPorts(gcs=6379, dashboard=8265, client_server=10001, dashboard_agent=52365)


def flag_value(cmd: list[str], flag: str) -> str | None:
    return next((arg.split("=", 1)[1] for arg in cmd if arg.startswith(f"{flag}=")), None)


@pytest.mark.parametrize("flag", ["--node-ip-address", "--dashboard-host"])
def test_head_command_binds_the_head_to_loopback(flag):
    got = flag_value(head_command("/tmp/rek-x", PORTS, num_cpus=2, num_gpus=0), flag)
    assert got == "127.0.0.1", f"expected `ray start {flag}=127.0.0.1`, got {flag} {got!r}"


def test_head_env_keeps_ray_from_swapping_loopback_for_the_hosts_address():
    """Without RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 `ray start` replaces 127.0.0.1 by the host's address
    and every Ray server listens on all interfaces (automation/local_ray.py says where in Ray)."""
    got = head_env({"PATH": "/usr/bin"}).get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    assert got == "0", f"expected RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in the head's environment, got {got!r}"


def test_head_env_overrides_a_shell_that_enabled_multi_node_mode():
    got = head_env({"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"})["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"]
    assert got == "0", f"expected the head's setting 0 to win over the shell's 1, got {got!r}"


def test_head_env_drops_an_inherited_ray_address():
    env = head_env({"RAY_ADDRESS": "10.0.0.5:6379", "PATH": "/usr/bin"})
    assert "RAY_ADDRESS" not in env, f"expected no RAY_ADDRESS in the head's environment, got {env['RAY_ADDRESS']!r}"


def test_client_env_joins_the_loopback_head_with_its_loopback_setting():
    env = client_env({"RAY_ADDRESS": "10.0.0.5:6379"}, "127.0.0.1:6379")
    got = (env["RAY_ADDRESS"], env.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"))
    assert got == ("127.0.0.1:6379", "0"), f"expected ('127.0.0.1:6379', '0'), got {got}"


# ---- Ctrl-C leaves no process behind: `LocalRayCluster` stops its head's whole tree when the block it
# guards is interrupted, in well under a second of test time, without Ray.
#
# The head is a stand-in with the shapes that make stopping hard, each from the module's docstring: the
# head in a session of its own (`ray start --block` is started with start_new_session), a child in a
# process group of its own (Ray's job server starts each job's entrypoint so), a child that ignores
# SIGTERM (a worker busy in a collective), and an orphan that left the tree but names the temp dir. No
# capture of a real Ray tree stands behind it: the slow tests with real heads are
# `tests/automation/targets/test_local_run.py` (SIGINT and SIGTERM during a run) and
# `test_local_interrupts.py` (Ctrl-C at each step).

# argv: TEMP_DIR READY_FILE. Starts the three children, writes their pids to READY_FILE, then waits.
HEAD = r"""
import os, signal, subprocess, sys, time
temp_dir, ready = sys.argv[1], sys.argv[2]
wait = [sys.executable, "-c", "import time; time.sleep(120)", temp_dir]
ignore = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"]
own_group = subprocess.Popen(wait, start_new_session=True)
stubborn = subprocess.Popen(ignore)
# The orphan: its parent exits at once, so it leaves the head's tree; only its command line names temp_dir.
spawner = subprocess.Popen([sys.executable, "-c",
    "import subprocess as s, sys; print(s.Popen(sys.argv[1:], start_new_session=True, stdout=s.DEVNULL).pid)",
    *wait],
    stdout=subprocess.PIPE, text=True)
orphan = int(spawner.communicate()[0])
with open(ready + ".tmp", "w") as f:
    f.write(" ".join(str(p) for p in (own_group.pid, stubborn.pid, orphan)))
os.rename(ready + ".tmp", ready)
time.sleep(120)
"""


class StandInHead(LocalRayCluster):
    """A LocalRayCluster whose `start` runs HEAD instead of `ray start`; `pids` are the head and its children."""

    def start(self) -> None:
        ready = Path(self.temp_dir) / "ready"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", HEAD, self.temp_dir, str(ready)], start_new_session=True, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), "the stand-in head never started its children"
        self.pids = [self._proc.pid, *map(int, ready.read_text().split())]


def alive(pids: list[int]) -> list[int]:
    def running(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [p for p in pids if running(p)]


@pytest.fixture(scope="module")
def interrupted_head():
    """A stand-in head stopped after Ctrl-C (KeyboardInterrupt), as the local target's close() stops it when Ctrl-C
    leaves a run; one for the module, as the stubborn child costs the stop's grace (3 s)."""
    head = StandInHead(num_cpus=1)
    with pytest.raises(KeyboardInterrupt):
        try:
            head.start()
            assert alive(head.pids) == head.pids, f"expected the stand-in's processes running, got {alive(head.pids)}"
            raise KeyboardInterrupt
        finally:
            head.stop()
    return head


def test_ctrl_c_leaves_no_process_of_the_head_tree(interrupted_head):
    _, survivors = psutil.wait_procs([psutil.Process(p) for p in alive(interrupted_head.pids)], timeout=5)
    left = [p.pid for p in survivors]
    assert left == [], f"expected the head, its children and the orphan gone after Ctrl-C, alive: {left}"


def test_ctrl_c_leaves_no_process_naming_the_temp_dir(interrupted_head):
    left = processes_naming(interrupted_head.temp_dir)
    assert left == [], f"expected no process naming {interrupted_head.temp_dir} after Ctrl-C, got pids {left}"


def test_ctrl_c_removes_the_temp_dir(interrupted_head):
    assert not os.path.exists(interrupted_head.temp_dir), f"expected {interrupted_head.temp_dir} removed after Ctrl-C"
