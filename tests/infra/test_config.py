"""infra.config: the stack files load, every bad config (or broken file) names key, value and fix,
and Pulumi.yaml's config: block is the typed schema's rendering."""

from __future__ import annotations

import contextvars
import json
import shutil
import warnings
from datetime import date
from pathlib import Path

import pulumi
import pytest
import yaml
from conftest import REPO, quiet_stack

from infra.config import (
    KEYS,
    KEYS_BY_NAME,
    MOCK_DEPLOYER_CIDR,
    PROJECT,
    ConfigWarning,
    GpuNodesConfig,
    StackConfig,
    StackConfigError,
    extended_support_note,
    from_pulumi_config,
    is_floating_image,
    load_stack,
    require_gpu_az,
    stack_config_values,
    validate,
)
from infra.config_files import config_docs, pulumi_yaml_config, write_pulumi_yaml
from infra.config_schema import MAX_NODES_PER_MANAGED_NODE_GROUP, coerce
from infra.mock_render import RenderMocks

STACKS = ("us-east-2", "us-west-2")


def _validate(overrides: dict, region: str = "us-west-2") -> StackConfig:
    """The defaults of Pulumi.yaml with ``overrides`` (our keys, unprefixed), validated."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return validate(overrides, stack="test", region=region)


@pytest.mark.parametrize("stack", STACKS)
def test_example_stack_loads_with_its_own_region(stack):
    cfg = quiet_stack(stack)
    assert cfg.region == stack, f"expected region {stack}, got {cfg.region}"
    assert all(az.startswith(stack) for az in cfg.network.azs), f"AZs {cfg.network.azs} not in {stack}"
    assert cfg.gpu_nodes.availability_zone in cfg.network.azs


def test_stacks_differ_only_in_what_their_files_set():
    east, west = quiet_stack("us-east-2"), quiet_stack("us-west-2")
    assert east.network.vpc_cidr != west.network.vpc_cidr, "the example stacks should use different VPC CIDRs"
    assert east.gpu_nodes.instance_type == west.gpu_nodes.instance_type == "g6.12xlarge"


def test_defaults_are_the_reference_deployment():
    cfg = quiet_stack("us-west-2")
    w = cfg.ray.worker
    got = (cfg.gpu_nodes.node_count, w.num_gpus, w.efa, w.cpu, w.memory, w.replicas, cfg.system_nodes.instance_type)
    assert got == (2, 4, 1, "40", "160Gi", 2, "m7i.xlarge"), f"unexpected defaults {got}"
    assert cfg.ray.image == "public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1.0"
    assert cfg.ray.version == "2.58.0"
    assert (cfg.charts.nvidia_device_plugin, cfg.charts.kuberay_operator) == ("0.20.0", "1.5.2")
    assert cfg.ray.head_service_name == "ray-efa-head-svc"


def test_unknown_train_key_is_refused_by_infra_naming_the_close_match():
    with pytest.raises(StackConfigError) as err:
        _validate({"train": {"stepz": 5}})
    text = str(err.value)
    assert "ray-efa-eks:train.stepz" in text and "did you mean 'steps'?" in text, (
        f"expected the key ray-efa-eks:train.stepz and the match 'steps', got {text!r}"
    )


def test_driver_set_train_key_is_refused_by_infra():
    with pytest.raises(StackConfigError, match=r"ray-efa-eks:train\.run_id is set by the driver"):
        _validate({"train": {"run_id": "x"}})


def test_config_is_frozen() -> None:
    # conftest is not on mypy's path (tests/ is not a package base: pyproject.toml), so the type is named here
    cfg: StackConfig = quiet_stack("us-west-2")
    with pytest.raises(AttributeError):
        cfg.gpu_nodes.node_count = 3  # type: ignore[misc]


def test_pulumi_yaml_config_block_is_rendered_from_the_schema():
    text = (REPO / "Pulumi.yaml").read_text()
    block = text[text.index("\nconfig:\n") + 1 :]
    assert block == pulumi_yaml_config(KEYS), (
        "Pulumi.yaml's config: block differs from infra/config.py's schema: "
        "run `python -m infra.config --write-pulumi-yaml`"
    )


def test_configuration_page_is_generated_from_the_schema():
    assert (REPO / "docs" / "configuration.md").read_text() == config_docs(KEYS), (
        "docs/configuration.md differs from infra/config.py's schema: run `python -m infra.config --write-docs`"
    )


def test_configuration_page_lists_every_key_once_with_its_default():
    rows = [line for line in config_docs(KEYS).splitlines() if line.startswith("| `")]
    named = [row.split("`")[1] for row in rows]
    vpc = next(row for row in rows if row.startswith("| `vpcCidr`"))
    assert (named, "`10.0.0.0/16`" in vpc) == ([k.name for k in KEYS], True), f"rows name {named}; vpcCidr: {vpc}"


def test_write_pulumi_yaml_replaces_a_drifted_block_and_then_leaves_it(tmp_path):
    path = tmp_path / "Pulumi.yaml"
    path.write_text((REPO / "Pulumi.yaml").read_text().replace("default: ray-efa-eks\n", "default: other\n", 1))
    first, second = write_pulumi_yaml(path, KEYS), write_pulumi_yaml(path, KEYS)
    assert (first, second, path.read_text()) == (True, False, (REPO / "Pulumi.yaml").read_text()), (
        f"expected one rewrite back to the shipped file, got rewrites {first}, {second}"
    )


def test_every_key_lands_on_its_own_field_of_the_typed_config():
    cfg = _validate({})
    wrong = {}
    for k in KEYS:
        value = cfg
        for attr in k.path:
            value = getattr(value, attr)
        if value != coerce(k, k.default):
            wrong[k.name] = (k.path, value)
    assert not wrong, f"keys whose field does not hold their default: {wrong}"


def test_keyname_refuses_a_field_that_is_no_key():
    assert GpuNodesConfig.keyname("node_count", prefixed=True) == "ray-efa-eks:gpuNodeCount"
    with pytest.raises(KeyError):
        GpuNodesConfig.keyname("gpus_per_node")  # derived from the catalog, not a stack key


def test_pulumi_yaml_declares_only_types_the_cli_accepts():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    bad = {k: d.get("type") for k, d in project["config"].items() if d.get("type", "string") not in _YAML_TYPES}
    assert not bad, f"Pulumi project config supports string/integer/boolean/array (or no type), got {bad}"


def test_every_key_has_a_description_and_a_section():
    bare = [k.name for k in KEYS if not k.description or not k.section]
    assert not bare, f"keys without description or section: {bare}"


def test_unknown_stack_lists_the_known_ones():
    with pytest.raises(StackConfigError) as err:
        load_stack("eu-west-1", REPO)
    assert "us-east-2" in str(err.value) and "us-west-2" in str(err.value), f"got: {err.value}"


def test_stack_file_with_undeclared_key_is_rejected(tmp_path):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "Pulumi.x.yaml").write_text("config:\n  aws:region: us-west-2\n  ray-efa-eks:gpuNodeCont: 3\n")
    with pytest.raises(StackConfigError, match="gpuNodeCont"):
        load_stack("x", tmp_path)


def test_stack_without_region_is_rejected(tmp_path):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "Pulumi.x.yaml").write_text("config:\n  ray-efa-eks:gpuNodeCount: 2\n")
    with pytest.raises(StackConfigError, match="aws:region"):
        load_stack("x", tmp_path)


def test_engine_strings_coerce_like_yaml_values():
    as_engine = _validate(
        {"gpuNodeCount": "3", "apiPublicAccess": "false", "availabilityZones": '["us-west-2a", "us-west-2c"]'}
    )
    as_yaml = _validate(
        {"gpuNodeCount": 3, "apiPublicAccess": False, "availabilityZones": ["us-west-2a", "us-west-2c"]}
    )
    assert as_engine == as_yaml


def test_private_only_endpoint_needs_no_cidrs():
    cfg = _validate({"apiPublicAccess": False, "apiPublicAccessCidrs": []})
    assert (cfg.cluster.endpoint_public_access, cfg.cluster.public_access_cidrs) == (False, ())


# Each bad config, and words its error must contain: the key, the value, the fix.
BAD_CONFIGS = {
    "gpu count mismatch": (
        {"rayWorkerGpus": 8},
        ["gpuInstanceType 'g6.12xlarge' has 4 GPUs", "rayWorkerGpus is 8", "set rayWorkerGpus to 4"],
    ),
    "cpu over allocatable": (
        {"rayWorkerCpu": "48"},
        ["rayWorkerCpu '48'", "g6.12xlarge", "set rayWorkerCpu to at most 47"],
    ),
    "memory over allocatable": (
        {"rayWorkerMemory": "190Gi"},
        ["rayWorkerMemory '190Gi'", "g6.12xlarge", "set rayWorkerMemory to at most 162Gi"],
    ),
    "head over system node": ({"rayHeadMemory": "16Gi"}, ["rayHeadMemory '16Gi'", "m7i.xlarge", "set rayHeadMemory"]),
    "instance without EFA": (
        {
            "gpuInstanceType": "g6.xlarge",
            "rayWorkerGpus": 1,
            "rayWorkerCpu": "2",
            "rayWorkerMemory": "8Gi",
            "rayWorkerShmSize": "2Gi",
        },
        ["gpuInstanceType 'g6.xlarge' does not support EFA", "use one of", "g6.12xlarge"],
    ),
    "instance not a GPU": (
        {"gpuInstanceType": "m7i.2xlarge"},
        ["gpuInstanceType 'm7i.2xlarge' has no GPU", "use one of"],
    ),
    "unknown instance": ({"gpuInstanceType": "g7.12xlarge"}, ["gpuInstanceType 'g7.12xlarge'", "instance_types.json"]),
    "misspelled instance": ({"gpuInstanceType": "g6.12xlarg"}, ["gpuInstanceType 'g6.12xlarg'", "'g6.12xlarge'?"]),
    "list where a string belongs": ({"clusterName": ["a"]}, ["clusterName ['a'] is not a string"]),
    "train block not a mapping": ({"train": "steps=5"}, ["train 'steps=5' is not an object"]),
    "unknown key": ({"gpuNodeCont": 3}, ["ray-efa-eks:gpuNodeCont", "did you mean 'gpuNodeCount'?"]),
    "EFA count mismatch": (
        {"gpuInstanceType": "p5.48xlarge", "rayWorkerGpus": 8},
        ["gpuEfaInterfaces is 1", "p5.48xlarge", "32 EFA interface(s)", "set gpuEfaInterfaces to 32"],
    ),
    "worker EFA mismatch": ({"rayWorkerEfa": 2}, ["rayWorkerEfa is 2", "set rayWorkerEfa to 1"]),
    "AZ outside the network": (
        {"gpuAvailabilityZone": "us-west-2d"},
        ["gpuAvailabilityZone 'us-west-2d'", "us-west-2a", "set gpuAvailabilityZone to one of them"],
    ),
    "AZ outside the region": (
        {"availabilityZones": ["us-east-1a", "us-east-1b"]},
        ["'us-east-1a'", "aws:region 'us-west-2'"],
    ),
    "one AZ only": ({"availabilityZones": ["us-west-2a"]}, ["availabilityZones", "2 or 3", "control plane needs two"]),
    "floating image tag": (
        {"rayImage": "public.ecr.aws/deep-learning-containers/ray:latest"},
        ["rayImage 'public.ecr.aws/deep-learning-containers/ray:latest'", "floating", "pin a version tag or a digest"],
    ),
    "image without tag": ({"rayImage": "rayproject/ray"}, ["rayImage 'rayproject/ray'", "pin a version tag"]),
    "chart range": (
        {"kuberayOperatorChartVersion": "1.5.x"},
        ["kuberayOperatorChartVersion '1.5.x'", "exact chart version"],
    ),
    "chart latest": (
        {"nvidiaDevicePluginChartVersion": "latest"},
        ["nvidiaDevicePluginChartVersion 'latest'", "pin one"],
    ),
    "zero GPU nodes": ({"gpuNodeCount": 0}, ["gpuNodeCount 0", "2 or more", "within 1..450"]),
    "negative idle minutes": ({"gpuIdleMinutes": -1}, ["gpuIdleMinutes -1", "0 turns the guard off"]),
    "GPU nodes over the node group quota": ({"gpuNodeCount": 100000}, ["gpuNodeCount 100000", "450", "within 1..450"]),
    "system nodes over the node group quota": ({"systemNodeCount": 451}, ["systemNodeCount 451", "within 1..450"]),
    "root volume too small": ({"gpuRootVolumeGib": 20}, ["gpuRootVolumeGib 20", "within 50..16384"]),
    "bad integer": ({"gpuNodeCount": "two"}, ["gpuNodeCount 'two' is not an integer"]),
    "bad reservation id": (
        {"gpuCapacityReservationId": "reservation-1"},
        ["gpuCapacityReservationId 'reservation-1'", "cr-"],
    ),
    "shm over memory": ({"rayWorkerShmSize": "100Gi"}, ["rayWorkerShmSize '100Gi'", "half of rayWorkerMemory"]),
    "memory without unit": ({"rayWorkerMemory": "160"}, ["rayWorkerMemory '160' has no unit"]),
    "old kubernetes": ({"kubernetesVersion": "1.28"}, ["kubernetesVersion '1.28'", "1.30 or newer"]),
    "more idle nodes than nodes": ({"gpuIdleNodes": 3}, ["gpuIdleNodes 3 is more than gpuNodeCount 2", "within 0..2"]),
    "idle guard over a day": ({"gpuIdleMinutes": 1441}, ["gpuIdleMinutes 1441", "within 0..1440"]),
}


@pytest.mark.parametrize("overrides, expected", BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_bad_config_names_key_value_and_fix(overrides, expected):
    with pytest.raises(StackConfigError) as err:
        _validate(overrides)
    missing = [text for text in expected if text not in str(err.value)]
    assert not missing, f"error lacks {missing}; got: {err.value}"


def test_single_gpu_node_is_allowed_but_warns_about_efa():
    with pytest.warns(ConfigWarning, match="no inter-node traffic will exist to prove EFA"):
        cfg = validate({"gpuNodeCount": 1, "apiPublicAccessCidrs": ["203.0.113.7/32"]}, stack="t", region="us-west-2")
    assert cfg.gpu_nodes.node_count == 1 and cfg.ray.worker.replicas == 1
    assert any("prove EFA" in w for w in cfg.warnings), f"warnings: {cfg.warnings}"


def test_two_gpu_nodes_do_not_warn_about_efa():
    cfg = _validate({"apiPublicAccessCidrs": ["203.0.113.7/32"]})
    assert cfg.warnings == (), f"expected no warnings, got {cfg.warnings}"


def test_train_block_values_pass_through_unjudged():
    block = {"steps": -5, "global_batch_size": "TrainConfig judges it"}
    got = _validate({"train": block}).train
    assert got == block, f"expected the block as given, got {got}"


def test_train_block_arrives_from_the_engine_as_json():
    got = _validate({"train": '{"steps": 5}'}).train
    assert got == {"steps": 5}, f"expected {{'steps': 5}}, got {got}"


def test_open_public_endpoint_warns():
    cfg = _validate({"apiPublicAccessCidrs": ["0.0.0.0/0"]})
    assert any("0.0.0.0/0" in w for w in cfg.warnings), f"warnings: {cfg.warnings}"


def test_default_api_allow_list_is_left_to_the_driver():
    cluster = _validate({}).cluster
    assert (cluster.public_access_cidrs, cluster.needs_address) == ((), True), f"got {cluster}"


@pytest.mark.parametrize("stack", ["us-east-2", "us-west-2"])
def test_shipped_stacks_do_not_warn_about_the_api_endpoint(stack):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = load_stack(stack, REPO)
    about_api = [w for w in cfg.warnings if "apiPublicAccessCidrs" in w]
    assert not about_api, f"expected no API endpoint warning for {stack}, got {about_api}"


def test_program_refuses_an_empty_api_allow_list_naming_key_and_command():
    with pytest.raises(StackConfigError) as err:
        _validate({}).cluster.require_api_cidrs("us-west-2")
    wanted = ["ray-efa-eks:apiPublicAccessCidrs", "python -m automation up --stack us-west-2", "apiPublicAccess"]
    missing = [w for w in wanted if w not in str(err.value)]
    assert not missing, f"error lacks {missing}; got: {err.value}"


def test_private_endpoint_needs_no_address():
    cluster = _validate({"apiPublicAccess": False}).cluster
    cluster.require_api_cidrs("us-west-2")  # raises if the rule judged a private endpoint
    assert not cluster.needs_address


def test_capacity_reservation_is_kept():
    cfg = _validate({"gpuCapacityReservationId": "cr-0123456789abcdef0"})
    assert cfg.gpu_nodes.capacity_reservation_id == "cr-0123456789abcdef0"
    assert _validate({}).gpu_nodes.capacity_reservation_id == ""


@pytest.mark.parametrize(
    "image, floating",
    [
        ("public.ecr.aws/deep-learning-containers/ray:train-ml-cuda-v1.1", False),
        ("rayproject/ray:2.58.0-gpu", False),
        ("rayproject/ray@sha256:" + "a" * 64, False),
        ("localhost:5000/ray", True),  # the port is not a tag
        ("rayproject/ray:latest", True),
        ("rayproject/ray:nightly", True),
        ("rayproject/ray:py311-latest", True),
    ],
)
def test_floating_image_detection(image, floating):
    assert is_floating_image(image) is floating, f"{image}: expected floating={floating}"


_YAML_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list}


def test_defaults_and_stack_values_have_the_declared_types():
    """The pulumi CLI rejects a value whose YAML type differs from the declared one."""
    project = {k: d for k, d in yaml.safe_load((REPO / "Pulumi.yaml").read_text())["config"].items() if "type" in d}
    wrong = {
        k: type(d["default"]).__name__ for k, d in project.items() if type(d["default"]) is not _YAML_TYPES[d["type"]]
    }
    for stack in STACKS:
        values = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text())["config"]
        wrong.update(
            {
                f"{stack}:{k}": type(v).__name__
                for k, v in values.items()
                if k.startswith("ray-efa-eks:")
                and k.split(":", 1)[1] in project
                and type(v) is not _YAML_TYPES[project[k.split(":", 1)[1]]["type"]]
            }
        )
    assert not wrong, f"values whose YAML type differs from the declaration: {wrong}"


def test_gpu_az_defaults_to_empty_for_preflight_to_choose():
    default = KEYS_BY_NAME["gpuAvailabilityZone"].default
    assert default == "", f"expected an empty default (no region's AZ fits every stack), got {default!r}"


def test_empty_gpu_az_is_accepted_with_a_capacity_reservation():
    cfg = _validate({"gpuAvailabilityZone": "", "gpuCapacityReservationId": "cr-0123456789abcdef0"})
    assert cfg.gpu_nodes.availability_zone == "", f"got {cfg.gpu_nodes.availability_zone!r}"


def test_quota_bound_is_the_eks_default():
    assert MAX_NODES_PER_MANAGED_NODE_GROUP == 450, "EKS quota 'Nodes per managed node group' defaults to 450"


# --------------------------------------------------------------------------- broken files


def _project(tmp_path: Path, stack_text: str | bytes) -> Path:
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    path = tmp_path / "Pulumi.x.yaml"
    path.write_bytes(stack_text if isinstance(stack_text, bytes) else stack_text.encode())
    return tmp_path


def _load_error(project_dir: Path) -> str:
    with pytest.raises(StackConfigError) as err:
        quiet_stack("x", project_dir)
    return str(err.value)


GOOD = "config:\n  aws:region: us-west-2\n  ray-efa-eks:gpuAvailabilityZone: us-west-2a\n"

BROKEN_FILES = {
    "not YAML": ("config: [broken", ["Pulumi.x.yaml is not valid YAML", "line 1", "fix the syntax"]),
    "not UTF-8": (b"config:\n  aws:region: us-west-2\xff\n", ["not UTF-8", "0xff", "save it as UTF-8"]),
    "not a mapping": ("- a\n- b\n", ["not a Pulumi stack file", "config:"]),
    "misspelled region": (
        "config:\n  aws:region: us-wset-2\n",
        ["aws:region 'us-wset-2' is not an AWS region", "did you mean 'us-west-2'?"],
    ),
    "misspelled namespace": (
        GOOD + "  ray-efa-ek:gpuNodeCount: 40\n",
        ["ray-efa-ek:gpuNodeCount", "unknown namespace 'ray-efa-ek'", "did you mean 'ray-efa-eks'?"],
    ),
    "bare key": (GOOD + "  gpuNodeCount: 40\n", ["'gpuNodeCount' without a namespace", "ray-efa-eks:gpuNodeCount"]),
    "unknown aws key": (GOOD + "  aws:regoin: us-west-2\n", ["aws:regoin", "did you mean 'region'?"]),
    "count beyond the quota": (GOOD + "  ray-efa-eks:gpuNodeCount: 100000\n", ["gpuNodeCount 100000", "450"]),
}


@pytest.mark.parametrize("text, expected", BROKEN_FILES.values(), ids=BROKEN_FILES.keys())
def test_broken_stack_file_names_the_cause(tmp_path, text, expected):
    message = _load_error(_project(tmp_path, text))
    missing = [t for t in expected if t not in message]
    assert not missing, f"error lacks {missing}; got: {message}"


def test_missing_project_file_is_named(tmp_path):
    (tmp_path / "Pulumi.x.yaml").write_text(GOOD)
    message = _load_error(tmp_path)
    assert "Pulumi.yaml does not exist" in message, f"got: {message}"


def test_broken_project_file_is_named(tmp_path):
    _project(tmp_path, GOOD)
    (tmp_path / "Pulumi.yaml").write_text("name: [ray-efa-eks\n")
    message = _load_error(tmp_path)
    assert "Pulumi.yaml is not valid YAML" in message, f"got: {message}"


def test_other_projects_file_is_refused(tmp_path):
    _project(tmp_path, GOOD)
    (tmp_path / "Pulumi.yaml").write_text("name: other\nruntime: python\n")
    message = _load_error(tmp_path)
    assert "names project 'other'" in message, f"got: {message}"


def test_good_stack_file_loads(tmp_path):
    cfg = quiet_stack("x", _project(tmp_path, GOOD))
    assert cfg.gpu_nodes.availability_zone == "us-west-2a", f"got {cfg.gpu_nodes.availability_zone!r}"


def test_stack_train_block_reaches_the_config_and_the_engine_values(tmp_path):
    from infra.config import stack_config_values

    project = _project(tmp_path, GOOD + "  ray-efa-eks:train:\n    steps: 5\n")
    train = quiet_stack("x", project).train
    engine = stack_config_values("x", project)["ray-efa-eks:train"]
    assert (train, engine) == ({"steps": 5}, '{"steps": 5}'), f"got {train!r} and {engine!r}"


# ---- infra/config.py's rules over several keys, by rule: each limit on both sides of its boundary, each refusal's
# whole message (the key, the value and the fix a user acts on), and what one section takes from the others.
#
# The numbers are written here with their source, not read from the code under test: the instance facts are
# infra/data/instance_types.json's (its `$comment` gives the EKS rules they follow), the huge-page pool is the EFA
# installer's rule quoted in infra/eks_facts.py, and the bucket prefix limit is the AWS provider's (37 characters:
# 63 for a bucket name less the 26 of the random suffix pulumi-aws adds to `bucketPrefix`).


def _validate_as(overrides: dict, stack: str = "test", region: str = "us-west-2") -> StackConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return validate(overrides, stack=stack, region=region)


def _refusal(overrides: dict, stack: str = "test") -> str:
    with pytest.raises(StackConfigError) as err:
        _validate_as(overrides, stack)
    return str(err.value)


# ---- limits, on both sides ----------------------------------------------------------------------
# (key, the largest value that fits, the smallest that does not). A pod's room is the node's allocatable
# less 0.5 CPU and 1.0 GiB kept for DaemonSets, and for a worker less the EFA huge-page pool; memory to 0.1 GiB.
# g6.12xlarge (48 vCPUs, 192 GiB, 234 pods): allocatable 48 - (0.06 + 0.01 + 2 x 0.005 + 44 x 0.0025) = 47.81
# CPU and 0.92 x 192 - (11 x 234 + 255 + 100) / 1024 = 173.78 GiB; huge pages 110 MiB x 2 x 48 / 2 MiB + 1 =
# 5281 pages = 10.31 GiB. m7i.xlarge (4 vCPUs, 16 GiB, 58 pods): 3.92 CPU, 13.75 GiB, no huge pages.
BOUNDS = {
    "worker cpu: 47.81 - 0.5": ("rayWorkerCpu", "47.31", "47320m"),
    "worker memory: 173.78 - 1.0 - 10.31 = 162.47, to 162.5": ("rayWorkerMemory", "162.5Gi", "162.6Gi"),
    "head cpu: 3.92 - 0.5": ("rayHeadCpu", "3.42", "3430m"),
    "head memory: 13.75 - 1.0 = 12.75, to 12.8": ("rayHeadMemory", "12.8Gi", "12.9Gi"),
    "shm at least 1Gi": ("rayWorkerShmSize", "1Gi", "1023Mi"),
    "shm at most half of rayWorkerMemory (160Gi)": ("rayWorkerShmSize", "80Gi", "80.1Gi"),
    "idle nodes at most gpuNodeCount (2)": ("gpuIdleNodes", 2, 3),
    "bucket prefix '<clusterName>-test-' at most 37 characters": ("clusterName", "c" * 31, "c" * 32),
}


@pytest.mark.parametrize("key, fits, too_much", BOUNDS.values(), ids=BOUNDS.keys())
def test_a_limit_takes_its_boundary(key, fits, too_much):
    got = _validate_as({key: fits})  # raises on a refusal
    assert got.stack == "test", f"expected {key}={fits!r} accepted, got {got}"


@pytest.mark.parametrize("key, fits, too_much", BOUNDS.values(), ids=BOUNDS.keys())
def test_one_step_past_a_limit_is_refused_by_name(key, fits, too_much):
    got = _refusal({key: too_much})
    assert key in got, f"expected {key}={too_much!r} refused by name, got {got}"


def test_a_set_bucket_name_lifts_the_prefix_limit():
    got = _validate_as({"clusterName": "c" * 32, "storageBucketName": "my-runs"}).storage.bucket_name
    assert got == "my-runs", f"expected the named bucket, got {got!r}"


# ---- the whole message of each refusal ----------------------------------------------------------
CAPACITY_BLOCK_TYPES = "p4d, p4de, p5, p5e, p5en, p6-b200, p6-b300, p6e-gb200, trn1, trn2"  # the EC2 guide's list
BLOCKS_GUIDE = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-capacity-blocks.html"
RESERVATION = "cr-0123456789abcdef0"

MESSAGES = {
    "worker GPUs": (
        {"rayWorkerGpus": 8},
        "gpuInstanceType 'g6.12xlarge' has 4 GPUs but rayWorkerGpus is 8: set rayWorkerGpus to 4 (one worker pod per "
        "node, Ray num-gpus = the pod's GPU limit)",
    ),
    "image cache off ECR Public": (
        {"rayImage": "docker.io/rayproject/ray:2.58.0"},
        "imageCache is true but rayImage 'docker.io/rayproject/ray:2.58.0' is not on public.ecr.aws, the only upstream "
        "the stack's cache rule serves: set imageCache to false, or use an image from public.ecr.aws",
    ),
    "worker memory, huge pages named": (
        {"rayWorkerMemory": "163Gi"},
        "rayWorkerMemory '163Gi' does not fit gpuInstanceType 'g6.12xlarge' (allocatable 173.78 GiB, 1.0 GiB kept for "
        "DaemonSets, 10.3 GiB of EFA huge pages): set rayWorkerMemory to at most 162Gi",
    ),
    "worker CPU": (
        {"rayWorkerCpu": "48"},
        "rayWorkerCpu '48' does not fit gpuInstanceType 'g6.12xlarge' (allocatable 47.81 CPU, 0.5 kept for "
        "DaemonSets): set rayWorkerCpu to at most 47",
    ),
    "head memory, no huge pages": (
        {"rayHeadMemory": "13Gi"},
        "rayHeadMemory '13Gi' does not fit systemInstanceType 'm7i.xlarge' (allocatable 13.75 GiB, 1.0 GiB kept for "
        "DaemonSets): set rayHeadMemory to at most 12Gi",
    ),
    "head CPU": (
        {"rayHeadCpu": "4"},
        "rayHeadCpu '4' does not fit systemInstanceType 'm7i.xlarge' (allocatable 3.92 CPU, 0.5 kept for DaemonSets): "
        "set rayHeadCpu to at most 3",
    ),
    "shm": (
        {"rayWorkerShmSize": "1023Mi"},
        "rayWorkerShmSize '1023Mi' must be between 1Gi and half of rayWorkerMemory (160Gi): /dev/shm is memory-backed "
        "and counts against the pod's limit",
    ),
    "bucket prefix": (
        {"clusterName": "c" * 32},
        f"the bucket name prefix '{'c' * 32}-test-' (clusterName-stack-) is longer than 37 characters: set "
        "ray-efa-eks:storageBucketName to a bucket name",
    ),
    "capacity block without a reservation": (
        {"gpuCapacityBlock": True},
        "gpuCapacityBlock is true but gpuCapacityReservationId is empty: set gpuCapacityReservationId to the Capacity "
        "Block's cr-... id, or set gpuCapacityBlock to false",
    ),
    "capacity block of a type that has none": (
        {"gpuCapacityBlock": True, "gpuCapacityReservationId": RESERVATION},
        f"gpuCapacityBlock is true but Capacity Blocks for ML do not exist for g6.12xlarge ({BLOCKS_GUIDE}): set "
        "gpuCapacityBlock to false (an On-Demand Capacity Reservation of g6.12xlarge needs only "
        f"gpuCapacityReservationId), or choose a type of {CAPACITY_BLOCK_TYPES} (aws ec2 "
        "describe-capacity-block-offerings --instance-type <type> --instance-count 1 --capacity-duration-hours 24 "
        "lists the blocks on sale)",
    ),
    "train key the driver sets": (
        {"train": {"run_id": "x"}},
        "ray-efa-eks:train.run_id is set by the driver for every run: remove it from ray-efa-eks:train",
    ),
}


@pytest.mark.parametrize("overrides, message", MESSAGES.values(), ids=MESSAGES.keys())
def test_a_refusal_says_the_key_the_value_and_the_fix(overrides, message):
    got = _refusal(overrides)
    assert got == message, f"expected\n  {message}\ngot\n  {got}"


def test_a_stack_named_after_a_region_is_refused_in_another_region():
    got = _refusal({}, stack="us-east-2")
    assert got.startswith("stack 'us-east-2' is named after region us-east-2 but"), f"got {got}"


def test_the_program_refuses_an_empty_allow_list_naming_the_key_as_pulumi_config_takes_it():
    with pytest.raises(StackConfigError) as err:
        _validate_as({}).cluster.require_api_cidrs("dev")
    want = (
        "ray-efa-eks:apiPublicAccessCidrs is empty in stack dev: it means this machine's address, which `python -m "
        "automation up --stack dev` (or `run`) writes before preview; with pulumi alone, set it: `pulumi config set "
        "--path 'ray-efa-eks:apiPublicAccessCidrs[0]' x.x.x.x/32` (your address: curl https://checkip.amazonaws.com), "
        "or set apiPublicAccess to false"
    )
    assert str(err.value) == want, f"expected\n  {want}\ngot\n  {err.value}"


def test_an_empty_gpu_az_is_refused_naming_both_ways_to_set_it():
    with pytest.raises(StackConfigError) as err:
        require_gpu_az(_validate_as({}))
    want = (
        "gpuAvailabilityZone is empty for stack 'test': run `python -m automation preflight --stack test` to see "
        "which of availabilityZones ['us-west-2a', 'us-west-2b'] offer g6.12xlarge (`python -m automation run "
        "--stack test` chooses one and sets it in the stack), or set ray-efa-eks:gpuAvailabilityZone in "
        "Pulumi.test.yaml"
    )
    assert str(err.value) == want, f"expected\n  {want}\ngot\n  {err.value}"


def test_a_set_gpu_az_is_the_one_the_nodes_get():
    got = require_gpu_az(_validate_as({"gpuAvailabilityZone": "us-west-2b"}))
    assert got == "us-west-2b", f"expected us-west-2b, got {got!r}"


# ---- warnings -------------------------------------------------------------------------------------
BLOCK_NOTE = (
    "gpuCapacityBlock is true: EKS updates a node group on a Capacity Block only at desired size 0, so before an `up` "
    "that changes the GPU node group (launch template, AMI, kubernetesVersion) scale it to 0 (aws eks "
    "update-nodegroup-config --scaling-config minSize=0,maxSize=<n>,desiredSize=0), then back "
    "(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html)"
)
OPEN_NOTE = (
    "apiPublicAccessCidrs includes 0.0.0.0/0: the Kubernetes API endpoint is reachable from anywhere (IAM "
    "authentication still applies); set it to your address as x.x.x.x/32"
)
P5_ON_A_BLOCK = {  # p5.48xlarge: 8 GPUs, 32 EFA interfaces (the EFA guide); Capacity Blocks are sold for P5
    "gpuInstanceType": "p5.48xlarge",
    "rayWorkerGpus": 8,
    "gpuEfaInterfaces": 32,
    "rayWorkerEfa": 32,
    "gpuCapacityBlock": True,
    "gpuCapacityReservationId": RESERVATION,
}


@pytest.mark.parametrize(
    "overrides, note",
    [(P5_ON_A_BLOCK, BLOCK_NOTE), ({"apiPublicAccessCidrs": ["0.0.0.0/0"]}, OPEN_NOTE)],
    ids=["capacity block", "open endpoint"],
)
def test_a_doubtful_setting_is_named_in_the_warnings(overrides, note):
    got = _validate_as(overrides).warnings
    assert note in got, f"expected\n  {note}\namong\n  {got}"


def test_a_version_past_standard_support_warns_from_the_day_its_standard_support_ends():
    # EKS standard support of 1.34 ends 2026-12-02 and extended support 2027-12-02; EKS bills extended support from
    # the start (UTC) of the first day (the EKS user guide's release calendar, infra/eks_facts.py).
    day_before, on_the_day = (
        extended_support_note("1.34", date(2026, 12, 1)),
        extended_support_note("1.34", date(2026, 12, 2)),
    )
    want = (
        "kubernetesVersion '1.34' left EKS standard support on 2026-12-02: the cluster runs in extended support "
        "(until 2027-12-02) at an additional cost per cluster hour; set kubernetesVersion to a version in standard "
        "support (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html)"
    )
    assert (day_before, on_the_day) == (None, want), f"got {day_before!r}, then {on_the_day!r}"


def test_a_warning_is_attributed_to_the_caller_of_validate_not_to_the_config_module():
    # stacklevel=2: where the message is printed (file:line) and where a module-scoped warnings filter
    # applies is the code that asked for the validation. (Not "this test file": mutmut's trampoline adds a frame.)
    with pytest.warns(ConfigWarning) as caught:
        validate({"gpuNodeCount": 1, "apiPublicAccessCidrs": ["203.0.113.7/32"]}, stack="t", region="us-west-2")
    inside = [w.filename for w in caught if Path(w.filename).parts[-2:] == ("infra", "config.py")]
    assert not inside, f"expected the warning attributed outside infra/config.py, got {inside}"


# ---- what a section takes from the others ---------------------------------------------------------


def test_the_stack_hands_its_region_and_name_to_the_pods_and_the_bucket():
    cfg = _validate_as({"clusterName": "train"}, stack="dev")
    got = (cfg.stack, cfg.ray.region, cfg.storage.bucket_prefix, cfg.storage.object_prefix)
    assert got == ("dev", "us-west-2", "train-dev-", "dev"), f"got {got}"


@pytest.mark.parametrize("instance_type, gpus", [("g6.12xlarge", 4), ("p5.48xlarge", 8)])  # EC2 instance pages
def test_the_gpu_count_comes_from_the_catalog_unless_given(instance_type, gpus):
    from_catalog = GpuNodesConfig(instance_type=instance_type).gpus_per_node
    given = GpuNodesConfig(instance_type=instance_type, gpus_per_node=3).gpus_per_node
    assert (from_catalog, given) == (gpus, 3), (
        f"expected {gpus} from the catalog and 3 as given, got {from_catalog}, {given}"
    )


# ---- the values the engine is handed under the mocks ---------------------------------------------


def _project_with(tmp_path: Path, stack: str, lines: str) -> Path:
    from conftest import REPO

    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(f"config:\n  aws:region: us-west-2\n{lines}")
    return tmp_path


def test_an_empty_allow_list_reaches_the_mocks_as_a_documentation_address(tmp_path):
    got = stack_config_values("dev", _project_with(tmp_path, "dev", ""))["ray-efa-eks:apiPublicAccessCidrs"]
    assert got == '["203.0.113.10/32"]', f"expected TEST-NET-3's address (RFC 5737), got {got}"


def test_a_set_allow_list_reaches_the_mocks_as_set(tmp_path):
    project = _project_with(tmp_path, "dev", "  ray-efa-eks:apiPublicAccessCidrs: [198.51.100.7/32]\n")
    got = stack_config_values("dev", project)["ray-efa-eks:apiPublicAccessCidrs"]
    assert got == '["198.51.100.7/32"]', f"expected the stack's own list, got {got}"


def test_a_stack_named_after_another_region_is_refused_before_the_mocks_run(tmp_path):
    with pytest.raises(StackConfigError, match="named after region us-east-2"):
        stack_config_values("us-east-2", _project_with(tmp_path, "us-east-2", ""))


# ---- The stack keys of issue 18 (AWS truth): each is read into the typed config and bad values name key, value and
# fix.

ADMIN = "arn:aws:iam::123456789012:role/ci-deployer"
# A type Capacity Blocks exist for, with the keys that must follow it (32 EFA interfaces, 8 GPUs).
P5 = {"gpuInstanceType": "p5.48xlarge", "gpuEfaInterfaces": 32, "rayWorkerEfa": 32, "rayWorkerGpus": 8}


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
    with pytest.raises(StackConfigError) as err:
        _validate(overrides)
    assert expected in str(err.value), f"expected {expected!r} in: {err.value}"


def test_capacity_block_on_a_type_without_capacity_blocks_is_refused_with_the_fix():
    with pytest.raises(StackConfigError) as err:
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
    with pytest.raises(StackConfigError) as err:
        _validate_on(OLD, date(2026, 11, 26))
    wanted = ("kubernetesVersion '1.31'", "2026-11-26", "set kubernetesVersion to 1.32 or newer")
    assert all(w in str(err.value) for w in wanted), f"expected {wanted} in: {err.value}"


def test_version_in_extended_support_warns_of_the_hourly_cost_and_is_not_refused():
    with pytest.warns(ConfigWarning, match=r"'1.31' left EKS standard support .* additional cost per cluster hour"):
        validate(OLD, stack="test", region="us-west-2", today=date(2025, 11, 26))


def test_the_fix_names_the_oldest_version_still_supported_that_day():
    with pytest.raises(StackConfigError, match=r"set kubernetesVersion to 1.33 or newer"):
        _validate_on({"kubernetesVersion": "1.32", "kubeProxyVersion": "v1.32.0-eksbuild.1"}, date(2027, 3, 23))


# ---- infra.config.from_pulumi_config: the Pulumi program's way in reads the stack, `aws:region` and every
# `ray-efa-eks:*` key the engine hands it, and validates them as `load_stack` does.
#
# In process, without a render: the engine's config is set with `pulumi.runtime.set_all_config` (the map the
# language host fills from the stack), the stack's name with `pulumi.runtime.set_mocks`, each in a fresh
# contextvars Context so nothing leaks to other tests (both live in context variables in the pulumi SDK,
# pulumi/runtime/config.py and settings.py). Values are strings, as the engine passes them.

ADDRESS = '["203.0.113.7/32"]'  # TEST-NET-3 (RFC 5737)
BASE = {"aws:region": "us-west-2", f"{PROJECT}:apiPublicAccessCidrs": ADDRESS}


def in_program(values: dict[str, str], project_dir: Path | None = None, stack: str = "dev"):
    def run():
        pulumi.runtime.set_all_config(values, [])
        pulumi.runtime.set_mocks(RenderMocks(), project=PROJECT, stack=stack, preview=False)
        return from_pulumi_config(project_dir)

    return contextvars.Context().run(run)


def test_the_engines_values_become_the_config_load_stack_would_give():
    got = in_program({**BASE, f"{PROJECT}:gpuNodeCount": "3", f"{PROJECT}:clusterName": "train"})
    want = validate(
        {"gpuNodeCount": 3, "clusterName": "train", "apiPublicAccessCidrs": ["203.0.113.7/32"]},
        stack="dev",
        region="us-west-2",
    )
    assert got == want, f"expected stack dev in us-west-2 with 3 GPU nodes named train, got {got}"


def test_an_engine_without_aws_region_is_refused_naming_the_key():
    with pytest.raises(StackConfigError, match="aws:region is not set for stack 'dev'"):
        in_program({f"{PROJECT}:apiPublicAccessCidrs": ADDRESS})


def test_a_key_no_declaration_knows_is_refused_with_its_close_match():
    with pytest.raises(
        StackConfigError, match=f"unknown config key {PROJECT}:gpuNodeCont: did you mean 'gpuNodeCount'"
    ):
        in_program({**BASE, f"{PROJECT}:gpuNodeCont": "3"})


def test_a_key_passed_only_through_pulumi_config_in_the_environment_is_refused_too(monkeypatch):
    # The language host may pass the config as the PULUMI_CONFIG environment variable (pulumi/runtime/config.py).
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({f"{PROJECT}:rayWorkerGpu": "4"}))
    with pytest.raises(StackConfigError, match="rayWorkerGpu: did you mean 'rayWorkerGpus'"):
        in_program(BASE)


def test_a_doubtful_setting_is_kept_in_the_config_not_raised_as_a_python_warning():
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        got = in_program({**BASE, f"{PROJECT}:gpuNodeCount": "1"})
    kinds = [w.category for w in raised if issubclass(w.category, ConfigWarning)]
    assert (kinds, any("prove EFA" in w for w in got.warnings)) == ([], True), (
        f"expected the one-node note in the config only, got warnings {kinds} and config notes {got.warnings}"
    )


def test_an_empty_allow_list_is_refused_naming_the_stack():
    with pytest.raises(StackConfigError, match=r"apiPublicAccessCidrs is empty in stack dev: .* --stack dev"):
        in_program({**BASE, f"{PROJECT}:apiPublicAccessCidrs": "[]"})


def test_the_project_file_is_checked_when_its_folder_is_given(tmp_path):
    text = (REPO / "Pulumi.yaml").read_text()
    (tmp_path / "Pulumi.yaml").write_text(text.replace("\n  gpuNodeCount:", "\n  gpuNodes:", 1))
    with pytest.raises(StackConfigError, match="Pulumi.yaml's config: block differs from the schema"):
        in_program(BASE, project_dir=tmp_path)


def test_without_a_folder_the_project_file_is_the_engines_business():
    got = in_program(BASE, project_dir=None)
    assert got.stack == "dev", f"expected stack dev, got {got.stack}"


# ---- from_pulumi_config: the program reads every ray-efa-eks key the engine passes, so a key that no
# declaration knows (a leftover or a typo) fails the program instead of being ignored.


def _in_program(values: dict[str, str]):
    def run():
        pulumi.runtime.set_all_config(values, [])
        pulumi.runtime.set_mocks(RenderMocks(), project=PROJECT, stack="us-east-2", preview=False)
        return from_pulumi_config(REPO)

    return contextvars.Context().run(run)


def test_program_refuses_an_undeclared_key_with_the_close_match():
    values = {**stack_config_values("us-east-2", REPO), f"{PROJECT}:gpuNodeCont": "3"}
    with pytest.raises(StackConfigError, match="gpuNodeCont: did you mean 'gpuNodeCount'"):
        _in_program(values)


def test_program_reads_the_train_block_from_json():
    values = {**stack_config_values("us-east-2", REPO), f"{PROJECT}:train": '{"steps": 5}'}
    got = _in_program(values).train
    assert got == {"steps": 5}, f"expected the block as JSON-decoded, got {got}"


def test_program_refuses_an_empty_api_allow_list_instead_of_opening_it():
    # What a plain `pulumi preview` passes for a shipped stack the driver has not filled: the key's default, [].
    values = {**stack_config_values("us-east-2", REPO), f"{PROJECT}:apiPublicAccessCidrs": "[]"}
    with pytest.raises(
        StackConfigError, match=r"apiPublicAccessCidrs is empty .*python -m automation up --stack us-east-2"
    ):
        _in_program(values)


def test_mocks_run_with_a_documentation_address_for_the_deployer():
    got = _in_program(stack_config_values("us-east-2", REPO)).cluster.public_access_cidrs
    assert got == (MOCK_DEPLOYER_CIDR,), f"expected the mock's TEST-NET-3 address, got {got}"
