"""The value checks of the stack's typed tree (infra/config_schema.py), each on both sides of its limit
and with its message, written against the survivors of a mutmut run of that module
(bench/results/mutation/2026-12-06-data-verdict-verify-schema.md).

The limits are written here as numbers with their sources, not imported from the code under test:
- Kubernetes quantities: suffixes m (1/1000), Ki Mi Gi Ti (powers of 1024), k M G T (powers of 1000)
  (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/); the schema gives
  CPU in cores and memory in GiB.
- EKS public access CIDRs: at most 40 per cluster (https://docs.aws.amazon.com/eks/latest/userguide/service-quotas.html).
- S3 bucket names: 3 to 63 characters, lowercase letters, digits, '-' (and '.', which the stack refuses),
  no two adjacent periods; the stack also refuses '--' (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
- DNS-1123 labels: lowercase alphanumerics and '-', starting and ending alphanumeric
  (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/#dns-label-names).
"""

from __future__ import annotations

import pytest

from infra.config_schema import (
    Key,
    StackConfigError,
    addon_version,
    between,
    bucket_name,
    close_match,
    coerce,
    cpu_cores,
    cpu_quantity,
    dns_label,
    efa_gpu_instance,
    ipv4_cidr,
    log_retention_days,
    log_types,
    memory_gib,
    memory_quantity,
    parse_quantity,
    pinned_image,
    placement_group,
    pod_identity_mode,
    public_cidrs,
    ray_version,
    two_or_three_azs,
    vpc_cidr,
)

GIB = 1024**3


def _message(check, *args) -> str:
    with pytest.raises(StackConfigError) as e:
        check(*args)
    return str(e.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("40", 40.0),
        ("1.5", 1.5),
        ("500m", 0.5),
        ("1Ki", 1024 / GIB),
        ("512Mi", 0.5),
        ("2Gi", 2.0),
        ("1Ti", 1024.0),
        ("1k", 1e3 / GIB),
        ("1M", 1e6 / GIB),
        ("1G", 1e9 / GIB),
        ("1T", 1e12 / GIB),
    ],
)
def test_a_kubernetes_quantity_reads_in_cores_or_gib(text, value):
    assert parse_quantity("k", text) == pytest.approx(value, rel=1e-14), f"{text}: expected {value}"


def test_a_malformed_quantity_names_the_key_and_gives_examples():
    assert _message(parse_quantity, "rayWorkerCpu", "40 cores") == (
        "rayWorkerCpu '40 cores' is not a Kubernetes quantity: use e.g. '40', '500m', '160Gi'"
    )


def test_a_malformed_memory_names_its_key():
    assert _message(memory_gib, "rayWorkerMemory", "1.2.3Gi").startswith("rayWorkerMemory '1.2.3Gi' is not")


def test_a_cpu_in_a_memory_unit_is_refused_naming_the_key():
    assert _message(cpu_cores, "rayWorkerCpu", "40Gi") == (
        "rayWorkerCpu '40Gi' is a memory unit: write CPU as cores ('40') or millicores ('500m')"
    )


def test_a_malformed_cpu_names_its_key():
    assert _message(cpu_cores, "rayWorkerCpu", "x").startswith("rayWorkerCpu 'x' is not a Kubernetes quantity")
    assert _message(cpu_quantity, "rayWorkerCpu", "x").startswith("rayWorkerCpu 'x' is not")


def test_a_millicore_is_some_cpu_and_zero_is_none():
    assert cpu_cores("c", "1m") == pytest.approx(0.001)
    assert _message(cpu_cores, "rayWorkerCpu", "0") == "rayWorkerCpu '0' is no CPU at all: set e.g. '2'"


def test_one_mebibyte_is_some_memory_and_zero_is_none():
    memory_quantity("m", "1Mi")
    assert _message(memory_quantity, "rayWorkerMemory", "0Gi") == (
        "rayWorkerMemory '0Gi' is no memory at all: set e.g. '8Gi'"
    )


def test_between_holds_both_ends_and_refuses_one_past_each():
    check = between(1, 450)
    check("n", 1)
    check("n", 450)
    for value in (0, 451):
        assert _message(check, "gpuNodeCount", value) == (
            f"gpuNodeCount {value} is outside 1..450; set gpuNodeCount within 1..450"
        )


def test_between_names_its_fix_when_it_has_one():
    assert _message(between(1, 8, "one GPU node holds at most 8"), "k", 9) == (
        "k 9 is outside 1..8: one GPU node holds at most 8; set k within 1..8"
    )


def test_a_dns_label_of_exactly_the_limit_passes_and_one_more_is_refused():
    check = dns_label(5)
    check("name", "ab-c1")
    assert _message(check, "clusterName", "ab-c12") == (
        "clusterName 'ab-c12' is not a DNS-1123 label of at most 5 characters: use lowercase letters, digits and '-'"
    )


@pytest.mark.parametrize("value", ["Abc", "-ab", "ab-", "a_b"])
def test_a_dns_label_with_a_character_kubernetes_refuses_is_refused(value):
    with pytest.raises(StackConfigError):
        dns_label(63)("name", value)


def test_close_match_names_the_closest_word():
    assert close_match("irsaa", ("pod-identity", "irsa")) == "did you mean 'irsa'?"


def test_close_match_lists_the_known_words_when_none_is_close():
    assert close_match("zzz", ("pod-identity", "irsa")) == "known: pod-identity, irsa"


def test_an_unknown_pod_identity_mode_lists_the_modes_and_the_closest():
    assert _message(pod_identity_mode, "podIdentityMode", "irsaa") == (
        "podIdentityMode 'irsaa' is not one of ['pod-identity', 'irsa']: did you mean 'irsa'?"
    )


def test_a_floating_image_is_told_to_pin_like_the_reference_image():
    assert _message(pinned_image, "rayImage", "rayproject/ray:latest").endswith(
        "e.g. public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"
    )


@pytest.mark.parametrize("value", ["ab", "a--b", "Bucket", "a.b.c", "-ab"])
def test_a_bucket_name_s3_or_the_stack_refuses_is_refused(value):
    assert _message(bucket_name, "s3Bucket", value) == (
        f"s3Bucket {value!r} is not a valid S3 bucket name: use 3-63 lowercase letters, digits and '-' "
        "(no dots), or '' to let Pulumi name it"
    )


@pytest.mark.parametrize("value", ["", "abc", "my-bucket-1", "a" * 63])
def test_a_bucket_name_s3_accepts_passes(value):
    bucket_name("s3Bucket", value)


def test_a_ray_version_with_a_v_is_refused():
    assert _message(ray_version, "rayVersion", "v2.58.0") == (
        "rayVersion 'v2.58.0' is not an exact Ray version: set e.g. 2.58.0"
    )


def test_an_exact_ray_version_passes():
    ray_version("rayVersion", "2.58.0")


def test_a_placement_group_name_with_a_space_says_how_to_let_the_stack_make_one():
    assert _message(placement_group, "placementGroup", "my group").endswith("or '' to let the stack create one")


def test_exactly_forty_public_cidrs_pass_and_forty_one_are_refused():
    cidrs = tuple(f"203.0.113.{i}/32" for i in range(41))
    public_cidrs("k", cidrs[:40])
    assert _message(public_cidrs, "publicAccessCidrs", cidrs) == (
        "publicAccessCidrs lists 41 CIDRs but EKS accepts at most 40: merge them"
    )


def test_a_bad_public_cidr_names_the_key_and_the_entry():
    assert _message(public_cidrs, "publicAccessCidrs", ("10.0.0.0/8", "nope")) == (
        "publicAccessCidrs entry 'nope' is not an IPv4 CIDR: use e.g. 203.0.113.7/32"
    )


def test_a_bad_cidr_names_the_key():
    assert _message(ipv4_cidr, "k", "1.2.3").startswith("k entry '1.2.3' is not an IPv4 CIDR")


def test_unknown_log_types_are_listed_with_the_known_ones():
    assert _message(log_types, "controlPlaneLogTypes", ("api", "kubelet")) == (
        "controlPlaneLogTypes ['kubelet'] unknown: use some of "
        "['api', 'audit', 'authenticator', 'controllerManager', 'scheduler']"
    )


def test_known_log_types_pass():
    log_types("controlPlaneLogTypes", ("api", "audit", "authenticator", "controllerManager", "scheduler"))


def test_an_instance_without_efa_lists_only_gpu_types_with_efa():
    # g6.xlarge has one L4 and no EFA (infra/data/instance_types.json, from EC2's DescribeInstanceTypes).
    msg = _message(efa_gpu_instance, "gpuInstanceType", "g6.xlarge")
    listed = msg.split("use one of ")[1]
    assert "'g6.12xlarge'" in listed and "'g6.xlarge'" not in listed, msg


def test_a_vpc_of_prefix_22_passes_and_23_is_refused():
    vpc_cidr("vpcCidr", "10.0.0.0/22")
    assert _message(vpc_cidr, "vpcCidr", "10.0.0.0/23") == "vpcCidr '10.0.0.0/23' has prefix /23: use a /16 to /22"


def test_a_vpc_that_is_no_network_names_the_key():
    assert _message(vpc_cidr, "vpcCidr", "10.0.0.1/16") == (
        "vpcCidr '10.0.0.1/16' is not an IPv4 network: use e.g. 10.0.0.0/16"
    )


def test_a_retention_cloudwatch_does_not_offer_names_the_key():
    # CloudWatch Logs' retentionInDays offers 1 and 3, not 2 (PutRetentionPolicy in the CloudWatch Logs API reference).
    assert _message(log_retention_days, "controlPlaneLogRetentionDays", 2).startswith(
        "controlPlaneLogRetentionDays 2 is not a CloudWatch Logs retention period: use one of (1, 3, 5,"
    )


def test_a_bad_addon_version_says_how_to_list_the_good_ones():
    assert _message(addon_version, "vpcCniVersion", "1.19").endswith(
        "list the versions for your cluster with `aws eks describe-addon-versions "
        "--addon-name <vpc-cni|kube-proxy|coredns> "
        "--kubernetes-version 1.36 --query 'addons[].addonVersions[].addonVersion'`"
    )


def test_an_image_without_a_registry_and_with_a_version_tag_is_pinned():
    pinned_image("rayImage", "ray:2.58.0")


def test_four_azs_are_refused_with_an_example_of_two():
    azs = ("us-west-2a", "us-west-2b", "us-west-2c", "us-west-2d")
    assert _message(two_or_three_azs, "availabilityZones", azs).endswith(
        "the EKS control plane needs two; set e.g. [us-west-2a, us-west-2b]"
    )


def _key(kind: str) -> Key:
    return Key("k", kind, None, "", "", None, ("k",))


def test_a_null_string_key_reads_as_empty():
    assert coerce(_key("string"), None) == ""


@pytest.mark.parametrize(("text", "value"), [("true", True), ("True", True), ("TRUE", True), ("false", False)])
def test_a_boolean_key_reads_the_engines_strings_in_any_case(text, value):
    assert coerce(_key("boolean"), text) is value, f"{text!r}: expected {value}"


def test_a_boolean_key_refuses_a_number():
    assert _message(coerce, _key("boolean"), 1) == "k 1 is not a boolean: set ray-efa-eks:k to a boolean"


def test_a_string_key_refuses_a_mapping():
    assert _message(coerce, _key("string"), {"a": 1}) == "k {'a': 1} is not a string: set ray-efa-eks:k to a string"
