"""The Kubernetes API as the driver uses it: reads that return the API's JSON, and exec into a pod.

Reads return plain dicts (the wire JSON, not client model objects), so the checks in verify.py are
pure functions over the same shapes that `kubectl get -o json` shows and that tests record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import yaml

from automation.errors import DriverError

REQUEST_TIMEOUT_S = 15


@dataclass(frozen=True)
class ExecResult:
    rc: int
    stdout: str
    stderr: str


class PodExec(Protocol):
    """Run a command in a pod's first container, as `kubectl exec <pod> -- <command>` does."""

    def __call__(
        self,
        pod: str,
        namespace: str,
        command: list[str],
        *,
        stdin: str | None = None,
        on_line: Callable[[str], None] | None = None,
        timeout_s: float = 600,
    ) -> ExecResult: ...


def parse_kubeconfig(text: str, source: str) -> dict:
    """A kubeconfig (YAML or JSON text) as a dict; DriverError naming `source` if it is not one."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1}: {getattr(e, 'problem', '')})" if mark else ""
        raise DriverError(f"the kubeconfig from {source} is not YAML or JSON{where}", exit_code=2) from None
    if not isinstance(data, dict) or not data.get("clusters"):
        raise DriverError(
            f"the kubeconfig from {source} has no clusters: regenerate it (`python -m automation up`)", exit_code=2
        )
    return data


def read_kubeconfig_file(path: Path) -> dict:
    if path.is_dir():
        raise DriverError(f"kubeconfig {str(path)!r} is a folder: pass the kubeconfig file in it", exit_code=2)
    if not path.is_file():
        raise DriverError(
            f"kubeconfig {str(path)!r} does not exist: pass the path of the cluster's kubeconfig "
            "or leave --kubeconfig out to use the stack's `kubeconfig` output",
            exit_code=2,
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not UTF-8 text"
        raise DriverError(
            f"kubeconfig {str(path)!r} cannot be read ({why}): pass a kubeconfig file", exit_code=2
        ) from None
    return parse_kubeconfig(text, str(path))


class KubeApi:
    """Reads and exec over one cluster's API; every call error becomes a DriverError with the cause."""

    def __init__(self, kubeconfig: dict):
        from kubernetes import client, config

        try:
            self.api_client = config.new_client_from_config_dict(kubeconfig)
        except Exception as e:  # noqa: BLE001 - the kubernetes loader raises several unrelated types
            raise DriverError(f"the kubeconfig cannot be used: {e}", exit_code=2) from None
        # One attempt: an unreachable API should fail in seconds, not after urllib3's retries.
        self.api_client.configuration.retries = 0
        self.host = self.api_client.configuration.host
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)

    def _json(self, what: str, call: Callable[..., object], *args: object, **kwargs: object) -> dict:
        return json.loads(self._call(what, call, *args, **kwargs))

    def _call(self, what: str, call: Callable[..., Any], *args: object, **kwargs: object) -> bytes:
        from kubernetes.client.exceptions import ApiException

        try:
            # With _preload_content=False the client returns the raw urllib3 response, not the model it declares.
            resp = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
        except ApiException as e:
            if e.status == 404:
                raise DriverError(f"{what}: not found on the cluster at {self.host}") from None
            if e.status in (401, 403):
                raise DriverError(
                    f"{what}: the API at {self.host} refused the credentials ({e.status} {e.reason}): "
                    "refresh them (`aws sts get-caller-identity`, the IAM identity must be a cluster admin)"
                ) from None
            raise DriverError(f"{what}: the API at {self.host} answered {e.status} {e.reason}") from None
        except Exception as e:  # noqa: BLE001 - urllib3 connection errors carry the useful reason
            raise DriverError(
                f"cannot reach the Kubernetes API at {self.host} ({what}): {_root_cause(e)}; "
                "check that the cluster exists (`python -m automation status`) and that this machine can reach it"
            ) from None
        return resp.data

    def list_nodes(self, label_selector: str = "") -> list[dict]:
        return self._json("list nodes", self.core.list_node, label_selector=label_selector)["items"]

    def list_pods(self, namespace: str, label_selector: str) -> list[dict]:
        return self._json(
            f"list pods in {namespace}", self.core.list_namespaced_pod, namespace, label_selector=label_selector
        )["items"]

    def list_all_pods(self) -> list[dict]:
        """Every pod of every namespace (`kubectl get pods -A`)."""
        return self._json("list pods", self.core.list_pod_for_all_namespaces)["items"]

    def list_events(self, namespace: str) -> list[dict]:
        """The namespace's events (core/v1, as `kubectl get events -o json`): FailedScheduling and the like."""
        return self._json(f"list events in {namespace}", self.core.list_namespaced_event, namespace)["items"]

    def get_configmap(self, namespace: str, name: str) -> dict:
        """One ConfigMap (the idle guard's record); DriverError when it does not exist."""
        return self._json(f"read configmap {namespace}/{name}", self.core.read_namespaced_config_map, name, namespace)

    def patch_configmap(self, namespace: str, name: str, patch: dict) -> dict:
        """A JSON merge patch of one ConfigMap (the idle guard's record: the driver's lease); a key set to None
        is removed (RFC 7386). DriverError when the ConfigMap does not exist."""
        # The generated client would send a dict as application/json-patch+json (the first JSON type it lists).
        return self._json(
            f"patch configmap {namespace}/{name}",
            self.core.patch_namespaced_config_map,
            name,
            namespace,
            patch,
            _content_type="application/merge-patch+json",
        )

    def cordon_node(self, name: str) -> dict:
        """Mark a node unschedulable, as `kubectl cordon` does (a merge patch of spec.unschedulable; pods on it
        stay, no new pod lands there: https://kubernetes.io/docs/reference/kubectl/generated/kubectl_cordon/)."""
        patch = {"spec": {"unschedulable": True}}
        return self._json(
            f"cordon node {name}", self.core.patch_node, name, patch, _content_type="application/merge-patch+json"
        )

    def pod_log(self, namespace: str, name: str, container: str, tail_lines: int = 1) -> str:
        """The last ``tail_lines`` lines a container of a pod printed (`kubectl logs --tail`)."""
        what, call = f"read the log of {namespace}/{name} container {container}", self.core.read_namespaced_pod_log
        return self._call(what, call, name, namespace, container=container, tail_lines=tail_lines).decode(
            "utf-8", "replace"
        )

    def delete_pod(self, namespace: str, name: str) -> dict:
        """Delete a pod at once (grace 0), as a reclaimed node loses it; its controller makes a new one."""
        return self._json(
            f"delete pod {namespace}/{name}", self.core.delete_namespaced_pod, name, namespace, grace_period_seconds=0
        )

    def list_daemonsets(self) -> list[dict]:
        return self._json("list daemonsets", self.apps.list_daemon_set_for_all_namespaces)["items"]

    def list_deployments(self) -> list[dict]:
        return self._json("list deployments", self.apps.list_deployment_for_all_namespaces)["items"]

    def get_raycluster(self, namespace: str, name: str) -> dict:
        crd = ("ray.io", "v1", namespace, "rayclusters", name)  # group, version, namespace, plural, name
        return self._json(f"RayCluster {namespace}/{name}", self.custom.get_namespaced_custom_object, *crd)

    def exec(
        self,
        pod: str,
        namespace: str,
        command: list[str],
        *,
        stdin: str | None = None,
        on_line: Callable[[str], None] | None = None,
        timeout_s: float = 600,
    ) -> ExecResult:
        """`kubectl exec` through the API's exec subresource (a websocket); no port leaves the pod."""
        from kubernetes.stream import stream

        try:
            ws = stream(
                self.core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                command=command,
                stdin=stdin is not None,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        except Exception as e:  # noqa: BLE001
            raise DriverError(f"cannot exec into pod {namespace}/{pod} at {self.host}: {_root_cause(e)}") from None
        got: dict[str, list[str]] = {"out": [], "err": []}
        partial = {"out": "", "err": ""}  # each channel's line not ended yet, for on_line

        def drain(final: bool = False) -> None:
            for kind, peek, read in (("out", ws.peek_stdout, ws.read_stdout), ("err", ws.peek_stderr, ws.read_stderr)):
                got[kind].append(read() if peek() else "")
                *lines, partial[kind] = (partial[kind] + got[kind][-1]).split("\n")
                if final and partial[kind]:  # a last line the stream's close ended
                    lines.append(partial[kind])
                if on_line:
                    for line in lines:
                        on_line(line)

        deadline = time.monotonic() + timeout_s
        try:
            if stdin is not None:
                ws.write_stdin(stdin)
            while ws.is_open():
                if time.monotonic() > deadline:
                    raise DriverError(f"`{' '.join(command[:4])} …` in pod {pod} ran past {timeout_s:.0f} s")
                ws.update(timeout=1)
                drain()
            drain(final=True)  # frames that arrived with the close
            rc = ws.returncode
        except DriverError:
            raise
        except Exception as e:  # noqa: BLE001 - a cut websocket surfaces as many types (closed socket, SSL, a
            # returncode read from an empty error channel): each is one dropped stream, which callers may retry
            raise DriverError(
                f"the exec stream of `{' '.join(command[:4])} …` in pod {namespace}/{pod} dropped: {_root_cause(e)}"
            ) from None
        finally:
            ws.close()
        return ExecResult(rc if rc is not None else 1, "".join(got["out"]), "".join(got["err"]))


def _root_cause(e: BaseException) -> str:
    """The innermost reason of a wrapped connection error, e.g. 'Connection refused'."""
    seen = e
    while True:
        nxt = getattr(seen, "reason", None) or seen.__cause__ or seen.__context__
        if not isinstance(nxt, BaseException) or nxt is seen:
            break
        seen = nxt
    return f"{type(seen).__name__}: {seen}"


def running_on(pods: list[dict]) -> dict[str, str]:
    """Each Running pod of a pod list -> the node it runs on."""
    running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
    return {p["metadata"]["name"]: p.get("spec", {}).get("nodeName", "?") for p in running}


class PodLister(Protocol):
    def list_pods(self, namespace: str, label_selector: str) -> list[dict]: ...


class ConfigMaps(Protocol):  # the idle guard's record, as the lease and `status` read it
    def get_configmap(self, namespace: str, name: str) -> dict: ...
    def patch_configmap(self, namespace: str, name: str, patch: dict) -> dict: ...


Api = TypeVar("Api", bound=PodLister)


@dataclass(frozen=True)
class RayClusterPods(Generic[Api]):
    """The Kubernetes API of a stack's cluster and where its RayCluster lives; `kube` keeps its own type (a KubeApi,
    or the reader verify is given)."""

    kube: Api
    namespace: str
    raycluster: str
    stack: str = ""

    def selector(self, node_type: str) -> str:
        """The label selector of the RayCluster's pods of one node type (head or worker)."""
        return f"ray.io/cluster={self.raycluster},ray.io/node-type={node_type}"

    def pods(self, node_type: str) -> list[str]:
        """Running pods of the RayCluster of one node type (head or worker), by name."""
        return sorted(self.node_of_pods(node_type))

    def node_of_pods(self, node_type: str) -> dict[str, str]:
        """Every Running pod of a node type -> the node it runs on (NCCL's logs name a pod by its host name)."""
        return running_on(self.kube.list_pods(self.namespace, self.selector(node_type)))

    def head_pod(self) -> str:
        if not (heads := self.pods("head")):
            raise DriverError(
                f"no running head pod of RayCluster {self.namespace}/{self.raycluster}: "
                f"kubectl -n {self.namespace} get pods -l ray.io/cluster={self.raycluster}; "
                f"`python -m automation verify --stack {self.stack or 'S'}` says why"
            )
        return heads[0]
