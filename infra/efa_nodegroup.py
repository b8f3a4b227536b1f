"""EFA GPU node group component, from explicit AWS resources so every EFA setting is visible:
cluster placement group, self-referencing EFA security group, launch template with one EFA
interface per network card, and a managed node group pinned to one private subnet."""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.catalog import instance_spec
from infra.config import GpuNodesConfig
from infra.eks_facts import efa_hugepages_pages
from infra.manifests import (
    DRIVER_OWNED_PROPERTIES,
    GPU_AMI_TYPE,
    GPU_NODE_REPAIR,
    GpuCapacity,
    efa_network_interfaces,
    efa_security_group_rules,
    gpu_capacity,
    gpu_node_labels,
    gpu_node_taints,
    gpu_node_user_data,
    gpu_scaling_config,
    launch_template_metadata_options,
    root_volume,
)


def driver_scaling(gpu: GpuNodesConfig) -> tuple[dict[str, int], list[str]]:
    """The node group's scaling config and the properties `up` leaves alone.

    The driver and the idle guard own the desired size, so it is ignored; but with ``ignoreChanges`` the engine
    sends the desired size of Pulumi's state (the creation-time gpuNodeCount) whenever another scaling field
    changes, which would start GPU nodes on a group scaled to 0. So when the driver passes the live size
    (gpuLiveDesiredSize, read from EKS just before `up`), the program declares that size, within the new
    maximum, and ignores nothing: the update sends what runs now."""
    scaling = gpu_scaling_config(gpu.node_count)
    if gpu.live_desired_size < 0:
        return scaling, list(DRIVER_OWNED_PROPERTIES)
    return {**scaling, "desired_size": min(gpu.live_desired_size, gpu.node_count)}, []


def gpu_hugepages_2mi(instance_type: str) -> int:
    """The 2 MiB huge pages a GPU node of ``instance_type`` reserves at boot (infra/eks_facts.py)."""
    return efa_hugepages_pages(instance_spec(instance_type).vcpus)


@dataclass(frozen=True)
class EfaNodeGroupArgs:
    gpu: GpuNodesConfig
    cluster_name: pulumi.Input[str]
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]  # the private subnet of gpu.availability_zone
    cluster_security_group_id: pulumi.Input[str]
    node_role_arn: pulumi.Input[str]
    depends_on: tuple[pulumi.Resource, ...] = ()  # e.g. the node role's policy attachments


class EfaNodeGroup(pulumi.ComponentResource):
    """GPU nodes with EFA, packed into one cluster placement group in one subnet.

    Public outputs: ``node_group_name``, ``security_group_id``, ``placement_group_name``,
    ``launch_template_id``; ``node_group_arn`` (for the idle guard's role) is an attribute.

    On a Capacity Block (``gpu.capacity_block``) the launch template names the instance type and the
    node group lists none, and EKS updates the node group only at desired size 0: scale it to 0 before an
    ``up`` that changes it (config validation emits the same note as a warning).
    """

    def __init__(self, name: str, args: EfaNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:EfaNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        gpu = args.gpu

        # "cluster" packs the instances close together in one AZ: the lowest latency EFA gets. A capacity
        # reservation made for a placement group needs that group to exist first, so the stack can use
        # an existing one instead (gpuPlacementGroupName). The AZ is in the group's name (Pulumi's, and so the
        # auto-named AWS one): a cluster group cannot span AZs, so a move to another AZ makes a new group.
        if gpu.placement_group_name:
            placement_group_name: pulumi.Input[str] = gpu.placement_group_name
        else:
            pg = aws.ec2.PlacementGroup(f"{name}-pg-{gpu.availability_zone}", strategy="cluster", opts=child)
            placement_group_name = pg.name

        efa_sg = self._efa_security_group(name, args.vpc_id)

        capacity = gpu_capacity(gpu)
        template = self._launch_template(name, args, efa_sg, placement_group_name, capacity)
        scaling, ignored = driver_scaling(gpu)

        node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=args.cluster_name,
            node_role_arn=args.node_role_arn,
            # Exactly one subnet: a cluster placement group cannot span AZs.
            subnet_ids=[args.subnet_id],
            instance_types=capacity.node_group_instance_types,
            ami_type=GPU_AMI_TYPE,
            capacity_type=capacity.capacity_type,
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            scaling_config=scaling,
            update_config={"max_unavailable": 1},
            labels=gpu_node_labels(),
            taints=gpu_node_taints(),
            node_repair_config=GPU_NODE_REPAIR,
            # The driver and the idle guard own the desired size (scale-to-zero between runs): `up` must
            # not scale the nodes back up, nor fail on the size they left (driver_scaling says how).
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on), ignore_changes=ignored),
        )

        self.node_group_name: pulumi.Output[str] = node_group.node_group_name
        self.security_group_id: pulumi.Output[str] = efa_sg.id
        self.placement_group_name: pulumi.Output[str] = pulumi.Output.from_input(placement_group_name)
        self.launch_template_id: pulumi.Output[str] = template.id
        self.node_group_arn: pulumi.Output[str] = node_group.arn
        self.node_group = node_group
        self.register_outputs(
            {
                "node_group_name": self.node_group_name,
                "security_group_id": self.security_group_id,
                "placement_group_name": self.placement_group_name,
                "launch_template_id": self.launch_template_id,
            }
        )

    def _efa_security_group(self, name: str, vpc_id: pulumi.Input[str]) -> aws.ec2.SecurityGroup:
        """A security group allowing all traffic from and to itself, which EFA requires."""
        child = pulumi.ResourceOptions(parent=self)
        efa_sg = aws.ec2.SecurityGroup(
            f"{name}-efa-sg",
            vpc_id=vpc_id,
            description="EFA: all traffic between the GPU nodes' EFA interfaces",
            opts=child,
        )
        for rule in efa_security_group_rules():
            kind = (
                aws.vpc.SecurityGroupIngressRule if rule["direction"] == "ingress" else aws.vpc.SecurityGroupEgressRule
            )
            kind(
                f"{name}-efa-{rule['direction']}-self",
                security_group_id=efa_sg.id,
                referenced_security_group_id=efa_sg.id,
                ip_protocol=rule["ip_protocol"],
                description=rule["description"],
                opts=child,
            )
        return efa_sg

    def _launch_template(
        self,
        name: str,
        args: EfaNodeGroupArgs,
        efa_sg: aws.ec2.SecurityGroup,
        placement_group_name: pulumi.Input[str],
        capacity: GpuCapacity,
    ) -> aws.ec2.LaunchTemplate:
        """The GPU nodes' launch template: EFA interfaces, IMDSv2, the placement group, the reservation, and the
        user data that reserves the EFA huge pages."""
        child = pulumi.ResourceOptions(parent=self)
        gpu = args.gpu
        # The EFA group plus the cluster's: the nodes still need to reach the control plane and
        # the system node (CoreDNS, the Ray head) through the shared cluster group.
        security_groups = [efa_sg.id, args.cluster_security_group_id]
        interfaces = [{**nic, "security_groups": security_groups} for nic in efa_network_interfaces(gpu.efa_interfaces)]
        # An open On-Demand Capacity Reservation that matches is used by instances in a placement group too;
        # AWS recommends, not requires, making the reservation in the cluster placement group
        # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-groups-limitations.html); one made
        # for a group is used only by instances in that group (preflight checks gpuPlacementGroupName).
        return aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"EFA GPU nodes ({gpu.instance_type}, {gpu.efa_interfaces} EFA interface(s))",
            instance_type=capacity.launch_template_instance_type,
            # Huge pages for libfabric reserved by the node itself, before the kubelet starts.
            user_data=base64.b64encode(gpu_node_user_data(gpu_hugepages_2mi(gpu.instance_type)).encode()).decode(),
            network_interfaces=interfaces,
            metadata_options=launch_template_metadata_options(),
            block_device_mappings=[root_volume(gpu.root_volume_gib)],
            placement={"group_name": placement_group_name},
            capacity_reservation_specification=capacity.capacity_reservation_specification,
            instance_market_options=capacity.instance_market_options,
            update_default_version=True,
            tag_specifications=[{"resource_type": "instance", "tags": {"Name": f"{name}-gpu"}}],
            opts=child,
        )
