"""KubeApi.exec when the exec websocket is cut mid-command: one DriverError naming the pod, which the job follow
loop (automation/ray_head.py) retries, instead of whatever the websocket client raised.

The stand-in follows kubernetes' WSClient (kubernetes/stream/ws_client.py, the installed client): `update`
reads frames and raises websocket's WebSocketConnectionClosedException when the peer is gone; `returncode`
of a closed stream without a status frame runs yaml.safe_load("")["status"], a TypeError."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _driver_helpers import kubeconfig_for
from websocket import WebSocketConnectionClosedException

from automation.errors import DriverError
from automation.kube import KubeApi


class CutStream:
    """A WSClient whose connection is cut after its first frame."""

    def __init__(self, cut_in: str):
        self.cut_in = cut_in
        self.open = True

    def is_open(self):
        return self.open

    def update(self, timeout=0):
        if self.cut_in == "update":
            raise WebSocketConnectionClosedException("Connection to remote host was lost.")
        self.open = False

    def peek_stdout(self):
        return False

    def peek_stderr(self):
        return False

    @property
    def returncode(self) -> int:
        # What a status read from an empty error channel comes to: indexing None (a TypeError).
        empty_channel: dict | None = None
        return empty_channel["status"]  # type: ignore[index]

    def close(self):
        self.open = False


@pytest.mark.parametrize("cut_in", ["update", "returncode"])
def test_a_cut_exec_stream_is_one_driver_error_naming_the_pod(monkeypatch, cut_in):
    import kubernetes.stream

    monkeypatch.setattr(kubernetes.stream, "stream", lambda *a, **k: CutStream(cut_in))
    api = KubeApi(kubeconfig_for("https://127.0.0.1:1"))
    with pytest.raises(DriverError, match=r"exec stream of `ray job status …` in pod ray/head-0 dropped") as e:
        api.exec("head-0", "ray", ["ray", "job", "status"])
    assert e.value.exit_code == 1, f"a dropped stream is no bad input, got exit {e.value.exit_code}"


# ---- KubeApi.delete_pod, which the AWS drill uses, against an HTTP server that answers like the Kubernetes API.


def test_delete_pod_deletes_the_named_pod_at_once():
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # keep pytest output clean
            pass

        def do_DELETE(self):
            seen.append(self.path)
            body = json.dumps({"kind": "Pod", "metadata": {"name": "worker-b"}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        KubeApi(kubeconfig_for(f"http://127.0.0.1:{server.server_address[1]}")).delete_pod("ray", "worker-b")
    finally:
        server.shutdown()
        server.server_close()
    assert seen == ["/api/v1/namespaces/ray/pods/worker-b?gracePeriodSeconds=0"], (
        f"expected one DELETE of ray/worker-b with grace 0, got {seen}"
    )
