"""Cluster component: the EKS control plane (pulumi-eks), its KMS key and control-plane log group, the nodes' IAM
role, the system managed node group, and the Kubernetes provider built from the kubeconfig."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from infra.config import ClusterConfig, SystemNodesConfig
from infra.manifests import (
    SYSTEM_AMI_TYPE,
    launch_template_metadata_options,
    node_monitoring_agent_values,
    root_volume,
    system_node_labels,
)
from infra.names import NODE_MONITORING_AGENT

NODE_POLICY_ARNS = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
    # Session Manager instead of SSH: no key pair and no inbound port on the nodes.
    "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore",
)
# EKS's managed access policy for cluster-admin, associated cluster-wide to each admin role
# (https://docs.aws.amazon.com/eks/latest/userguide/access-policy-permissions.html).
CLUSTER_ADMIN_POLICY_ARN = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"


def control_plane_log_group_name(cluster_name: str) -> str:
    """The log group EKS sends a cluster's control-plane logs to, and creates, with no retention, if none exists
    (https://docs.aws.amazon.com/eks/latest/userguide/control-plane-logs.html)."""
    return f"/aws/eks/{cluster_name}/cluster"


def node_assume_role_policy() -> str:
    """Trust policy letting EC2 instances assume the node role."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
    )


@dataclass(frozen=True)
class ClusterArgs:
    cluster: ClusterConfig
    system_nodes: SystemNodesConfig
    vpc_id: pulumi.Input[str]
    private_subnet_ids: Sequence[pulumi.Input[str]]


class Cluster(pulumi.ComponentResource):
    """An EKS cluster whose nodes live in private subnets.

    Public outputs: ``cluster_name``, ``kubeconfig`` (secret), ``cluster_security_group_id``
    (the EKS-created group shared by the control plane and every node), ``node_role_arn``,
    ``oidc_provider_arn``, ``oidc_issuer``, ``system_node_group_name``. Handles for wiring, not outputs:
    ``provider`` (the Kubernetes provider) and ``node_role_attachments``.
    """

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        c = args.cluster

        eks_cluster = self._control_plane(name, args)
        # The inner aws.eks.Cluster's name: everything that names the cluster waits for it.
        cluster_name = eks_cluster.eks_cluster.name

        node_role = aws.iam.Role(f"{name}-node-role", assume_role_policy=node_assume_role_policy(), opts=child)
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{arn.rsplit('/', 1)[1]}", role=node_role.name, policy_arn=arn, opts=child
            )
            for arn in NODE_POLICY_ARNS
        ]
        system = self._system_node_group(name, args, cluster_name, node_role, attachments)
        # pulumi-eks creates its coredns add-on only for Fargate or its default node group (CoreDnsAddonOptions'
        # `enabled` in pulumi_eks/_inputs.py, v4.4), so CoreDNS would stay the self-managed copy EKS bootstraps,
        # unpinned. An explicit add-on takes it over (OVERWRITE adopts the bootstrapped Deployment) once a node
        # can run its pods: the add-on is not ACTIVE before, and `up` would wait on it (docs/architecture.md).
        aws.eks.Addon(
            f"{name}-coredns",
            cluster_name=cluster_name,
            addon_name="coredns",
            addon_version=c.coredns_version,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[system]),
        )
        # The node monitoring agent sets the node conditions the GPU node group's auto repair acts on
        # (infra/manifests.py, GPU_NODE_REPAIR). Its pods run on every node, so it waits for the system nodes too.
        aws.eks.Addon(
            f"{name}-node-monitoring-agent",
            cluster_name=cluster_name,
            addon_name=NODE_MONITORING_AGENT,
            addon_version=c.node_monitoring_agent_version,
            configuration_values=json.dumps(node_monitoring_agent_values()),
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[system]),
        )
        _cluster_admins(name, cluster_name, c.admin_role_arns, child)

        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=eks_cluster.kubeconfig_json,
            enable_server_side_apply=True,
            opts=child,
        )

        self.cluster_name: pulumi.Output[str] = cluster_name
        self.kubeconfig: pulumi.Output[str] = pulumi.Output.secret(eks_cluster.kubeconfig_json)
        self.cluster_security_group_id: pulumi.Output[str] = eks_cluster.cluster_security_group_id
        self.node_role_arn: pulumi.Output[str] = node_role.arn
        self.node_role_name: pulumi.Output[str] = node_role.name
        self.oidc_provider_arn: pulumi.Output[str] = eks_cluster.oidc_provider_arn
        # The issuer without https://: the prefix of an IRSA trust policy's :sub and :aud conditions.
        self.oidc_issuer: pulumi.Output[str] = eks_cluster.oidc_issuer
        self.system_node_group_name: pulumi.Output[str] = system.node_group_name
        self.node_role_attachments = attachments
        self.register_outputs(
            {
                "cluster_name": self.cluster_name,
                "kubeconfig": self.kubeconfig,
                "cluster_security_group_id": self.cluster_security_group_id,
                "node_role_arn": self.node_role_arn,
                "node_role_name": self.node_role_name,
                "oidc_provider_arn": self.oidc_provider_arn,
                "oidc_issuer": self.oidc_issuer,
                "system_node_group_name": self.system_node_group_name,
            }
        )

    def _control_plane(self, name: str, args: ClusterArgs) -> eks.Cluster:
        """The EKS control plane (pulumi-eks) with its own KMS key for envelope encryption of secrets, and its log
        group with the stack's retention, created first so EKS finds it instead of making one that never expires."""
        child = pulumi.ResourceOptions(parent=self)
        c = args.cluster
        logs = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs",
            name=control_plane_log_group_name(c.name),
            retention_in_days=c.log_retention_days,
            opts=child,
        )
        key = aws.kms.Key(
            f"{name}-secrets-key",
            description=f"Envelope encryption of Kubernetes secrets in EKS cluster {c.name}",
            enable_key_rotation=True,
            deletion_window_in_days=7,
            opts=child,
        )
        return eks.Cluster(
            f"{name}-eks",
            name=c.name,
            version=c.kubernetes_version,
            vpc_id=args.vpc_id,
            private_subnet_ids=args.private_subnet_ids,
            node_associate_public_ip_address=False,
            # Node groups are explicit aws.eks.NodeGroup resources (below and in
            # efa_nodegroup.py), so every setting is visible to review and tests.
            skip_default_node_group=True,
            # No extra pulumi-eks security groups: every node gets the EKS-created cluster
            # security group, which already allows all traffic between the nodes and the
            # control plane, so system and GPU nodes share one group.
            skip_default_security_groups=True,
            # Managed node groups get their access entries from EKS itself in API mode.
            authentication_mode="API",
            create_oidc_provider=True,
            encryption_config_key_arn=key.arn,
            enabled_cluster_log_types=list(c.log_types),
            endpoint_private_access=True,
            endpoint_public_access=c.endpoint_public_access,
            public_access_cidrs=list(c.public_access_cidrs) if c.endpoint_public_access else None,
            # pulumi-eks manages vpc-cni as an EKS add-on and, without a version, takes the newest for the
            # cluster's Kubernetes version at every `up`: pod networking would change unasked. Pinned by the
            # vpcCniVersion key (https://docs.aws.amazon.com/eks/latest/userguide/vpc-add-on-update.html).
            vpc_cni_options=eks.VpcCniOptionsArgs(addon_version=c.vpc_cni_version),
            # kube-proxy likewise (kubeProxyVersion): pulumi-eks manages it as an add-on and takes the newest
            # without a version (https://docs.aws.amazon.com/eks/latest/userguide/managing-kube-proxy.html).
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(version=c.kube_proxy_version),
            # No data links the two: the SDK registers the component (and so its inner cluster) only once the log
            # group's registration returns, i.e. once it exists (Terraform's aws_eks_cluster guide orders them alike).
            opts=pulumi.ResourceOptions(parent=self, depends_on=[logs]),
        )

    def _system_node_group(
        self,
        name: str,
        args: ClusterArgs,
        cluster_name: pulumi.Output[str],
        node_role: aws.iam.Role,
        attachments: list[aws.iam.RolePolicyAttachment],
    ) -> aws.eks.NodeGroup:
        """The system node group (CoreDNS, KubeRay operator, Ray head) and its IMDSv2 launch template."""
        system_lt = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            metadata_options=launch_template_metadata_options(),
            block_device_mappings=[root_volume(args.system_nodes.root_volume_gib)],
            update_default_version=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        return aws.eks.NodeGroup(
            f"{name}-system",
            cluster_name=cluster_name,
            node_role_arn=node_role.arn,
            subnet_ids=args.private_subnet_ids,
            instance_types=[args.system_nodes.instance_type],
            ami_type=SYSTEM_AMI_TYPE,
            launch_template={"id": system_lt.id, "version": system_lt.latest_version.apply(str)},
            scaling_config={
                "desired_size": args.system_nodes.count,
                "min_size": args.system_nodes.count,
                "max_size": args.system_nodes.count,
            },
            labels=system_node_labels(),
            # Nodes cannot join before the role's policies are attached; nothing in the data says so.
            opts=pulumi.ResourceOptions(parent=self, depends_on=attachments),
        )


def _cluster_admins(
    name: str, cluster_name: pulumi.Input[str], role_arns: tuple[str, ...], opts: pulumi.ResourceOptions
) -> None:
    """An access entry plus a cluster-wide AmazonEKSClusterAdminPolicy association per role.

    With authentication_mode API only the creating principal is admin; these give a CI or on-call
    role the same access (https://docs.aws.amazon.com/eks/latest/userguide/access-entries.html).
    """
    for i, arn in enumerate(role_arns):
        entry = aws.eks.AccessEntry(
            f"{name}-admin-{i}", cluster_name=cluster_name, principal_arn=arn, type="STANDARD", opts=opts
        )
        aws.eks.AccessPolicyAssociation(
            f"{name}-admin-{i}",
            cluster_name=cluster_name,
            principal_arn=entry.principal_arn,
            policy_arn=CLUSTER_ADMIN_POLICY_ARN,
            access_scope={"type": "cluster"},
            opts=opts,
        )
