"""The RayCluster validates against KubeRay v1.5.2's CRD schema in strict mode, and the core
objects (Namespace, the head and worker pod templates) against Kubernetes' own schemas."""

from __future__ import annotations

import copy
import json
from functools import cache

import jsonschema
import kubernetes_validate
import pytest
from conftest import REPO, quiet_stack

from infra import manifests as m

SCHEMA_DIR = REPO / "tests" / "fixtures" / "kuberay"
SHARED_SCHEMA_DIR = REPO.parent / "shared" / "schemas" / "kuberay"


@cache
def strict_raycluster_validator() -> jsonschema.Draft7Validator:
    """The v1.5.2 schema with additionalProperties: false on every closed object node.

    The API server drops unknown fields silently, so a typo would deploy a RayCluster without
    the setting; strict mode turns that into a test failure (see the fixture's README).
    """
    schema = json.loads((SCHEMA_DIR / "raycluster.schema.json").read_text())

    def close(node):
        if isinstance(node, dict):
            if (
                node.get("type") == "object"
                and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")
            ):
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return jsonschema.Draft7Validator(schema)


def _errors(obj) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in strict_raycluster_validator().iter_errors(obj)
    ]


@pytest.fixture(scope="module")
def cfg():
    return quiet_stack("us-west-2")


@pytest.fixture(scope="module")
def manifest(cfg):
    return m.raycluster_manifest(cfg.ray)


def test_raycluster_validates_strictly_against_kuberay_1_5_2(manifest):
    errors = _errors(manifest)
    assert not errors, f"schema errors: {errors}"


def test_strict_schema_catches_a_misspelled_field(manifest):
    broken = copy.deepcopy(manifest)
    broken["spec"]["workerGroupSpec"] = broken["spec"].pop("workerGroupSpecs")
    assert any("workerGroupSpec" in e for e in _errors(broken)), "a typo in spec keys went unnoticed"


def test_raycluster_identity_fields(manifest, cfg):
    got = (manifest["apiVersion"], manifest["kind"], manifest["metadata"])
    assert got == ("ray.io/v1", "RayCluster", {"name": cfg.ray.cluster_name, "namespace": cfg.ray.namespace})


@pytest.mark.skipif(not SHARED_SCHEMA_DIR.is_dir(), reason="no ../shared/schemas/kuberay next to this checkout")
@pytest.mark.parametrize("name", ["raycluster.schema.json", "rayjob.schema.json"])
def test_fixture_copy_equals_the_shared_schema(name):
    assert (SCHEMA_DIR / name).read_bytes() == (SHARED_SCHEMA_DIR / name).read_bytes(), f"{name} drifted from ../shared"


def _k8s_version(cfg) -> str:
    return f"{cfg.cluster.kubernetes_version}.0"


def test_namespace_is_a_valid_core_object(cfg):
    kubernetes_validate.validate(m.namespace_manifest(cfg.ray.namespace), _k8s_version(cfg), strict=True)


@pytest.mark.parametrize("group", ["head", "worker"])
def test_pod_templates_are_valid_core_pod_templates(cfg, manifest, group):
    spec = manifest["spec"]
    template = spec["headGroupSpec"]["template"] if group == "head" else spec["workerGroupSpecs"][0]["template"]
    pod_template = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": f"ray-{group}"},
        "template": template,
    }
    kubernetes_validate.validate(pod_template, _k8s_version(cfg), strict=True)


def test_core_schema_check_rejects_a_broken_template(cfg, manifest):
    template = copy.deepcopy(manifest["spec"]["workerGroupSpecs"][0]["template"])
    template["spec"]["containers"][0]["resourcez"] = template["spec"]["containers"][0].pop("resources")
    pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"}, "template": template}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod_template, _k8s_version(cfg), strict=True)
