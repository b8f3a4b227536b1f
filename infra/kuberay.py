"""KubeRay component: the kuberay-operator Helm release (pinned; it installs the ray.io CRDs),
on the system node."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.device_plugins import helm_release
from infra.manifests import ChartPin, kuberay_operator_values


@dataclass(frozen=True)
class KubeRayArgs:
    chart: ChartPin
    provider: k8s.Provider
    system_nodes: pulumi.Resource  # the operator's pod needs a node with role=system


class KubeRay(pulumi.ComponentResource):
    """The KubeRay operator. Public outputs: ``release_name``, ``namespace``."""

    def __init__(self, name: str, args: KubeRayArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:KubeRay", name, None, opts)
        release = helm_release(
            f"{name}-operator",
            args.chart,
            kuberay_operator_values(),
            pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.system_nodes]),
        )
        self.release = release
        self.release_name: pulumi.Output[str] = release.name
        self.namespace: pulumi.Output[str] = release.namespace
        self.register_outputs({"release_name": self.release_name, "namespace": self.namespace})
