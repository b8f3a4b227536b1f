"""The recorded cluster (tests/fixtures/k8s/) is consistent with itself, as a real cluster is: no pod
Running on a node that cannot hold it, each DaemonSet scheduled on exactly the nodes it targets, and
every file naming its source in the folder's README."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from conftest import FIXTURES

from automation.steps.verify_checks import name_of, quantity, targets

K8S = FIXTURES / "k8s"


def load(stem: str) -> dict:
    return json.loads((K8S / f"{stem}.json").read_text())


def running_pods_by_node(pods: list[dict]) -> dict[str, list[dict]]:
    on = defaultdict(list)
    for pod in pods:
        if pod.get("status", {}).get("phase") == "Running":
            on[pod["spec"].get("nodeName", "<none>")].append(pod)
    return on


def overcommitted(nodes: list[dict], pods: list[dict]) -> list[str]:
    """`node: resource requested R > allocatable A` for each resource the Running pods on a node exceed."""
    by_name = {name_of(n): n for n in nodes}
    problems = []
    for node_name, on_node in running_pods_by_node(pods).items():
        node = by_name.get(node_name)
        if node is None:
            problems.append(f"{[name_of(p) for p in on_node]} Running on unknown node {node_name}")
            continue
        asked: dict[str, float] = defaultdict(float)
        for pod in on_node:
            for c in pod["spec"].get("containers", []):
                for key, value in (c.get("resources", {}).get("requests") or {}).items():
                    asked[key] += quantity(value)
            if not targets(pod["spec"], node):
                problems.append(f"{name_of(pod)} Running on {node_name}, which its selector or tolerations exclude")
        alloc = node["status"].get("allocatable", {})
        problems += [
            f"{node_name}: {k} requested {v:g} > allocatable {quantity(alloc.get(k, 0)):g}"
            for k, v in sorted(asked.items())
            if v > quantity(alloc.get(k, 0))
        ]
    return problems


def test_every_running_pod_fits_its_node():
    problems = overcommitted(load("nodes")["items"], load("pods")["items"])
    assert problems == [], f"expected every Running pod to fit its node's allocatable, got {problems}"


def test_the_consistency_check_catches_a_pod_running_without_its_huge_pages():
    """The contradiction the first recorded cluster had: hugepages-2Mi 0 allocatable, 5120Mi requested, Running."""
    nodes = load("nodes")["items"]
    for n in nodes:
        n["status"]["allocatable"]["hugepages-2Mi"] = "0"
    problems = overcommitted(nodes, load("pods")["items"])
    assert any("hugepages-2Mi requested" in p for p in problems), f"expected a hugepages-2Mi problem, got {problems}"


@pytest.mark.parametrize("ds", load("daemonsets")["items"], ids=name_of)
def test_each_daemonset_is_scheduled_on_exactly_the_nodes_it_targets(ds):
    nodes = load("nodes")["items"]
    want = sum(targets(ds["spec"]["template"]["spec"], n) for n in nodes)
    got = ds["status"]["desiredNumberScheduled"]
    assert got == want, f"{name_of(ds)}: desiredNumberScheduled {got}, but it targets {want} of the recorded nodes"


def test_every_fixture_file_names_its_source_in_the_readme():
    readme = (K8S / "README.md").read_text()
    missing = [p.name for p in sorted(K8S.iterdir()) if p.name != "README.md" and f"`{p.name}`" not in readme]
    assert missing == [], f"expected each file named in tests/fixtures/k8s/README.md with its source, missing {missing}"
