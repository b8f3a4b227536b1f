"""The local head is bound to 127.0.0.1, from its command line and environment alone (no Ray started).

The real proof, every listening socket of a running head and its workers on loopback, is the slow
test `tests/automation/targets/test_local_run.py::test_every_ray_port_of_the_local_cluster_listens_on_loopback_only`;
these fail at once when a flag or a variable that keeps Ray on loopback is dropped."""

from __future__ import annotations

import pytest

from automation.local_ray import HeadPorts, client_env, head_command, head_env

PORTS = HeadPorts(gcs=6379, dashboard=8265, client_server=10001, dashboard_agent=52365)


def flag_value(cmd: list[str], flag: str) -> str | None:
    return cmd[cmd.index(flag) + 1] if flag in cmd else None


@pytest.mark.parametrize("flag", ["--node-ip-address", "--dashboard-host"])
def test_head_command_binds_the_head_to_loopback(flag):
    got = flag_value(head_command("/tmp/rek-x", PORTS, num_cpus=2, num_gpus=0), flag)
    assert got == "127.0.0.1", f"expected `ray start {flag} 127.0.0.1`, got {flag} {got!r}"


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
