"""Every name the RayCluster and the charts hand to Kubernetes or Helm is one the API server accepts.

The API server refuses (or, for a volume, a pod never starts with) a container name, volume name,
namespace or label key that breaks these rules, but the rendered dicts look fine to a schema check:
kubernetes-validate's schemas carry no name patterns. Rules:
https://kubernetes.io/docs/concepts/overview/working-with-objects/names/ (DNS-1123 label),
https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set (label keys),
https://helm.sh/docs/chart_best_practices/conventions/ and `helm install`'s release-name check (DNS-1123, 53 chars).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import quiet_stack

from infra import manifests as m

REPO = Path(__file__).resolve().parents[2]
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
HELM_RELEASE_MAX = 53


@pytest.fixture(scope="module")
def cfg():
    return quiet_stack("us-west-2")


def pod_specs(cfg) -> dict[str, dict]:
    spec = m.raycluster_spec(cfg.ray)
    return {"head": spec["headGroupSpec"]["template"], "worker": spec["workerGroupSpecs"][0]["template"]}


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    return bool(LABEL_NAME.match(name)) and (not prefix or bool(DNS1123_SUBDOMAIN.match(prefix)))


@pytest.mark.parametrize("group", ["head", "worker"])
def test_every_volume_mount_names_a_volume_of_its_pod(cfg, group):
    pod = pod_specs(cfg)[group]["spec"]
    volumes = {v["name"] for v in pod["volumes"]}
    dangling = [vm for c in pod["containers"] for vm in c["volumeMounts"] if vm["name"] not in volumes]
    assert not dangling, f"{group}: expected every mount to name one of the volumes {sorted(volumes)}, got {dangling}"


@pytest.mark.parametrize("group", ["head", "worker"])
def test_container_and_volume_names_are_dns1123_labels(cfg, group):
    pod = pod_specs(cfg)[group]["spec"]
    names = [c["name"] for c in pod["containers"]] + [v["name"] for v in pod["volumes"]]
    bad = [n for n in names if not DNS1123_LABEL.match(str(n))]
    assert not bad, f"{group}: expected DNS-1123 labels (lowercase, digits, '-'), got {bad}"


@pytest.mark.parametrize("group", ["head", "worker"])
def test_pod_label_keys_are_valid_kubernetes_label_keys(cfg, group):
    keys = list(pod_specs(cfg)[group]["metadata"]["labels"])
    bad = [k for k in keys if not is_label_key(k)]
    assert not bad, f"{group}: expected label keys '[lowercase-dns-prefix/]name', got {bad}"


def test_chart_release_names_and_namespaces_are_valid_for_helm(cfg):
    bad = {
        short: (pin.release, pin.namespace)
        for short, pin in m.chart_pins(cfg).items()
        if not (
            DNS1123_LABEL.match(str(pin.release))
            and len(pin.release) <= HELM_RELEASE_MAX
            and DNS1123_LABEL.match(str(pin.namespace))
        )
    }
    assert not bad, f"expected DNS-1123 release names (<= {HELM_RELEASE_MAX} chars) and namespaces, got {bad}"
