"""KubeApi.delete_pod, which the AWS drill uses, against an HTTP server that answers like the Kubernetes API."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from _driver_helpers import kubeconfig_for  # tests/support is on pytest's pythonpath

from automation.kube import KubeApi


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
