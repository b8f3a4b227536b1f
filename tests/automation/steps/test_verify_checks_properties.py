"""Properties of verify's device-plugin coverage (automation/steps/verify_checks.py, ``check_daemonsets``): a
plugin covers the GPU nodes only if it may run on every one of them and is ready there, whichever node of N is
the one it misses.

The stand-in cluster keeps to the Kubernetes API's meaning of a DaemonSet's status: ``desiredNumberScheduled``
is "the total number of nodes that should be running the daemon pod", ``numberReady`` those of them whose pod is
ready (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/daemon-set-v1/#DaemonSetStatus),
so desired is exactly the number of nodes the template's selector and tolerations admit and ready is at most
that. The GPU nodes carry the taint ``nvidia.com/gpu=true:NoSchedule`` as infra/manifests.py gives them.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from automation.steps.verify_checks import check_daemonsets

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True)
TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
PLUGINS = {"nvidia-device-plugin-daemonset": "NVIDIA device plugin", "aws-efa-k8s-device-plugin": "EFA device plugin"}


@st.composite
def gpu_nodes(draw) -> list[dict]:
    """1 to 8 GPU nodes; each may lack the label ``efa=true`` or the GPU taint."""
    out = []
    for i in range(draw(st.integers(min_value=1, max_value=8))):
        labels = {"role": "gpu-worker"} | ({"efa": "true"} if draw(st.booleans()) else {})
        spec = {"taints": [TAINT]} if draw(st.booleans()) else {}
        out.append({"metadata": {"name": f"gpu-{i}", "labels": labels}, "spec": spec})
    return out


def _admits(template: dict, node: dict) -> bool:
    """The scheduler's view for the two knobs drawn here: the nodeSelector and the GPU taint's toleration."""
    labels = node["metadata"]["labels"]
    selected = all(labels.get(k) == v for k, v in (template.get("nodeSelector") or {}).items())
    tolerated = not node["spec"] or bool(template.get("tolerations"))
    return selected and tolerated


@st.composite
def plugin(draw, name: str, nodes: list[dict]) -> dict:
    template = {}
    if draw(st.booleans()):
        template["nodeSelector"] = {"efa": "true"}
    if draw(st.booleans()):
        template["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    desired = sum(_admits(template, n) for n in nodes)
    ready = draw(st.integers(min_value=0, max_value=desired))
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"template": {"spec": template}},
        "status": {"desiredNumberScheduled": desired, "numberReady": ready},
    }


def _passes(rows, label: str) -> bool:
    mine = [r.status for r in rows if r.check == label]
    return bool(mine) and all(s == "pass" for s in mine)


@PROPERTY
@given(data=st.data())
def test_a_plugin_passes_only_when_ready_on_every_gpu_node(data):
    nodes = data.draw(gpu_nodes(), label="nodes")
    sets = [data.draw(plugin(name, nodes), label=name) for name in PLUGINS]
    rows = check_daemonsets(sets, nodes)
    for ds in sets:
        name, st_ = ds["metadata"]["name"], ds["status"]
        everywhere = all(_admits(ds["spec"]["template"]["spec"], n) for n in nodes)
        expected = everywhere and st_["numberReady"] == len(nodes)
        got = _passes(rows, PLUGINS[name])
        assert got == expected, (
            f"{name}: admitted on all {len(nodes)} nodes={everywhere}, ready {st_['numberReady']}/"
            f"{st_['desiredNumberScheduled']}: expected pass={expected}, got {[(r.check, r.status) for r in rows]}"
        )


@PROPERTY
@given(n=st.integers(min_value=2, max_value=8), data=st.data())
def test_one_gpu_node_the_plugin_cannot_reach_fails_it_wherever_that_node_is_listed(n, data):
    miss = data.draw(st.integers(min_value=0, max_value=n - 1), label="missed node")
    nodes = [
        {"metadata": {"name": f"gpu-{i}", "labels": {"role": "gpu-worker", "efa": "false" if i == miss else "true"}}}
        for i in range(n)
    ]
    ds = {
        "metadata": {"name": "aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"nodeSelector": {"efa": "true"}}}},
        "status": {"desiredNumberScheduled": n - 1, "numberReady": n - 1},
    }
    rows = check_daemonsets([ds], nodes)
    assert not _passes(rows, "EFA device plugin"), f"node {miss} of {n} unreachable: got {rows}"


def test_a_plugin_short_of_its_desired_pods_fails_even_when_its_ready_count_matches_the_gpu_nodes():
    # desired 3: the 2 GPU nodes and a system node; 2 ready. The status counts pods, not which node holds them,
    # so the one not ready may be on a GPU node: coverage is not shown.
    nodes = [{"metadata": {"name": f"gpu-{i}", "labels": {"role": "gpu-worker"}}} for i in range(2)]
    ds = {
        "metadata": {"name": "aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "status": {"desiredNumberScheduled": 3, "numberReady": 2},
    }
    rows = check_daemonsets([ds], nodes)
    assert not _passes(rows, "EFA device plugin"), f"2 of 3 ready counted as covering 2 GPU nodes: {rows}"


def test_a_toleration_of_everything_reaches_the_tainted_gpu_nodes():
    # "An empty key with operator Exists matches all keys, values and effects which means this will tolerate
    # everything" (https://kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/)
    nodes = [
        {"metadata": {"name": f"gpu-{i}", "labels": {"role": "gpu-worker"}}, "spec": {"taints": [TAINT]}}
        for i in range(2)
    ]
    ds = {
        "metadata": {"name": "aws-efa-k8s-device-plugin", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"tolerations": [{"operator": "Exists"}]}}},
        "status": {"desiredNumberScheduled": 2, "numberReady": 2},
    }
    rows = check_daemonsets([ds], nodes)
    assert _passes(rows, "EFA device plugin"), f"a key-less Exists toleration did not reach the GPU nodes: {rows}"
