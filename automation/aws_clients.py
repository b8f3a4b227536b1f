"""The AWS clients as the driver calls them: one protocol per service, with only the methods it uses.

The real objects are boto3 clients (`session.client("ec2")`); tests hand in moto-backed clients or
botocore Stubbers. boto3 builds its methods at run time and ships no types, so each protocol states
the keyword arguments the driver passes (the API's own parameter names).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Literal, Protocol, overload

# An AWS API answer as boto3 returns it: the operation's JSON output shape (the service's API reference)
# as nested dicts and lists, read by key where the driver uses them.
ApiJson = dict[str, Any]


class Paginator(Protocol):
    def paginate(self, **params: object) -> Iterable[ApiJson]: ...


class Ec2(Protocol):
    def describe_instance_types(self, *, InstanceTypes: list[str]) -> ApiJson: ...
    def describe_availability_zones(self) -> ApiJson: ...
    def describe_capacity_reservations(
        self, *, Filters: list[dict[str, object]] = ..., CapacityReservationIds: list[str] = ...
    ) -> ApiJson: ...
    def describe_regions(self) -> ApiJson: ...
    def get_paginator(self, operation_name: str) -> Paginator: ...


class Ec2Reservations(Protocol):
    """The capacity probe's EC2 calls: make a targeted reservation, cancel it, list the live ones."""

    def create_capacity_reservation(
        self,
        *,
        ClientToken: str,
        InstanceType: str,
        InstancePlatform: str,
        AvailabilityZone: str,
        InstanceCount: int,
        InstanceMatchCriteria: str,
        EndDateType: str,
        EndDate: datetime,
        TagSpecifications: list[dict[str, object]],
    ) -> ApiJson: ...
    def cancel_capacity_reservation(self, *, CapacityReservationId: str) -> ApiJson: ...
    def get_paginator(self, operation_name: str) -> Paginator: ...


class ServiceQuotas(Protocol):
    def get_service_quota(self, *, ServiceCode: str, QuotaCode: str) -> ApiJson: ...


class Pricing(Protocol):
    def get_products(self, *, ServiceCode: str, Filters: list[dict[str, str]], MaxResults: int) -> ApiJson: ...


class Eks(Protocol):
    def list_nodegroups(self, *, clusterName: str) -> ApiJson: ...
    def describe_nodegroup(self, *, clusterName: str, nodegroupName: str) -> ApiJson: ...
    def update_nodegroup_config(
        self, *, clusterName: str, nodegroupName: str, scalingConfig: dict[str, int]
    ) -> ApiJson: ...
    def delete_nodegroup(self, *, clusterName: str, nodegroupName: str) -> ApiJson: ...
    def describe_cluster_versions(self, *, clusterVersions: list[str], includeAll: bool) -> ApiJson: ...
    def get_paginator(self, operation_name: str) -> Paginator: ...


class AutoScaling(Protocol):
    def describe_scaling_activities(self, *, AutoScalingGroupName: str, MaxRecords: int) -> ApiJson: ...


class Sts(Protocol):
    def get_caller_identity(self) -> ApiJson: ...


class S3(Protocol):
    def list_objects_v2(self, *, Bucket: str, Prefix: str, MaxKeys: int, Delimiter: str = ...) -> ApiJson: ...
    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> ApiJson: ...
    def get_object(self, *, Bucket: str, Key: str) -> ApiJson: ...
    def get_paginator(self, operation_name: str) -> Paginator: ...


class Ecr(Protocol):
    """The stack's pull-through cache repositories, which `destroy` lists with their size and deletes."""

    def delete_repository(self, *, repositoryName: str, force: bool) -> ApiJson: ...
    def get_paginator(self, operation_name: str) -> Paginator: ...


class ClientFactory(Protocol):
    """A boto3 client by service name in one region (`session.client`): each name answers its protocol."""

    @overload
    def __call__(self, name: Literal["ec2"]) -> Ec2: ...
    @overload
    def __call__(self, name: Literal["eks"]) -> Eks: ...
    @overload
    def __call__(self, name: Literal["s3"]) -> S3: ...
    @overload
    def __call__(self, name: Literal["sts"]) -> Sts: ...
    @overload
    def __call__(self, name: Literal["service-quotas"]) -> ServiceQuotas: ...
    @overload
    def __call__(self, name: Literal["autoscaling"]) -> AutoScaling: ...
    @overload
    def __call__(self, name: Literal["ecr"]) -> Ecr: ...


class Ec2AllCalls(Ec2, Ec2Reservations, Protocol):
    """EC2 as the capacity command uses it: the survey's reads and the probe's reservations."""


class Session(Protocol):
    """A boto3 session's clients in a named region (`session.client(name, region_name=...)`)."""

    @overload
    def client(self, service_name: Literal["ec2"], *, region_name: str) -> Ec2AllCalls: ...
    @overload
    def client(self, service_name: Literal["pricing"], *, region_name: str) -> Pricing: ...
    @overload
    def client(self, service_name: Literal["service-quotas"], *, region_name: str) -> ServiceQuotas: ...
