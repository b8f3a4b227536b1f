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


class FramedStream:
    """A WSClient that delivers its frames one `update` at a time: (stdout, stderr) text per frame, as
    WSClient's channel buffers hold them (kubernetes/stream/ws_client.py: read_stdout returns all buffered text
    of the channel, which need not end on a line), then closes with a status frame of exit 0."""

    def __init__(self, frames: list[tuple[str, str]]):
        self.frames, self.buf = list(frames), {"out": "", "err": ""}

    def is_open(self) -> bool:
        return bool(self.frames)

    def update(self, timeout: float = 0) -> None:
        out, err = self.frames.pop(0)
        self.buf["out"] += out
        self.buf["err"] += err

    def _take(self, kind: str) -> str:
        text, self.buf[kind] = self.buf[kind], ""
        return text

    def peek_stdout(self) -> bool:
        return bool(self.buf["out"])

    def peek_stderr(self) -> bool:
        return bool(self.buf["err"])

    def read_stdout(self) -> str:
        return self._take("out")

    def read_stderr(self) -> str:
        return self._take("err")

    returncode = 0

    def close(self) -> None:
        self.frames = []


def test_exec_hands_on_line_each_line_once_whole_across_frames_and_keeps_both_channels(monkeypatch):
    import kubernetes.stream

    frames = [("step 1\nste", ""), ("p 2\n", "warn a"), ("", "\nwarn b\n"), ("step 3 no newline", "")]
    monkeypatch.setattr(kubernetes.stream, "stream", lambda *a, **k: FramedStream(frames))
    lines: list[str] = []
    res = KubeApi(kubeconfig_for("https://127.0.0.1:1")).exec("head-0", "ray", ["tail"], on_line=lines.append)
    want = ["step 1", "step 2", "warn a", "warn b", "step 3 no newline"]
    assert lines == want, f"expected each line once, whole, in arrival order, got {lines}"
    assert (res.rc, res.stdout, res.stderr) == (0, "step 1\nstep 2\nstep 3 no newline", "warn a\nwarn b\n"), res


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
