"""RayCluster component: the Ray namespace and the RayCluster custom resource built by
``infra.manifests.raycluster_spec``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import pulumi
import pulumi_kubernetes as k8s

from infra.config import RayConfig
from infra.manifests import RAY_API_VERSION, RAY_KIND, namespace_manifest, raycluster_spec, service_account_manifest


@dataclass(frozen=True)
class RayClusterArgs:
    ray: RayConfig
    provider: k8s.Provider
    # The CRD comes with the operator and the pods need the device plugins' resources;
    # neither is a data dependency.
    depends_on: tuple[pulumi.Resource, ...] = ()
    # What the Ray ServiceAccount carries: under IRSA the role annotation (infra/pod_identity.py).
    service_account_annotations: Mapping[str, pulumi.Input[str]] | None = None
    # The Ray image's reference when it differs from ray.image: through the image cache (infra/image_cache.py).
    image: pulumi.Input[str] | None = None


class RayCluster(pulumi.ComponentResource):
    """One RayCluster. Public outputs: ``name``, ``namespace``, ``head_service_name``."""

    def __init__(self, name: str, args: RayClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:RayCluster", name, None, opts)
        ns = namespace_manifest(args.ray.namespace)
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata=ns["metadata"],
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account",
            metadata={
                **service_account_manifest(args.ray.namespace)["metadata"],
                "namespace": namespace.metadata["name"],
                **({"annotations": dict(args.service_account_annotations)} if args.service_account_annotations else {}),
            },
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
        )
        cluster = k8s.apiextensions.CustomResource(
            f"{name}-raycluster",
            api_version=RAY_API_VERSION,
            kind=RAY_KIND,
            metadata={"name": args.ray.cluster_name, "namespace": namespace.metadata["name"]},
            spec=_spec(args),
            opts=pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[*args.depends_on, account]),
        )
        self.name: pulumi.Output[str] = cluster.metadata["name"]
        self.namespace: pulumi.Output[str] = namespace.metadata["name"]
        self.head_service_name: pulumi.Output[str] = cluster.metadata["name"].apply(
            lambda _: args.ray.head_service_name
        )
        self.register_outputs(
            {"name": self.name, "namespace": self.namespace, "head_service_name": self.head_service_name}
        )


def _spec(args: RayClusterArgs) -> pulumi.Input[dict]:
    if args.image is None:
        return raycluster_spec(args.ray)
    return pulumi.Output.from_input(args.image).apply(lambda ref: raycluster_spec(replace(args.ray, image=ref)))
