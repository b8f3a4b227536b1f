"""`automation dashboard` against the fake Kubernetes API: the head pod's 8265, forwarded to 127.0.0.1
only, and nothing left open after Ctrl-C.

The fake API serves plain HTTP, not the portforward websocket, so the tunnel itself is a stand-in
(a socketpair with an echoing far end) handed in where `kube_connector` would open the websocket.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import _driver_helpers as helpers
import pytest

from automation.cli import build_parser
from automation.commands import dashboard
from automation.commands.dashboard import DASHBOARD_PORT, PortForward, local_dashboards


class FakeTunnels:
    """Records which pod, namespace and port each tunnel goes to; the far end echoes upper-cased."""

    def __init__(self):
        self.targets: list[tuple[str, str, int]] = []
        self.far_ends: list[socket.socket] = []
        self.near_ends: list[socket.socket] = []

    def factory(self, kube, pod, namespace, port):
        self.targets.append((pod, namespace, port))

        def connect():
            near, far = socket.socketpair()
            self.near_ends.append(near)
            self.far_ends.append(far)
            threading.Thread(target=self._echo, args=(far,), daemon=True).start()
            return near

        return connect

    @staticmethod
    def _echo(far: socket.socket) -> None:
        while data := far.recv(1024):
            far.sendall(data.upper())
        far.close()


class NoteUi:
    def __init__(self):
        self.notes: list[str] = []
        self.url = threading.Event()

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.url.set()

    def error(self, text: str) -> None:
        self.notes.append("error: " + text)


def forwarder_threads() -> list[str]:
    # each connection's thread is socketserver.ThreadingMixIn's, named after its process_request_thread
    names = [t.name for t in threading.enumerate()]
    return [n for n in names if n.startswith("dashboard-forward") or "process_request_thread" in n]


def round_trip(url: str, payload: bytes = b"get /") -> bytes:
    found = re.fullmatch(r"http://([\d.]+):(\d+)", url)
    assert found, f"not an http://host:port URL: {url!r}"
    host, port = found.groups()
    with socket.create_connection((host, int(port)), timeout=10) as c:
        c.sendall(payload)
        return c.recv(1024)


@pytest.fixture
def dashboard_session(tmp_path):
    """`dashboard --stack us-west-2 --kubeconfig K` run to its end: a client round trip, then SIGINT."""
    tunnels, ui, seen = FakeTunnels(), NoteUi(), {}
    with helpers.FakeKubeApi() as api:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps(api.kubeconfig()))
        args = build_parser().parse_args(["dashboard", "--stack", "us-west-2", "--kubeconfig", str(kubeconfig)])

        def browser():
            assert ui.url.wait(30), "the command printed no URL"
            seen["url"] = re.search(r"http://\S+", ui.notes[0]).group(0)
            seen["reply"] = round_trip(seen["url"])
            time.sleep(0.2)  # let the main thread settle into its wait
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends

        t = threading.Thread(target=browser)
        # Ctrl-C raises KeyboardInterrupt, as in a terminal, even where pytest was started with SIGINT
        # ignored (a shell's background job): Python then installs no handler of its own.
        before = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            t.start()
            rc = dashboard.run(args, ui, connect_factory=tunnels.factory)
        finally:
            signal.signal(signal.SIGINT, before)
        t.join(30)
    return rc, tunnels, seen


def test_dashboard_forwards_the_head_pods_dashboard_port(dashboard_session):
    _, tunnels, _ = dashboard_session
    expected = [("ray-efa-head-9xk2q", "ray", DASHBOARD_PORT)]
    assert tunnels.targets == expected, f"expected a tunnel to {expected}, got {tunnels.targets}"


def test_dashboard_url_is_on_loopback_and_carries_bytes_both_ways(dashboard_session):
    rc, _, seen = dashboard_session
    assert seen["url"].startswith("http://127.0.0.1:"), f"expected a 127.0.0.1 URL, got {seen['url']}"
    assert seen["reply"] == b"GET /", f"expected the far end's echo b'GET /', got {seen['reply']!r}"


def test_ctrl_c_exits_0_and_leaves_no_thread_or_socket(dashboard_session):
    rc, tunnels, seen = dashboard_session
    assert rc == 0, f"expected exit 0 after Ctrl-C, got {rc}"
    assert forwarder_threads() == [], f"expected no forwarding thread left, got {forwarder_threads()}"
    open_ends = [s for s in tunnels.near_ends if s.fileno() != -1]
    assert not open_ends, f"expected every tunnel closed, {len(open_ends)} still open"
    with pytest.raises(ConnectionRefusedError):
        round_trip(seen["url"])


def test_forward_listens_on_loopback_only():
    fwd = PortForward(lambda: socket.socketpair()[0])
    try:
        assert fwd.socket.getsockname()[0] == "127.0.0.1", f"got {fwd.socket.getsockname()}"
    finally:
        fwd.close()


def test_busy_local_port_is_bad_input_naming_the_flag(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as taken, helpers.FakeKubeApi() as api:
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps(api.kubeconfig()))
        port = taken.getsockname()[1]
        args = build_parser().parse_args(
            ["dashboard", "--stack", "us-west-2", "--kubeconfig", str(kubeconfig), "--port", str(port)]
        )
        with pytest.raises(dashboard.DriverError, match=rf"--port {port}: cannot listen on 127.0.0.1"):
            dashboard.run(args, NoteUi(), connect_factory=FakeTunnels().factory)


def test_local_dashboards_are_read_from_ray_processes(tmp_path):
    ray_dash = [b"python", b"/venv/ray/dashboard/dashboard.py", b"--host=0.0.0.0", b"--port=8266", b"--temp-dir=/t"]
    for pid, argv in (("101", ray_dash), ("102", [b"python", b"other.py", b"--port=9"])):
        (tmp_path / pid).mkdir()
        (tmp_path / pid / "cmdline").write_bytes(b"\0".join(argv) + b"\0")
    assert local_dashboards(tmp_path) == ["http://127.0.0.1:8266"]


class SlowToEnd:
    """A tunnel whose reads, once its far end is gone, take 0.3 s to say so (a websocket's close handshake)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def recv(self, n: int) -> bytes:
        data = self.sock.recv(n)
        if not data:
            time.sleep(0.3)
        return data

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()


def test_close_returns_only_after_every_connections_thread_has_ended():
    fwd = PortForward(lambda: SlowToEnd(socket.socketpair()[0]))
    client = socket.create_connection(fwd.socket.getsockname())
    deadline = time.monotonic() + 5
    while not fwd._open and time.monotonic() < deadline:  # noqa: SLF001 - the tunnel is open once it is listed
        time.sleep(0.01)
    fwd.close()
    client.close()
    assert forwarder_threads() == [], f"close() returned while {forwarder_threads()} still ran"


# ---- the forward itself (the survivors of the after-shrink5 mutation run) -----------------------------------
def test_each_tunnel_is_a_portforward_to_the_pods_port(monkeypatch):
    """`kube_connector` against a stand-in for kubernetes 37.0.1's `kubernetes.stream.portforward` (stream/stream.py:
    the generated API method, then its arguments) and the object it returns (stream/ws_client.py `PortForward`,
    whose `socket(port_number)` is the port's end of a socketpair)."""
    calls, sockets = [], []

    class Forwarded:
        def socket(self, port_number):
            sockets.append(port_number)
            return f"socket of {port_number}"

    def portforward(api_method, *args, **kwargs):
        calls.append((api_method, args, kwargs))
        return Forwarded()

    monkeypatch.setattr("kubernetes.stream.portforward", portforward)
    kube = SimpleNamespace(core=SimpleNamespace(connect_get_namespaced_pod_portforward="the API method"))
    connect = dashboard.kube_connector(kube, "ray-efa-head-9xk2q", "ray", DASHBOARD_PORT)
    got = (connect(), connect(), calls, sockets)
    call = ("the API method", ("ray-efa-head-9xk2q", "ray"), {"ports": str(DASHBOARD_PORT)})
    want = (f"socket of {DASHBOARD_PORT}",) * 2 + ([call, call], [DASHBOARD_PORT] * 2)
    assert got == want, f"expected a new portforward to ray/ray-efa-head-9xk2q:{DASHBOARD_PORT} per call, got {got}"


def test_forwards_without_a_port_each_listen_on_a_free_one():
    first, second = PortForward(lambda: socket.socketpair()[0]), PortForward(lambda: socket.socketpair()[0])
    try:
        ports = {first.socket.getsockname()[1], second.socket.getsockname()[1]}
        assert len(ports) == 2, f"expected two free ports, got {ports}"
    finally:
        first.close()
        second.close()


def test_a_forward_on_a_busy_port_is_bad_input_naming_the_flag():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(dashboard.DriverError, match=rf"^--port {port}: cannot listen on 127.0.0.1") as e:
            PortForward(lambda: socket.socketpair()[0], port)
    assert e.value.exit_code == 2, f"expected exit 2, got {e.value.exit_code}"


def test_a_tunnel_that_cannot_be_opened_is_kept_as_an_error_and_the_forward_goes_on():
    def refused():
        raise OSError("the API server refused the upgrade")

    fwd = PortForward(refused)
    try:
        with socket.create_connection(fwd.socket.getsockname(), timeout=10) as c:
            assert c.recv(16) == b"", "expected the browser's connection closed"
        assert fwd.errors == ["cannot open a tunnel: the API server refused the upgrade"], fwd.errors
    finally:
        fwd.close()


def test_close_closes_every_tunnel_still_open():
    tunnels = FakeTunnels()
    fwd = PortForward(tunnels.factory(None, "ray-efa-head-9xk2q", "ray", DASHBOARD_PORT))
    browsers = [socket.create_connection(fwd.socket.getsockname(), timeout=10) for _ in range(2)]
    try:
        for b in browsers:
            b.sendall(b"get /")
            assert b.recv(16) == b"GET /"
        fwd.close()
        open_ends = [s for s in tunnels.near_ends if s.fileno() != -1]
        assert (len(tunnels.near_ends), open_ends) == (2, []), f"expected both tunnels closed, open: {open_ends}"
    finally:
        for b in browsers:
            b.close()


def test_a_process_that_exits_with_the_forward_still_open_is_not_held_by_its_threads():
    """A command that ends without `close()` (an error before it) exits: the accept thread and each tunnel's
    threads are daemons. The process keeps a browser connection open, its bytes already through both pumps."""
    script = """if True:
        import socket
        from automation.commands.dashboard import PortForward
        near, far = socket.socketpair()
        fwd = PortForward(lambda: near)
        browser = socket.create_connection(fwd.socket.getsockname(), timeout=10)
        browser.sendall(b"x")
        assert far.recv(1) == b"x"
        far.sendall(b"y")
        assert browser.recv(1) == b"y"
        print("exiting")
    """
    root = Path(dashboard.__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    try:
        done = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, timeout=60)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the process did not exit within 60 s: {e.stdout!r}") from None
    assert (done.returncode, done.stdout) == (0, b"exiting\n"), done.stderr.decode()[-2000:]
