"""Device-plugins component: Helm releases of nvidia-device-plugin (nvidia.com/gpu) and
aws-efa-k8s-device-plugin (vpc.amazonaws.com/efa), pinned, on the GPU nodes only, and beside them the EFA
counter reader's DaemonSet (infra/manifests.py `efa_counter_reader_daemonset`)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from infra.manifests import (
    ChartPin,
    efa_counter_reader_daemonset,
    efa_device_plugin_values,
    nvidia_device_plugin_values,
)


def helm_release(name: str, pin: ChartPin, values: dict, opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release:
    """A Helm release of ``pin`` (chart, exact version, repository) with ``values``."""
    return k8s.helm.v3.Release(
        name,
        name=pin.release,
        chart=pin.chart,
        version=pin.version,
        repository_opts={"repo": pin.repository},
        namespace=pin.namespace,
        create_namespace=pin.namespace != "kube-system",
        values=values,
        # Roll back a failed install instead of leaving a half-installed release behind.
        atomic=True,
        timeout=600,
        opts=opts,
    )


@dataclass(frozen=True)
class DevicePluginsArgs:
    nvidia: ChartPin
    efa: ChartPin
    gpu_instance_type: str
    provider: k8s.Provider
    gpu_nodes: pulumi.Resource  # the DaemonSets only become ready once the GPU nodes exist
    reader_image: pulumi.Input[str]  # the Ray workers' image reference (through the image cache when on)
    reader_needs: tuple[pulumi.Resource, ...] = ()  # the node role's right to pull through the cache


class DevicePlugins(pulumi.ComponentResource):
    """The NVIDIA and EFA device plugins and the EFA counter reader.

    Public outputs: ``nvidia_release``, ``efa_release`` (release names)."""

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:DevicePlugins", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=[args.gpu_nodes])
        nvidia = helm_release(f"{name}-nvidia", args.nvidia, nvidia_device_plugin_values(), child)
        efa = helm_release(f"{name}-efa", args.efa, efa_device_plugin_values(args.gpu_instance_type), child)
        self.nvidia_release: pulumi.Output[str] = nvidia.name
        self.efa_release: pulumi.Output[str] = efa.name
        spec = pulumi.Output.from_input(args.reader_image).apply(lambda i: efa_counter_reader_daemonset(i)["spec"])
        k8s.apps.v1.DaemonSet(
            f"{name}-efa-counter-reader",
            metadata=efa_counter_reader_daemonset("")["metadata"],  # known at preview: it names no image
            spec=spec,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(args.reader_needs))),
        )
        self.releases = [nvidia, efa]
        self.register_outputs({"nvidia_release": self.nvidia_release, "efa_release": self.efa_release})
