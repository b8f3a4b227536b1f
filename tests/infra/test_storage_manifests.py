"""The Ray pods' ServiceAccount is a valid core object, and both pod templates run as it."""

from __future__ import annotations

import kubernetes_validate
from conftest import quiet_stack

from infra import manifests as m


def _cfg():
    return quiet_stack("us-west-2")


def test_service_account_is_a_valid_core_object_in_the_ray_namespace():
    cfg = _cfg()
    sa = m.service_account_manifest(cfg.ray.namespace)
    kubernetes_validate.validate(sa, f"{cfg.cluster.kubernetes_version}.0", strict=True)
    assert sa["metadata"] == {"name": m.RAY_SERVICE_ACCOUNT, "namespace": cfg.ray.namespace}, sa["metadata"]


def test_head_and_worker_templates_run_as_the_service_account():
    ray = _cfg().ray
    got = [
        m.ray_head_template(ray)["spec"]["serviceAccountName"],
        m.ray_worker_template(ray)["spec"]["serviceAccountName"],
    ]
    assert got == [m.RAY_SERVICE_ACCOUNT] * 2, f"head and worker serviceAccountName: {got}"
