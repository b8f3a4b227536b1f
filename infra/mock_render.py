"""Offline render of the Pulumi program: every resource it would declare, with its type, name,
parent and key inputs (secrets masked).

This is a RENDER, not a preview: the program runs under Pulumi's mock engine
(``pulumi.runtime.set_mocks``, ``preview=False``), with no pulumi CLI, no credentials and no
cloud state. It shows what the code declares for a stack's config; it cannot show what
``pulumi preview`` would change in a real account (diffs, replacements, provider-side
defaults, or errors AWS would raise). Resource outputs are made up by the mock below.

    python -m automation render --stack us-east-2 [--json]
"""

from __future__ import annotations

import contextvars
import json
import runpy
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockMonitor, Mocks
from pulumi.runtime.stack import Stack, run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from infra.config import PROJECT, stack_config_values

MASK = "[secret]"
RENDER_BANNER = (
    "RENDER, not a preview: the Pulumi program ran offline under Pulumi's mock engine "
    "(no pulumi CLI, no credentials, no cloud state). It lists what the code declares; "
    "`pulumi preview` against the real stack is what shows changes."
)
# Input names whose values are masked even when the SDK did not mark them secret.
_SECRET_NAMES = ("kubeconfig", "password", "token", "secret", "privatekey")

# Made-up outputs the real providers would compute; enough for the program's wiring to resolve.
_FAKE_KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {"name": "render", "cluster": {"server": "https://render.invalid", "certificate-authority-data": "cmVuZGVy"}}
    ],
    "contexts": [{"name": "render", "context": {"cluster": "render", "user": "render"}}],
    "current-context": "render",
    "users": [{"name": "render", "user": {"token": "render-only"}}],
}


class RenderMocks(Mocks):
    """Answers the engine with the inputs echoed back plus the few outputs the program reads."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        state = dict(args.inputs)
        typ, name = args.typ, args.name
        fake_id = f"{name}-id"
        if typ == "eks:index:Cluster":
            state.update(
                eksCluster=_inner_eks_cluster(name, state.get("name") or name),
                kubeconfigJson=json.dumps(_FAKE_KUBECONFIG),
                kubeconfig=_FAKE_KUBECONFIG,
                clusterSecurityGroupId="sg-render-cluster",
                nodeSecurityGroupId="sg-render-cluster",
                oidcProviderArn=f"arn:aws:iam::123456789012:oidc-provider/oidc.eks.render.amazonaws.com/id/{name}",
                oidcIssuer=f"oidc.eks.render.amazonaws.com/id/{name}",
            )
        elif typ == "aws:ec2/launchTemplate:LaunchTemplate":
            state.update(latestVersion=1, arn=f"arn:aws:ec2:render:123456789012:launch-template/{fake_id}")
        elif typ == "aws:eks/nodeGroup:NodeGroup":
            state.setdefault("nodeGroupName", name)
            state["arn"] = f"arn:aws:eks:render:123456789012:nodegroup/{state.get('clusterName')}/{name}/render-id"
        elif typ == "aws:ec2/placementGroup:PlacementGroup":
            state.setdefault("name", name)
        elif typ == "aws:s3/bucket:Bucket":
            state.setdefault("bucket", f"{state.get('bucketPrefix', '')}render")
            state["arn"] = f"arn:aws:s3:::{state['bucket']}"
        elif typ == "aws:eks/podIdentityAssociation:PodIdentityAssociation":
            state["associationId"] = f"a-{fake_id}"
        elif typ == "aws:ecr/pullThroughCacheRule:PullThroughCacheRule":
            state["registryId"] = "123456789012"  # the account's registry, as the provider reads it back
        elif typ in ("aws:iam/role:Role", "aws:kms/key:Key"):
            state.setdefault("name", name)
            state["arn"] = f"arn:aws:render::123456789012:{name}"
        return fake_id, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict, list | None]:
        return {}, None


def _inner_eks_cluster(component_name: str, cluster_name: str) -> dict:
    """A reference to the ``aws.eks.Cluster`` that pulumi-eks's ``Cluster`` exports as ``eksCluster``.

    The remote component reaches the mock as one opaque resource, so the inner cluster is
    registered here, with the URN pulumi-eks gives it (child ``<name>-eksCluster``), for the
    SDK's ``getResource`` call that rehydrates the reference. pulumi-eks 4.4.0's output:
    ``pulumi_eks/cluster.py`` ``Cluster.eks_cluster -> Output[pulumi_aws.eks.Cluster]``.
    """
    typ = "eks:index:Cluster$aws:eks/cluster:Cluster"
    urn = f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}::{typ}::{component_name}-eksCluster"
    fake_id = f"{cluster_name}-id"
    monitor = pulumi.runtime.settings.get_monitor()
    assert isinstance(monitor, MockMonitor), "mock_eks_cluster runs only under render()'s mocks"
    monitor.resources[urn] = MockMonitor.ResourceRegistration(urn, fake_id, {"name": cluster_name, "id": fake_id})
    # The wire form of a resource reference (pulumi/runtime/rpc.py, _special_resource_sig).
    return {rpc._special_sig_key: rpc._special_resource_sig, "urn": urn, "id": fake_id}


@dataclass
class ResourceRecord:
    type: str
    name: str
    parent: str | None
    inputs: dict[str, Any]
    provider: str | None = None  # name of the explicit provider resource, if any
    urn: str = ""
    parent_urn: str = ""
    depends_on: tuple[str, ...] = ()  # names of the resources it waits for (data and explicit)
    retain_on_delete: bool = False  # `destroy` leaves it in the cloud
    ignore_changes: tuple[str, ...] = ()  # properties `up` leaves as the cloud has them
    delete_before_replace: bool = False  # a replacement deletes the old one first


class RecordingMonitor(MockMonitor):
    """A MockMonitor that also records each registration with its parent and masked inputs."""

    def __init__(self, mocks: Mocks):
        super().__init__(mocks)
        self.records: list[ResourceRecord] = []
        self._names_by_urn: dict[str, str] = {}

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        self._names_by_urn[response.urn] = request.name
        if request.type != "pulumi:pulumi:Stack":
            secret_paths = set(_secret_fields(request.object))
            inputs = rpc.deserialize_properties(request.object)
            self.records.append(
                ResourceRecord(
                    type=request.type,
                    name=request.name,
                    parent=self._names_by_urn.get(request.parent) if request.parent else None,
                    inputs=mask_secrets({k: v for k, v in inputs.items()}, secret_paths),
                    # A provider reference is "<urn>::<id>".
                    provider=self._names_by_urn.get(request.provider.rsplit("::", 1)[0]) if request.provider else None,
                    urn=response.urn,
                    parent_urn=request.parent,
                    depends_on=tuple(self._names_by_urn.get(u, u) for u in request.dependencies),
                    retain_on_delete=request.retainOnDelete,
                    ignore_changes=tuple(request.ignoreChanges),
                    delete_before_replace=request.deleteBeforeReplace,
                )
            )
        return response


def _secret_fields(struct) -> list[str]:
    """Top-level input names whose value the SDK sent wrapped as a secret."""
    out = []
    for key, value in struct.fields.items():
        if value.WhichOneof("kind") == "struct_value":
            sig = value.struct_value.fields.get(rpc._special_sig_key)
            if sig is not None and sig.string_value == rpc._special_secret_sig:
                out.append(key)
    return out


def mask_secrets(inputs: dict[str, Any], secret_fields: AbstractSet[str] = frozenset()) -> dict[str, Any]:
    """``inputs`` with secret-marked fields and secret-looking names replaced by MASK (recursively)."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: MASK if _looks_secret(k) else walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        if isinstance(value, (str, int, float, bool)) or value is None:
            return value
        return str(value)  # resource references and other SDK objects

    return {k: MASK if (k in secret_fields or _looks_secret(k)) else walk(v) for k, v in inputs.items()}


def _looks_secret(name: str) -> bool:
    # Suffix match: "kubeconfigJson" and "token" are secret, "httpTokens" (IMDS mode) is not.
    lowered = name.lower().replace("_", "")
    return any(lowered.endswith(s) or lowered.endswith(s + "json") for s in _SECRET_NAMES)


@dataclass
class Render:
    """What one run of the program under the mocks declared."""

    stack: str
    records: list[ResourceRecord]
    outputs: dict[str, Any] = field(default_factory=dict)
    secret_outputs: tuple[str, ...] = ()


def run_program(stack: str, project_dir: Path, config: dict[str, str] | None = None) -> Render:
    """Run ``project_dir/__main__.py`` for ``stack`` under the mock engine (``preview=False``).

    ``config`` (``project:key`` -> string, as the engine passes it) defaults to the stack's
    merged Pulumi.yaml + Pulumi.<stack>.yaml values. Runs in a fresh context so consecutive
    renders share no Pulumi global state. Exceptions of the program (StackConfigError, a failing
    assert inside an apply) propagate.
    """
    project_dir = Path(project_dir).resolve()
    values = stack_config_values(stack, project_dir) if config is None else dict(config)
    return contextvars.Context().run(_run_in_context, stack, project_dir, values)


def _run_in_context(stack: str, project_dir: Path, values: dict[str, str]) -> Render:
    mocks = RenderMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_all_config(values, [])
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    root = pulumi.runtime.get_root_resource()

    def program() -> None:
        runpy.run_path(str(project_dir / "__main__.py"), run_name="__main__")

    _sync_await(run_pulumi_func(program))
    assert isinstance(root, Stack), f"the mocks' root resource is {root!r}, not the stack"
    outputs, secret = {}, []
    for key, value in root.outputs.items():
        out = pulumi.Output.from_input(value)
        outputs[key] = _sync_await(out.future())
        if _sync_await(out.is_secret()):
            secret.append(key)
    return Render(stack=stack, records=list(monitor.records), outputs=outputs, secret_outputs=tuple(secret))


def render_stack(stack: str, project_dir: Path) -> list[dict]:
    """Rows of every resource the stack's program declares: type, name, parent, inputs (masked).

    The last row has type ``pulumi:pulumi:StackOutputs`` and the stack outputs as inputs,
    secret ones masked.
    """
    result = run_program(stack, project_dir)
    rows = [
        {"type": r.type, "name": r.name, "parent": r.parent, "inputs": r.inputs} for r in tree_order(result.records)
    ]
    outputs = {k: MASK if k in result.secret_outputs else v for k, v in result.outputs.items()}
    rows.append({"type": "pulumi:pulumi:StackOutputs", "name": stack, "parent": None, "inputs": outputs})
    return rows


def tree_order(records: list[ResourceRecord]) -> list[ResourceRecord]:
    """``records`` depth-first from the stack's components, siblings by (type, name).

    The engine registers resources concurrently, so the raw order changes from run to run;
    this one does not, which keeps two renders diffable.
    """
    urns = {r.urn for r in records}
    children: dict[str | None, list[ResourceRecord]] = {}
    for r in records:
        children.setdefault(r.parent_urn if r.parent_urn in urns else None, []).append(r)
    ordered: list[ResourceRecord] = []

    def visit(parent: str | None) -> None:
        for r in sorted(children.get(parent, []), key=lambda r: (r.type, r.name)):
            ordered.append(r)
            visit(r.urn)

    visit(None)
    return ordered


# Inputs shown per type in the human format (the --json format carries all of them).
KEY_INPUTS: dict[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("cidrBlock",),
    "aws:ec2/subnet:Subnet": ("availabilityZone", "cidrBlock", "mapPublicIpOnLaunch"),
    "aws:ec2/route:Route": ("destinationCidrBlock", "gatewayId", "natGatewayId"),
    "aws:ec2/placementGroup:PlacementGroup": ("strategy",),
    "aws:ec2/securityGroup:SecurityGroup": ("description",),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": (
        "ipProtocol",
        "referencedSecurityGroupId",
        "cidrIpv4",
    ),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": ("ipProtocol", "referencedSecurityGroupId", "cidrIpv4"),
    "aws:ec2/launchTemplate:LaunchTemplate": (
        "networkInterfaces",
        "metadataOptions",
        "placement",
        "capacityReservationSpecification",
    ),
    "aws:eks/nodeGroup:NodeGroup": (
        "instanceTypes",
        "amiType",
        "subnetIds",
        "scalingConfig",
        "labels",
        "taints",
        "nodeRepairConfig",
    ),
    "aws:kms/key:Key": ("enableKeyRotation",),
    "eks:index:Cluster": (
        "name",
        "version",
        "endpointPublicAccess",
        "publicAccessCidrs",
        "authenticationMode",
        "createOidcProvider",
        "encryptionConfigKeyArn",
        "enabledClusterLogTypes",
    ),
    "kubernetes:helm.sh/v3:Release": ("chart", "version", "repositoryOpts", "namespace", "values"),
    "kubernetes:core/v1:Namespace": ("metadata",),
    "kubernetes:ray.io/v1:RayCluster": ("metadata", "spec"),
    "pulumi:providers:kubernetes": ("kubeconfig",),
    "pulumi:pulumi:StackOutputs": (),
}
_MAX_VALUE = 160


def format_render(rows: list[dict]) -> str:
    """Human-readable render: the banner, then one block per resource with its key inputs."""
    lines = [
        RENDER_BANNER,
        "",
        f"{len(rows) - sum(r['type'] == 'pulumi:pulumi:StackOutputs' for r in rows)} resources",
        "",
    ]
    for row in rows:
        parent = f"  (parent: {row['parent']})" if row["parent"] else ""
        lines.append(f"{row['type']}  {row['name']}{parent}")
        keys = KEY_INPUTS.get(row["type"])
        shown = row["inputs"] if keys in (None, ()) else {k: row["inputs"][k] for k in keys if k in row["inputs"]}
        for key, value in shown.items():
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
            if len(text) > _MAX_VALUE:
                text = text[: _MAX_VALUE - 3] + "..."
            lines.append(f"    {key}: {text}")
    return "\n".join(lines)
