"""The stack keys of issue 18 (AWS truth): each is read into the typed config and bad values name key, value and fix."""

from __future__ import annotations

import warnings
from datetime import date

import pytest

from infra.config import ConfigError, ConfigWarning, StackConfig, extended_support_note, validate

ADMIN = "arn:aws:iam::123456789012:role/ci-deployer"
# A type Capacity Blocks exist for, with the keys that must follow it (32 EFA interfaces, 8 GPUs).
P5 = {"gpuInstanceType": "p5.48xlarge", "gpuEfaInterfaces": 32, "rayWorkerEfa": 32, "rayWorkerGpus": 8}


def _validate(overrides: dict) -> StackConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return validate(overrides, stack="test", region="us-west-2")


def test_new_keys_reach_the_typed_config():
    cfg = _validate(
        {
            **P5,
            "gpuCapacityReservationId": "cr-0123456789abcdef0",
            "gpuCapacityBlock": True,
            "gpuPlacementGroupName": "reserved-pg",
            "systemRootVolumeGib": 150,
            "clusterAdminRoleArns": [ADMIN],
        }
    )
    got = (
        cfg.gpu_nodes.capacity_block,
        cfg.gpu_nodes.placement_group_name,
        cfg.system_nodes.root_volume_gib,
        cfg.cluster.admin_role_arns,
    )
    assert got == (True, "reserved-pg", 150, (ADMIN,)), f"typed config got {got}"


def test_defaults_create_the_placement_group_and_give_no_extra_admin():
    cfg = _validate({})
    got = (cfg.gpu_nodes.capacity_block, cfg.gpu_nodes.placement_group_name, cfg.cluster.admin_role_arns)
    assert got == (False, "", ()), f"defaults got {got}"


def test_default_kubernetes_version_is_in_standard_support_today():
    version = _validate({}).cluster.kubernetes_version
    assert extended_support_note(version, date.today()) is None, f"default {version} is past its standard support"


BAD = {
    "capacity block without reservation": ({"gpuCapacityBlock": True}, "gpuCapacityBlock is true but"),
    "placement group name": ({"gpuPlacementGroupName": "bad name!"}, "gpuPlacementGroupName 'bad name!'"),
    "system volume too small": ({"systemRootVolumeGib": 20}, "systemRootVolumeGib 20"),
    "admin not a role arn": ({"clusterAdminRoleArns": ["arn:aws:iam::1:user/x"]}, "clusterAdminRoleArns entry"),
    "worker memory eats the huge pages": ({"rayWorkerMemory": "170Gi"}, "10.3 GiB of EFA huge pages"),
    "vpc-cni version without its eksbuild": ({"vpcCniVersion": "v1.22.4"}, "vpcCniVersion 'v1.22.4'"),
    "vpc-cni version floating": ({"vpcCniVersion": "latest"}, "vpcCniVersion 'latest'"),
    "kube-proxy version without its eksbuild": ({"kubeProxyVersion": "v1.36.0"}, "kubeProxyVersion 'v1.36.0'"),
}


@pytest.mark.parametrize("overrides, expected", BAD.values(), ids=BAD.keys())
def test_bad_new_key_is_refused_with_its_name(overrides, expected):
    with pytest.raises(ConfigError) as err:
        _validate(overrides)
    assert expected in str(err.value), f"expected {expected!r} in: {err.value}"


def test_capacity_block_on_a_type_without_capacity_blocks_is_refused_with_the_fix():
    with pytest.raises(ConfigError) as err:
        _validate({"gpuCapacityReservationId": "cr-0123456789abcdef0", "gpuCapacityBlock": True})
    expected = ("do not exist for g6.12xlarge", "set gpuCapacityBlock to false", "describe-capacity-block-offerings")
    missing = [e for e in expected if e not in str(err.value)]
    assert not missing, f"expected {missing} in: {err.value}"


def test_capacity_block_warns_that_updates_need_desired_size_zero():
    with pytest.warns(ConfigWarning, match=r"only at desired size 0"):
        validate(
            {**P5, "gpuCapacityReservationId": "cr-0123456789abcdef0", "gpuCapacityBlock": True},
            stack="t",
            region="us-west-2",
        )


def test_kubernetes_1_36_leaves_standard_support_on_2027_08_02():
    # EKS bills extended support from the start (UTC) of the day standard support ends (infra/eks_facts.py).
    got = (
        extended_support_note("1.36", date(2027, 8, 1)),
        "2027-08-02" in (extended_support_note("1.36", date(2027, 8, 2)) or ""),
    )
    assert got == (None, True), f"expected no note on 2027-08-01 and one naming 2027-08-02 on that day, got {got}"


def test_default_kubernetes_and_kube_proxy_versions_agree_on_the_minor():
    c = _validate({}).cluster
    got = (c.kubernetes_version, c.kube_proxy_version.split(".")[:2])
    assert got == ("1.36", ["v1", "36"]), f"expected 1.36 with a v1.36 kube-proxy, got {got}"


def test_kubernetes_version_changed_without_kube_proxy_warns_with_the_listing_command():
    with pytest.warns(ConfigWarning, match=r"kubeProxyVersion 'v1.36.0-eksbuild.21' is for Kubernetes 1.36 but"):
        validate({"kubernetesVersion": "1.35"}, stack="t", region="us-west-2")


def test_matching_kube_proxy_and_kubernetes_versions_give_no_kube_proxy_note():
    notes = [w for w in _validate({}).warnings if "kubeProxyVersion" in w]
    assert notes == [], f"expected no kube-proxy note for the defaults, got {notes}"


def test_version_past_standard_support_warns_with_the_date():
    with pytest.warns(ConfigWarning, match=r"left EKS standard support on 2026-12-02"):
        validate({"kubernetesVersion": "1.34"}, stack="t", region="us-west-2")


def test_version_in_standard_support_has_no_note():
    assert extended_support_note("1.35", date(2027, 3, 26)) is None


def test_version_is_extended_on_the_day_its_standard_support_ends():
    assert "2027-03-27" in (extended_support_note("1.35", date(2027, 3, 27)) or ""), "no note on 2027-03-27"


# ---- past EKS extended support: refused offline (issue 44 item 8). Dates: infra/eks_facts.py, from the EKS user
# guide's release calendar (1.31: extended support ends 2026-11-26; on that day EKS creates no cluster on it).
OLD = {"kubernetesVersion": "1.31", "kubeProxyVersion": "v1.31.0-eksbuild.1"}


def _validate_on(overrides: dict, today: date) -> StackConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return validate(overrides, stack="test", region="us-west-2", today=today)


def test_version_on_its_last_day_of_extended_support_is_accepted():
    assert _validate_on(OLD, date(2026, 11, 25)).cluster.kubernetes_version == "1.31"


def test_version_on_the_day_its_extended_support_ends_is_refused_naming_key_value_and_fix():
    with pytest.raises(ConfigError) as err:
        _validate_on(OLD, date(2026, 11, 26))
    wanted = ("kubernetesVersion '1.31'", "2026-11-26", "set kubernetesVersion to 1.32 or newer")
    assert all(w in str(err.value) for w in wanted), f"expected {wanted} in: {err.value}"


def test_version_in_extended_support_warns_of_the_hourly_cost_and_is_not_refused():
    with pytest.warns(ConfigWarning, match=r"'1.31' left EKS standard support .* additional cost per cluster hour"):
        validate(OLD, stack="test", region="us-west-2", today=date(2025, 11, 26))


def test_the_fix_names_the_oldest_version_still_supported_that_day():
    with pytest.raises(ConfigError, match=r"set kubernetesVersion to 1.33 or newer"):
        _validate_on({"kubernetesVersion": "1.32", "kubeProxyVersion": "v1.32.0-eksbuild.1"}, date(2027, 3, 23))
