"""The RayCluster builder keeps the Ray head reachable only from inside the cluster.

`serviceType`, `LoadBalancer`, `NodePort` and `hostPort` are covered in test_manifests.py; this file
covers KubeRay's other way out: `headGroupSpec.enableIngress: true` makes the operator create an Ingress
to the head service's dashboard port (8265), and the dashboard runs arbitrary code on the cluster
(https://docs.ray.io/en/latest/cluster/kubernetes/k8s-ecosystem/ingress.html, warning at the top;
the field is in tests/fixtures/kuberay/raycluster.schema.json, KubeRay v1.5.2).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import quiet_stack

from infra import manifests as m

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["us-east-2", "us-west-2"])
def head_group(request):
    cfg = quiet_stack(request.param)
    return m.raycluster_spec(cfg.ray)["headGroupSpec"]


def test_head_group_asks_kuberay_for_no_ingress(head_group):
    # KubeRay's default is false, so an absent key is as good as an explicit false.
    value = head_group.get("enableIngress", False)
    assert value is False, f"expected headGroupSpec.enableIngress absent or false (no Ingress to 8265), got {value!r}"
