"""The exact AWS arguments the pure builders hand to the EFA node group, the launch templates and the VPC.

These dicts go to pulumi-aws as they are, so a changed key or value is a changed (or refused) resource:
launch-template block devices, metadata options and network interfaces
(https://www.pulumi.com/registry/packages/aws/api-docs/ec2/launchtemplate/), the subnet plan and its tags.
"""

from __future__ import annotations

import email
import ipaddress
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import quiet_stack

from infra import manifests as m
from infra.efa_nodegroup import gpu_hugepages_2mi
from infra.eks_facts import efa_hugepages_pages

REPO = Path(__file__).resolve().parents[2]
RESERVATION = "cr-0123456789abcdef0"


@pytest.fixture(scope="module")
def gpu():
    return quiet_stack("us-west-2").gpu_nodes


# --------------------------------------------------------------------------- launch template


def test_root_volume_is_an_encrypted_gp3_xvda_deleted_with_the_node():
    # /dev/xvda is the root device of the EKS AL2023 AMIs (infra/manifests.py, root_volume's docstring);
    # a mapping on another device adds a second disk and leaves the root at the AMI's default size.
    expected = {
        "device_name": "/dev/xvda",
        "ebs": {"volume_size": 250, "volume_type": "gp3", "encrypted": "true", "delete_on_termination": "true"},
    }
    got = m.root_volume(250)
    assert got == expected, f"expected {expected}, got {got}"


def test_metadata_options_keep_imds_on():
    # The kubelet, the VPC CNI and the Pod Identity agent read IMDS on the host: it stays enabled. IMDSv2
    # only with hop limit 1 is the policy pack's (imdsv2-hop-limit-1, tests/infra/policy/test_policies.py).
    got = m.launch_template_metadata_options().get("http_endpoint")
    assert got == "enabled", f"expected http_endpoint 'enabled', got {got!r}"


def test_every_efa_interface_is_deleted_with_its_node():
    # Otherwise each terminated GPU node leaves its EFA ENIs behind, holding subnet addresses and blocking destroy.
    flags = [n.get("delete_on_termination") for n in m.efa_network_interfaces(4)]
    assert flags == ["true"] * 4, f"expected delete_on_termination 'true' on all 4 interfaces, got {flags}"


def test_zero_efa_interfaces_is_refused_naming_the_count():
    with pytest.raises(ValueError, match=r"at least one EFA interface, got 0"):
        m.efa_network_interfaces(0)


def test_no_reservation_buys_plain_on_demand(gpu):
    cap = m.gpu_capacity(replace(gpu, capacity_reservation_id=None, capacity_block=False))
    got = (cap.capacity_reservation_specification, cap.instance_market_options, cap.capacity_type)
    assert got == (None, None, "ON_DEMAND"), f"expected (None, None, 'ON_DEMAND'), got {got}"


def test_capacity_block_targets_its_reservation(gpu):
    # A Capacity Block is a reservation too: without the target the instances would not land in it.
    cap = m.gpu_capacity(replace(gpu, capacity_reservation_id=RESERVATION, capacity_block=True))
    expected = {"capacity_reservation_target": {"capacity_reservation_id": RESERVATION}}
    got = cap.capacity_reservation_specification
    assert got == expected, f"expected {expected}, got {got}"


def test_efa_security_group_rules_carry_what_the_component_reads():
    # infra/efa_nodegroup.py reads rule["direction"], rule["ip_protocol"] and rule["description"].
    missing = [sorted({"direction", "ip_protocol", "description"} - set(r)) for r in m.efa_security_group_rules()]
    assert missing == [[], []], f"expected both rules to carry direction, ip_protocol, description; missing {missing}"


# --------------------------------------------------------------------------- network


def test_subnet_plan_gives_private_subnets_a_quarter_and_public_ones_a_sixty_fourth():
    plan = m.subnet_plan("10.0.0.0/16", ("a", "b", "c"))
    got = [
        (ipaddress.ip_network(p.private_cidr).prefixlen, ipaddress.ip_network(p.public_cidr).prefixlen) for p in plan
    ]
    assert got == [(18, 22)] * 3, f"expected (/18 private, /22 public) per AZ in a /16, got {got}"


def test_four_azs_are_refused_naming_the_count():
    # The fourth quarter holds the public subnets, so a fourth private quarter would overlap them.
    with pytest.raises(ValueError, match=r"at most 3 AZs fit the subnet plan, got 4"):
        m.subnet_plan("10.0.0.0/16", ("a", "b", "c", "d"))


def test_public_subnets_carry_the_elb_and_cluster_tags():
    # Tags the AWS Load Balancer Controller and EKS read
    # (https://docs.aws.amazon.com/eks/latest/userguide/network-load-balancing.html).
    expected = {"kubernetes.io/role/elb": "1", "kubernetes.io/cluster/c1": "shared"}
    got = m.public_subnet_tags("c1")
    assert got == expected, f"expected {expected}, got {got}"


def test_capacity_block_names_the_type_in_the_launch_template_and_none_on_the_node_group(gpu):
    # EKS guide capacity-blocks-mng: the launch template names the type; a node group whose launch template
    # names one may not list instance types.
    cap = m.gpu_capacity(
        replace(gpu, instance_type="p5.48xlarge", capacity_reservation_id=RESERVATION, capacity_block=True)
    )
    got = (cap.launch_template_instance_type, cap.node_group_instance_types)
    assert got == ("p5.48xlarge", None), f"expected ('p5.48xlarge', None), got {got}"


@pytest.mark.parametrize("reservation", [None, RESERVATION])
def test_without_a_capacity_block_the_node_group_lists_the_type_and_the_template_none(gpu, reservation):
    cap = m.gpu_capacity(replace(gpu, capacity_reservation_id=reservation, capacity_block=False))
    got = (cap.launch_template_instance_type, cap.node_group_instance_types)
    assert got == (None, [gpu.instance_type]), f"expected (None, [{gpu.instance_type!r}]), got {got}"


# --------------------------------------------------------------------------- GPU node user data


def _shell_parts(user_data: str) -> list[str]:
    parts = []
    for part in email.message_from_string(user_data).walk():
        if part.get_content_type() == "text/x-shellscript":
            payload = part.get_payload()
            assert isinstance(payload, str), f"a shell part that is not one text: {payload!r}"
            parts.append(payload)
    return parts


def test_gpu_user_data_is_mime_multipart_with_one_shell_part():
    # EKS merges its NodeConfig into MIME multi-part user data (EKS guide launch-templates); a bare script is refused.
    message = email.message_from_string(m.gpu_node_user_data(5281))
    got = (message.is_multipart(), len(_shell_parts(m.gpu_node_user_data(5281))))
    assert got == (True, 1), f"expected a multipart message with one text/x-shellscript part, got {got}"


def test_gpu_user_data_reserves_the_pages_it_is_given_and_keeps_them_across_reboots():
    (script,) = _shell_parts(m.gpu_node_user_data(5281))
    expected = ["want=5281", 'sysctl -w vm.nr_hugepages="$want"', "> /etc/sysctl.d/90-ray-efa-eks-hugepages.conf"]
    missing = [e for e in expected if e not in script]
    assert not missing, f"expected {missing} in the shell part:\n{script}"


@pytest.mark.parametrize(
    ("instance_type", "pages"),
    # efa-config 1.15's efa-hugepages-reserve.sh: 110 MiB x 2 endpoints x CPUs in 2 MiB pages, plus one
    # (infra/eks_facts.py names the source): 48 vCPUs -> 110 x 48 + 1, 192 vCPUs -> 110 x 192 + 1.
    [("g6.12xlarge", 5281), ("g5.12xlarge", 5281), ("p5.48xlarge", 21121)],
)
def test_gpu_nodes_reserve_what_the_efa_installers_rule_computes_for_their_type(instance_type, pages):
    (script,) = _shell_parts(m.gpu_node_user_data(gpu_hugepages_2mi(instance_type)))
    assert f"want={pages}\n" in script, f"expected want={pages} for {instance_type} in:\n{script}"


def test_a_small_type_still_reserves_one_worker_request():
    """efa-config's rule gives 110 x 8 + 1 = 881 pages for 8 vCPUs, less than the 2560 a worker requests."""
    assert efa_hugepages_pages(8) == 2560, f"expected the worker's 2560 pages, got {efa_hugepages_pages(8)}"


def test_gpu_user_data_never_lowers_a_larger_pool():
    (script,) = _shell_parts(m.gpu_node_user_data(10))
    assert 'if [ "$have" -lt "$want" ]; then' in script, f"expected the raise-only guard in:\n{script}"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_user_data_shell_part_is_valid_bash(tmp_path):
    (script,) = _shell_parts(m.gpu_node_user_data(5281))
    path = tmp_path / "part.sh"
    path.write_text(script)
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, f"bash -n failed: {done.stderr}"
