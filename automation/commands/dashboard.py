"""`python -m automation dashboard --stack S`: Ray's dashboard on 127.0.0.1 of this machine, until Ctrl-C.

    python -m automation dashboard --stack us-west-2              # forwards the head pod's 8265
    python -m automation dashboard --stack us-west-2 --port 8265  # a fixed local port
    python -m automation dashboard --target local                 # the URL of a Ray dashboard running here

The dashboard is reached the way `kubectl port-forward` reaches a pod: through the Kubernetes API's
portforward subresource (a websocket to the API server), one tunnel per browser connection. Nothing
is exposed: no Service, no Ingress, and the local end listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from automation.commands import Subparsers
from automation.errors import DriverError
from automation.flags import CLUSTER_PARENT, LOCAL, command_parser, not_in, port, resolve_target
from automation.kube import KubeApi
from automation.targets import aws
from automation.ui import Ui
from infra.manifests import RAY_PORTS

DASHBOARD_PORT = RAY_PORTS["dashboard"]
LOOPBACK = "127.0.0.1"
HELP = "forward Ray's dashboard from the head pod to 127.0.0.1 (a port-forward, never a Service)"


# ---- the tunnel ----------------------------------------------------------------------------------------
class Conn(Protocol):
    """A connected socket, or one port of a portforward websocket: what the pump threads read and write."""

    def recv(self, n: int, /) -> bytes: ...
    def sendall(self, data: bytes, /) -> None: ...
    def shutdown(self, how: int, /) -> None: ...
    def close(self) -> None: ...


Connect = Callable[[], Conn]  # a new tunnel per call


def kube_connector(kube: KubeApi, pod: str, namespace: str, port: int) -> Connect:
    """A new portforward websocket to `pod:port` per call, as the kubernetes client's own example does
    (https://github.com/kubernetes-client/python/blob/master/examples/pod_portforward.py)."""

    def connect() -> Conn:
        from kubernetes.stream import portforward  # about 0.2 s: paid only by a forward

        pf = portforward(kube.core.connect_get_namespaced_pod_portforward, pod, namespace, ports=str(port))
        # The port's socket is the whole tunnel: pf.close() only closes it, and the proxy thread closes the
        # websocket once its local ends are closed (kubernetes 37.0.1, kubernetes/stream/ws_client.py PortForward).
        return pf.socket(port)

    return connect


def listen(local_port: int) -> socket.socket:
    """A listener on 127.0.0.1:`local_port` (0: any free port); a port in use is bad input naming --port."""
    try:
        return socket.create_server((LOOPBACK, local_port))
    except OSError as e:
        raise DriverError(
            f"--port {local_port}: cannot listen on {LOOPBACK} ({e.strerror}): pick another port, or leave out "
            "--port for a free one",
            exit_code=2,
        ) from None


class PortForward(socketserver.ThreadingTCPServer):
    """Listens on 127.0.0.1:`local_port` (0: any free port); each accepted connection gets its own
    tunnel from `connect()`, pumped both ways by two threads. `close()` stops and joins them all."""

    def __init__(self, connect: Connect, local_port: int = 0):
        super().__init__((LOOPBACK, local_port), socketserver.BaseRequestHandler, bind_and_activate=False)
        self.socket.close()  # for the listener of `listen`, whose errors name --port
        self.socket = listen(local_port)
        self.url = f"http://{LOOPBACK}:{self.socket.getsockname()[1]}"
        self.connect = connect
        self.errors: list[str] = []
        self._open: list[Conn] | None = []  # None once close() has begun
        self._lock = threading.Lock()
        self._conns: list[threading.Thread] = []  # joined by close(); daemons, so a process that exits is not held
        self._serving = threading.Thread(
            target=self.serve_forever, args=(0.2,), name="dashboard-forward-accept", daemon=True
        )
        self._serving.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        # socketserver's ThreadingMixIn joins only non-daemon threads (its _Threads): these are kept here instead.
        t = threading.Thread(target=self.process_request_thread, args=(request, client_address), daemon=True)
        self._conns.append(t)
        t.start()

    def finish_request(self, request: Any, client_address: Any) -> None:  # in the connection's own thread
        try:
            remote = self.connect()
        except Exception as e:  # noqa: BLE001 - one failed tunnel must not stop the others
            self.errors.append(f"cannot open a tunnel: {e}")
            return
        with self._lock:
            if self._open is None:  # close() ran meanwhile and will not see this pair
                remote.close()
                return
            self._open += [request, remote]
        up = threading.Thread(target=_pump, args=(request, remote), name="dashboard-forward-up", daemon=True)
        up.start()
        _pump(remote, request)
        up.join()

    def close(self) -> None:
        self.shutdown()
        self._serving.join()
        with self._lock:
            conns, self._open = self._open or [], None
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                c.close()
        self.server_close()
        for t in self._conns:  # none is added: serve_forever has returned
            t.join(timeout=10)


def _pump(src: Conn, dst: Conn) -> None:
    """Copy bytes from src to dst until either side closes; then half-close dst."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


# ---- local -------------------------------------------------------------------------------------------
_DASHBOARD_ARG = re.compile(r"--(host|port)=(\S+)")


def local_dashboards(proc_root: Path = Path("/proc")) -> list[str]:
    """URLs of the Ray dashboards running on this machine, from their processes' command lines
    (Ray starts `dashboard/dashboard.py --host=H --port=P`: ray/_private/services.py)."""
    urls = []
    for cmdline in proc_root.glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:  # the process ended while we looked
            continue
        args = [a.decode(errors="replace") for a in argv if a]
        if not any(a.endswith("dashboard/dashboard.py") for a in args):
            continue
        found = {m[1]: m[2] for a in args if (m := _DASHBOARD_ARG.fullmatch(a))}
        if "port" in found:
            host = found.get("host", LOOPBACK)
            urls.append(f"http://{LOOPBACK if host in ('0.0.0.0', 'localhost') else host}:{found['port']}")
    return sorted(set(urls))


def answers(url: str, timeout_s: float = 1.0) -> bool:
    """Whether something listens at ``url``'s host and port (a dashboard process that is exiting, or one
    of a cluster that has stopped, leaves a command line but no listener)."""
    host, _, port = url.removeprefix("http://").partition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def run_local(args: argparse.Namespace, ui: Ui, find: Callable[[], list[str]] = local_dashboards) -> int:
    urls = [u for u in find() if answers(u)]
    if not urls:
        raise DriverError(
            "no Ray dashboard answers on this machine: the local `python -m automation run` stops its Ray "
            "cluster, dashboard included, when the run ends, so open the URL its start step prints while it "
            "trains; for a finished run, `python -m automation report` draws its metrics",
            exit_code=1,
        )
    ui.emit_json({"ok": True, "urls": urls}) if args.json else ui.note("\n".join(f"Ray dashboard: {u}" for u in urls))
    return 0


# ---- the command -----------------------------------------------------------------------------------
def add_parser(sub: Subparsers, parents: list[argparse.ArgumentParser]) -> None:
    p = command_parser(sub, "dashboard", HELP, __doc__, [*parents, CLUSTER_PARENT])
    p.add_argument("--target", choices=("aws", "local"), help="where Ray runs: aws (a stack's cluster) or this machine")
    forward = p.add_argument("--port", type=port, default=0, help="aws: local port on 127.0.0.1 (default: a free one)")
    not_in(forward, LOCAL, "the local dashboards answer on their own ports, which this command lists")


def run(
    args: argparse.Namespace, ui: Ui, connect_factory: Callable[[KubeApi, str, str, int], Connect] = kube_connector
) -> int:
    """Forward until Ctrl-C (or SIGTERM); everything opened is closed before returning."""
    if resolve_target(args) == "local":
        return run_local(args, ui)
    listen(args.port).close()  # a port in use is bad input, refused before the stack is opened
    cluster = aws.open_stack(args.stack, project_dir=args.project_dir, kubeconfig=args.kubeconfig).ray_pods()
    head = cluster.head_pod()
    fwd = PortForward(connect_factory(cluster.kube, head, cluster.namespace, DASHBOARD_PORT), args.port)
    where = f"{cluster.namespace}/{head}:{DASHBOARD_PORT}"
    if args.json:
        ui.emit_json({"ok": True, "url": fwd.url, "pod": where})
    else:
        ui.note(f"Ray dashboard of stack {args.stack}: {fwd.url}  (forwarded from {where}; Ctrl-C stops)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    finally:
        fwd.close()
        if fwd.errors:
            ui.error(f"{len(fwd.errors)} connection(s) could not be forwarded; the first: {fwd.errors[0]}")
