"""infra.mock_render: the offline render lists every resource with type, name, parent and
inputs, masks secrets, and says it is not a preview."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

from infra.mock_render import MASK, format_render, mask_secrets, render_stack


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    return render_stack("us-east-2", REPO)


def test_rows_have_type_name_parent_and_inputs(rows):
    bad = [r for r in rows if set(r) != {"type", "name", "parent", "inputs"}]
    assert not bad, f"rows with other keys: {bad[:2]}"


def test_render_lists_the_components_and_their_children(rows):
    parents = {r["name"]: r["parent"] for r in rows}
    expected = {
        "ray-efa-eks-gpu-lt": "ray-efa-eks-gpu",
        "ray-efa-eks-gpu-ng": "ray-efa-eks-gpu",
        "ray-efa-eks-eks": "ray-efa-eks",
        "ray-efa-eks-ray-raycluster": "ray-efa-eks-ray",
        "ray-efa-eks-kuberay-operator": "ray-efa-eks-kuberay",
    }
    assert {k: parents.get(k) for k in expected} == expected


def test_render_is_json_serialisable_and_leaks_no_kubeconfig(rows):
    text = json.dumps(rows)
    assert "render-only" not in text and "certificate-authority-data" not in text, (
        "the kubeconfig leaked into the render"
    )
    outputs = rows[-1]
    assert outputs["type"] == "pulumi:pulumi:StackOutputs" and outputs["inputs"]["kubeconfig"] == MASK


def test_human_format_says_it_is_a_render_not_a_preview(rows):
    text = format_render(rows)
    assert text.startswith("RENDER, not a preview"), text[:80]
    assert "aws:ec2/launchTemplate:LaunchTemplate  ray-efa-eks-gpu-lt  (parent: ray-efa-eks-gpu)" in text
    assert "interfaceType" in text and "render-only" not in text


def block(text: str, header: str) -> list[str]:
    """The input lines of the resource block that starts with ``header`` in a human render."""
    after = text.split(header + "  (", 1)[1].splitlines()[1:]
    return [line.strip() for line in after[: next((i for i, x in enumerate(after) if not x.startswith("    ")), None)]]


def test_human_format_shows_the_gpu_node_groups_repair_and_the_node_monitoring_agent(rows):
    text = format_render(rows)
    ng = block(text, "aws:eks/nodeGroup:NodeGroup  ray-efa-eks-gpu-ng")
    agent = block(text, "aws:eks/addon:Addon  ray-efa-eks-node-monitoring-agent")
    got = ('nodeRepairConfig: {"enabled": true}' in ng, "addonVersion: v1.7.0-eksbuild.1" in agent)
    assert got == (True, True), f"expected the GPU group's repair and the agent's version in the render: {ng}, {agent}"


def test_mask_secrets_masks_marked_and_secret_named_fields_only():
    masked = mask_secrets(
        {"kubeconfig": "k", "values": {"password": "p", "httpTokens": "required"}, "plain": "x", "marked": "m"},
        {"marked"},
    )
    assert masked == {
        "kubeconfig": MASK,
        "values": {"password": MASK, "httpTokens": "required"},
        "plain": "x",
        "marked": MASK,
    }


def test_two_renders_are_identical(rows):
    again = render_stack("us-east-2", REPO)
    assert json.dumps(again) == json.dumps(rows), "the render order or content changed between two runs"


def test_children_follow_their_component(rows):
    names = [r["name"] for r in rows]
    network, vpc = names.index("ray-efa-eks-network"), names.index("ray-efa-eks-network-vpc")
    assert rows[vpc]["parent"] == "ray-efa-eks-network" and vpc > network
