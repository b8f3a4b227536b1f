"""Network component: VPC, private subnets per AZ (nodes, control-plane ENIs), public subnets
that hold only the NAT gateway, the routes between them, and an S3 gateway endpoint."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.manifests import SubnetPlan, private_subnet_tags, public_subnet_tags, subnet_plan


@dataclass(frozen=True)
class NetworkArgs:
    vpc_cidr: str
    azs: tuple[str, ...]
    cluster_name: str  # for the EKS subnet tags
    nat_az: str  # fixed (NetworkConfig.nat_az): moving the GPU nodes to another AZ leaves the NAT as it is
    region: str  # names the S3 endpoint's service


class Network(pulumi.ComponentResource):
    """A VPC with one private and one public subnet per AZ, a single NAT gateway in ``args.nat_az``
    and an S3 gateway endpoint on the private route table.

    Public outputs: ``vpc_id``, ``private_subnet_ids`` (ordered like ``args.azs``),
    ``private_subnet_ids_by_az``, ``public_subnet_ids``, ``private_route_table_ids``, ``s3_endpoint_id``.
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
        public_subnets = self._public_subnets(name, args, vpc, igw, plan)
        private_rt = self._private_route_table(name, args, vpc, igw, public_subnets[args.nat_az])
        private_subnets = self._private_subnets(name, args, vpc, private_rt, plan)

        # S3 traffic (checkpoints, datasets, ECR's image layers) goes through a free gateway endpoint
        # instead of the NAT gateway's per-GB charge
        # (https://docs.aws.amazon.com/vpc/latest/privatelink/vpc-endpoints-s3.html).
        s3_endpoint = aws.ec2.VpcEndpoint(
            f"{name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=[private_rt.id],
            tags={"Name": f"{args.cluster_name}-s3"},
            opts=child,
        )

        self.vpc_id: pulumi.Output[str] = vpc.id
        self.private_subnet_ids: list[pulumi.Output[str]] = [s.id for s in private_subnets]
        self.private_subnet_ids_by_az: dict[str, pulumi.Output[str]] = {
            p.az: s.id for p, s in zip(plan, private_subnets, strict=True)
        }
        self.public_subnet_ids: list[pulumi.Output[str]] = [public_subnets[p.az].id for p in plan]
        self.private_route_table_ids: list[pulumi.Output[str]] = [private_rt.id]
        self.s3_endpoint_id: pulumi.Output[str] = s3_endpoint.id
        self.register_outputs(
            {
                "vpc_id": self.vpc_id,
                "private_subnet_ids": self.private_subnet_ids,
                "private_subnet_ids_by_az": self.private_subnet_ids_by_az,
                "public_subnet_ids": self.public_subnet_ids,
                "private_route_table_ids": self.private_route_table_ids,
                "s3_endpoint_id": self.s3_endpoint_id,
            }
        )

    def _public_subnets(
        self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, igw: aws.ec2.InternetGateway, plan: tuple[SubnetPlan, ...]
    ) -> dict[str, aws.ec2.Subnet]:
        """One public subnet per AZ, routed to the internet gateway; they hold only the NAT gateway."""
        child = pulumi.ResourceOptions(parent=self)
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
        public_subnets = {}
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
            public_subnets[p.az] = public
        return public_subnets

    def _private_route_table(
        self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, igw: aws.ec2.InternetGateway, nat_subnet: aws.ec2.Subnet
    ) -> aws.ec2.RouteTable:
        """The private subnets' route table, its default route through the one NAT gateway."""
        child = pulumi.ResourceOptions(parent=self)
        # One NAT gateway keeps the cost down. It stays in one AZ whatever the GPU AZ, so `up --auto-az` never
        # replaces it; GPU nodes in another AZ pay cross-AZ transfer for what crosses the NAT (image layers do not:
        # with imageCache they come over the S3 endpoint) and lose egress if the NAT's AZ fails
        # (https://docs.aws.amazon.com/vpc/latest/userguide/nat-gateway-basics.html). Should it be replaced anyway
        # (availabilityZones reordered, or a stack made when it followed the GPU AZ), the old one goes first: a
        # replacement made first would ask for the Elastic IP the old one still holds (pulumi/pulumi-aws#1483).
        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags={"Name": f"{args.cluster_name}-nat"}, opts=child)
        nat = aws.ec2.NatGateway(
            f"{name}-nat",
            allocation_id=eip.id,
            subnet_id=nat_subnet.id,
            tags={"Name": f"{args.cluster_name}-nat"},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw], delete_before_replace=True),
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
        return private_rt

    def _private_subnets(
        self,
        name: str,
        args: NetworkArgs,
        vpc: aws.ec2.Vpc,
        private_rt: aws.ec2.RouteTable,
        plan: tuple[SubnetPlan, ...],
    ) -> list[aws.ec2.Subnet]:
        """One private subnet per AZ (nodes, control-plane ENIs), ordered like ``plan``."""
        child = pulumi.ResourceOptions(parent=self)
        private_subnets = []
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
        return private_subnets
