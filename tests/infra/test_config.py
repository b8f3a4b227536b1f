"""infra.config: the stack files load, every bad config (or broken file) names key, value and fix,
and Pulumi.yaml's config: block is the typed schema's rendering."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import yaml
from conftest import REPO, quiet_stack

from infra.config import (
    KEYS,
    KEYS_BY_NAME,
    ConfigError,
    ConfigWarning,
    GpuNodesConfig,
    StackConfig,
    is_floating_image,
    load_stack,
    validate,
)
from infra.config_files import config_docs, pulumi_yaml_config, write_pulumi_yaml
from infra.config_schema import MAX_NODES_PER_MANAGED_NODE_GROUP, coerce

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
    with pytest.raises(ConfigError) as err:
        _validate({"train": {"stepz": 5}})
    text = str(err.value)
    assert "ray-efa-eks:train.stepz" in text and "did you mean 'steps'?" in text, (
        f"expected the key ray-efa-eks:train.stepz and the match 'steps', got {text!r}"
    )


def test_driver_set_train_key_is_refused_by_infra():
    with pytest.raises(ConfigError, match=r"ray-efa-eks:train\.run_id is set by the driver"):
        _validate({"train": {"run_id": "x"}})


def test_config_is_frozen():
    cfg = quiet_stack("us-west-2")
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
    with pytest.raises(ConfigError) as err:
        load_stack("eu-west-1", REPO)
    assert "us-east-2" in str(err.value) and "us-west-2" in str(err.value), f"got: {err.value}"


def test_stack_file_with_undeclared_key_is_rejected(tmp_path):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "Pulumi.x.yaml").write_text("config:\n  aws:region: us-west-2\n  ray-efa-eks:gpuNodeCont: 3\n")
    with pytest.raises(ConfigError, match="gpuNodeCont"):
        load_stack("x", tmp_path)


def test_stack_without_region_is_rejected(tmp_path):
    shutil.copy(REPO / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    (tmp_path / "Pulumi.x.yaml").write_text("config:\n  ray-efa-eks:gpuNodeCount: 2\n")
    with pytest.raises(ConfigError, match="aws:region"):
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
    with pytest.raises(ConfigError) as err:
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
    with pytest.raises(ConfigError) as err:
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
    with pytest.raises(ConfigError) as err:
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
