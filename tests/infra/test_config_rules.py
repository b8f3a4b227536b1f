"""infra/config.py's rules over several keys, by rule: each limit on both sides of its boundary, each refusal's
whole message (the key, the value and the fix a user acts on), and what one section takes from the others.

The numbers are written here with their source, not read from the code under test: the instance facts are
infra/data/instance_types.json's (its `$comment` gives the EKS rules they follow), the huge-page pool is the EFA
installer's rule quoted in infra/eks_facts.py, and the bucket prefix limit is the AWS provider's (37 characters:
63 for a bucket name less the 26 of the random suffix pulumi-aws adds to `bucketPrefix`)."""

from __future__ import annotations

import warnings
from datetime import date
from pathlib import Path

import pytest

from infra.config import (
    ConfigError,
    ConfigWarning,
    GpuNodesConfig,
    StackConfig,
    extended_support_note,
    require_gpu_az,
    stack_config_values,
    validate,
)


def _validate(overrides: dict, stack: str = "test", region: str = "us-west-2") -> StackConfig:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        return validate(overrides, stack=stack, region=region)


def _refusal(overrides: dict, stack: str = "test") -> str:
    with pytest.raises(ConfigError) as err:
        _validate(overrides, stack)
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
    got = _validate({key: fits})  # raises on a refusal
    assert got.stack == "test", f"expected {key}={fits!r} accepted, got {got}"


@pytest.mark.parametrize("key, fits, too_much", BOUNDS.values(), ids=BOUNDS.keys())
def test_one_step_past_a_limit_is_refused_by_name(key, fits, too_much):
    got = _refusal({key: too_much})
    assert key in got, f"expected {key}={too_much!r} refused by name, got {got}"


def test_a_set_bucket_name_lifts_the_prefix_limit():
    got = _validate({"clusterName": "c" * 32, "storageBucketName": "my-runs"}).storage.bucket_name
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
    with pytest.raises(ConfigError) as err:
        _validate({}).cluster.require_api_cidrs("dev")
    want = (
        "ray-efa-eks:apiPublicAccessCidrs is empty in stack dev: it means this machine's address, which `python -m "
        "automation up --stack dev` (or `run`) writes before preview; with pulumi alone, set it: `pulumi config set "
        "--path 'ray-efa-eks:apiPublicAccessCidrs[0]' x.x.x.x/32` (your address: curl https://checkip.amazonaws.com), "
        "or set apiPublicAccess to false"
    )
    assert str(err.value) == want, f"expected\n  {want}\ngot\n  {err.value}"


def test_an_empty_gpu_az_is_refused_naming_both_ways_to_set_it():
    with pytest.raises(ConfigError) as err:
        require_gpu_az(_validate({}))
    want = (
        "gpuAvailabilityZone is empty for stack 'test': run `python -m automation preflight --stack test` to see "
        "which of availabilityZones ['us-west-2a', 'us-west-2b'] offer g6.12xlarge (`python -m automation run "
        "--stack test` chooses one and sets it in the stack), or set ray-efa-eks:gpuAvailabilityZone in "
        "Pulumi.test.yaml"
    )
    assert str(err.value) == want, f"expected\n  {want}\ngot\n  {err.value}"


def test_a_set_gpu_az_is_the_one_the_nodes_get():
    got = require_gpu_az(_validate({"gpuAvailabilityZone": "us-west-2b"}))
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
    got = _validate(overrides).warnings
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
    cfg = _validate({"clusterName": "train"}, stack="dev")
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


def _project(tmp_path: Path, stack: str, lines: str) -> Path:
    from conftest import REPO

    (tmp_path / "Pulumi.yaml").write_text((REPO / "Pulumi.yaml").read_text())
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(f"config:\n  aws:region: us-west-2\n{lines}")
    return tmp_path


def test_an_empty_allow_list_reaches_the_mocks_as_a_documentation_address(tmp_path):
    got = stack_config_values("dev", _project(tmp_path, "dev", ""))["ray-efa-eks:apiPublicAccessCidrs"]
    assert got == '["203.0.113.10/32"]', f"expected TEST-NET-3's address (RFC 5737), got {got}"


def test_a_set_allow_list_reaches_the_mocks_as_set(tmp_path):
    project = _project(tmp_path, "dev", "  ray-efa-eks:apiPublicAccessCidrs: [198.51.100.7/32]\n")
    got = stack_config_values("dev", project)["ray-efa-eks:apiPublicAccessCidrs"]
    assert got == '["198.51.100.7/32"]', f"expected the stack's own list, got {got}"


def test_a_stack_named_after_another_region_is_refused_before_the_mocks_run(tmp_path):
    with pytest.raises(ConfigError, match="named after region us-east-2"):
        stack_config_values("us-east-2", _project(tmp_path, "us-east-2", ""))
