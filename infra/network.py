"""Network component: VPC, private subnets per AZ (nodes, control-plane ENIs), public subnets
that hold only the NAT gateway, and the routes between them."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.manifests import private_subnet_tags, public_subnet_tags, subnet_plan


@dataclass(frozen=True)
class NetworkArgs:
    vpc_cidr: str
    azs: tuple[str, ...]
    cluster_name: str  # for the EKS subnet tags


class Network(pulumi.ComponentResource):
    """A VPC with one private and one public subnet per AZ and a single NAT gateway.

    Public outputs: ``vpc_id``, ``private_subnet_ids`` (ordered like ``args.azs``),
    ``private_subnet_ids_by_az``, ``public_subnet_ids``.
    """

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-efa-eks:infra:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,  # EKS nodes register by their private DNS names
            enable_dns_support=True,
            tags={"Name": f"{args.cluster_name}-vpc"},
            opts=child,
        )
        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=vpc.id, tags={"Name": f"{args.cluster_name}-igw"}, opts=child
        )

        plan = subnet_plan(args.vpc_cidr, args.azs)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=vpc.id, tags={"Name": f"{args.cluster_name}-public"}, opts=child
        )
        aws.ec2.Route(
            f"{name}-public-default",
            route_table_id=public_rt.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.id,
            opts=child,
        )

        public_subnets, private_subnets = [], []
        for p in plan:
            public = aws.ec2.Subnet(
                f"{name}-public-{p.az}",
                vpc_id=vpc.id,
                cidr_block=p.public_cidr,
                availability_zone=p.az,
                map_public_ip_on_launch=False,  # only the NAT gateway lives here, with its own EIP
                tags={"Name": f"{args.cluster_name}-public-{p.az}", **public_subnet_tags(args.cluster_name)},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-{p.az}", subnet_id=public.id, route_table_id=public_rt.id, opts=child
            )
            public_subnets.append(public)

        # One NAT gateway keeps the cost down; the nodes need it only to pull images and reach AWS APIs.
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags={"Name": f"{args.cluster_name}-nat"}, opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=eip.id,
            subnet_id=public_subnets[0].id,
            tags={"Name": f"{args.cluster_name}-nat"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=vpc.id, tags={"Name": f"{args.cluster_name}-private"}, opts=child
        )
        aws.ec2.Route(
            f"{name}-private-default",
            route_table_id=private_rt.id,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=nat.id,
            opts=child,
        )
        for p in plan:
            private = aws.ec2.Subnet(
                f"{name}-private-{p.az}",
                vpc_id=vpc.id,
                cidr_block=p.private_cidr,
                availability_zone=p.az,
                map_public_ip_on_launch=False,
                tags={"Name": f"{args.cluster_name}-private-{p.az}", **private_subnet_tags(args.cluster_name)},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-private-{p.az}", subnet_id=private.id, route_table_id=private_rt.id, opts=child
            )
            private_subnets.append(private)

        self.vpc_id: pulumi.Output[str] = vpc.id
        self.private_subnet_ids: list[pulumi.Output[str]] = [s.id for s in private_subnets]
        self.private_subnet_ids_by_az: dict[str, pulumi.Output[str]] = {
            p.az: s.id for p, s in zip(plan, private_subnets)
        }
        self.public_subnet_ids: list[pulumi.Output[str]] = [s.id for s in public_subnets]
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "private_subnet_ids_by_az": self.private_subnet_ids_by_az,
                "public_subnet_ids": self.public_subnet_ids,
            }
        )
