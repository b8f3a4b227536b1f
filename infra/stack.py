"""Wiring only: config -> components -> the stack outputs. No settings are decided here."""

from __future__ import annotations

from typing import Any

import pulumi

from infra.cluster import Cluster, ClusterArgs
from infra.config import StackConfig, require_gpu_az
from infra.device_plugins import DevicePlugins, DevicePluginsArgs
from infra.efa_nodegroup import EfaNodeGroup, EfaNodeGroupArgs
from infra.idle_guard import IdleGuard, IdleGuardArgs
from infra.image_cache import ImageCache, ImageCacheArgs
from infra.kuberay import KubeRay, KubeRayArgs
from infra.manifests import RAY_SERVICE_ACCOUNT, chart_pins, image_cache_prefix
from infra.network import Network, NetworkArgs
from infra.pod_identity import PodIdentity, PodIdentityArgs
from infra.raycluster import RayCluster, RayClusterArgs
from infra.storage import RunBucket, RunBucketArgs, idle_guard_prefix

OUTPUT_NAMES = (
    "region",
    "gpu_az",
    "cluster_name",
    "kubeconfig",
    "nodegroup_name",
    "raycluster_name",
    "raycluster_namespace",
    "head_service_name",
    "bucket_name",
    "storage_uri",
    "pod_role_arn",
    "pod_identity_association_id",
    "ray_service_account",
    "pod_identity_mode",
)


def build(cfg: StackConfig) -> dict[str, Any]:
    """Declare every resource of the stack; returns the stack outputs by name (OUTPUT_NAMES).

    StackConfigError before declaring anything when gpuAvailabilityZone is empty (the placement group
    and the GPU subnet need one AZ).
    """
    gpu_az = require_gpu_az(cfg)
    name = cfg.cluster.name
    net = cfg.network
    network = Network(
        f"{name}-network",
        NetworkArgs(vpc_cidr=net.vpc_cidr, azs=net.azs, cluster_name=name, nat_az=net.nat_az, region=cfg.region),
    )
    cluster = Cluster(
        name,
        ClusterArgs(
            cluster=cfg.cluster,
            system_nodes=cfg.system_nodes,
            vpc_id=network.vpc_id,
            private_subnet_ids=network.private_subnet_ids,
        ),
    )
    gpu = EfaNodeGroup(
        f"{name}-gpu",
        EfaNodeGroupArgs(
            gpu=cfg.gpu_nodes,
            cluster_name=cluster.cluster_name,
            vpc_id=network.vpc_id,
            subnet_id=network.private_subnet_ids_by_az[gpu_az],
            cluster_security_group_id=cluster.cluster_security_group_id,
            node_role_arn=cluster.node_role_arn,
            depends_on=tuple(cluster.node_role_attachments),
        ),
    )
    pins = chart_pins(cfg)
    cache = _image_cache(cfg, name, cluster)
    plugins = _device_plugins(cfg, name, cluster, gpu, cache)
    kuberay = KubeRay(
        f"{name}-kuberay",
        KubeRayArgs(chart=pins["kuberay-operator"], provider=cluster.provider, system_nodes=cluster),
    )
    bucket = RunBucket(f"{name}-runs", RunBucketArgs(storage=cfg.storage))
    identity = PodIdentity(
        f"{name}-pod-identity",
        PodIdentityArgs(
            cluster_name=cluster.cluster_name,
            namespace=cfg.ray.namespace,
            service_account=RAY_SERVICE_ACCOUNT,
            bucket_arn=bucket.arn,
            prefix=cfg.storage.object_prefix,
            mode=cfg.storage.pod_identity_mode,
            oidc_provider_arn=cluster.oidc_provider_arn,
            oidc_issuer=cluster.oidc_issuer,
        ),
    )
    before_pods = (kuberay.release, *plugins.releases, *identity.ready, *(cache.ready if cache else ()))
    ray = RayCluster(
        f"{name}-ray",
        RayClusterArgs(
            ray=cfg.ray,
            provider=cluster.provider,
            depends_on=before_pods,
            service_account_annotations=identity.service_account_annotations,
            image=cache.image if cache else None,
        ),
    )
    if cfg.gpu_nodes.idle_minutes > 0:
        _idle_guard(cfg, name, cluster, gpu, ray, identity, bucket, cache.image if cache else cfg.ray.image)
    return _outputs(cfg, gpu_az, cluster, gpu, ray, bucket, identity)


def _device_plugins(cfg: StackConfig, name: str, cluster: Cluster, gpu, cache: ImageCache | None) -> DevicePlugins:
    """The device plugins and the EFA counter reader, which runs the workers' image (through the cache when on)."""
    pins = chart_pins(cfg)
    return DevicePlugins(
        f"{name}-device-plugins",
        DevicePluginsArgs(
            nvidia=pins["nvidia-device-plugin"],
            efa=pins["aws-efa-k8s-device-plugin"],
            gpu_instance_type=cfg.gpu_nodes.instance_type,
            provider=cluster.provider,
            gpu_nodes=gpu.node_group,
            reader_image=cache.image if cache else cfg.ray.image,
            reader_needs=cache.ready if cache else (),
        ),
    )


def _image_cache(cfg: StackConfig, name: str, cluster: Cluster) -> ImageCache | None:
    """The ECR pull-through cache of the Ray image (imageCache true), or None."""
    if not cfg.ray.image_cache:
        return None
    prefix = image_cache_prefix(name, cfg.stack)
    args = ImageCacheArgs(prefix=prefix, image=cfg.ray.image, region=cfg.region, node_role_name=cluster.node_role_name)
    return ImageCache(f"{name}-image-cache", args)


def _idle_guard(cfg: StackConfig, name: str, cluster, gpu, ray, identity, bucket, image) -> IdleGuard:
    """The in-cluster idle guard (gpuIdleMinutes > 0): the GPU node group to gpuIdleNodes when no job runs. It runs
    the Ray pods' image by the same reference (through the cache with imageCache), which the head pulled already."""
    return IdleGuard(
        f"{name}-idle-guard",
        IdleGuardArgs(
            gpu=cfg.gpu_nodes,
            ray=cfg.ray,
            region=cfg.region,
            mode=cfg.storage.pod_identity_mode,
            cluster_name=cluster.cluster_name,
            nodegroup_name=gpu.node_group_name,
            nodegroup_arn=gpu.node_group_arn,
            bucket_name=bucket.bucket,
            bucket_arn=bucket.arn,
            records_prefix=idle_guard_prefix(cfg.storage),
            image=image,
            namespace=ray.namespace,
            provider=cluster.provider,
            oidc_provider_arn=cluster.oidc_provider_arn,
            oidc_issuer=cluster.oidc_issuer,
            depends_on=tuple(identity.ready),
        ),
    )


def _outputs(cfg: StackConfig, gpu_az: str, cluster, gpu, ray, bucket, identity) -> dict[str, Any]:
    """The stack outputs by name (OUTPUT_NAMES) from the components that hold them."""
    return {
        "region": cfg.region,
        "gpu_az": gpu_az,
        "cluster_name": cluster.cluster_name,
        "kubeconfig": cluster.kubeconfig,
        "nodegroup_name": gpu.node_group_name,
        "raycluster_name": ray.name,
        "raycluster_namespace": ray.namespace,
        "head_service_name": ray.head_service_name,
        "bucket_name": bucket.bucket,
        "storage_uri": bucket.uri,
        "pod_role_arn": identity.role_arn,
        "pod_identity_association_id": identity.association_id,
        "ray_service_account": RAY_SERVICE_ACCOUNT,
        "pod_identity_mode": cfg.storage.pod_identity_mode,
    }


def export(outputs: dict[str, Any]) -> None:
    """Export ``outputs`` as the stack outputs (the kubeconfig stays secret)."""
    for key in OUTPUT_NAMES:
        pulumi.export(key, outputs[key])
