"""The AWS pipeline's step order and stop-at-first-failure, with a fake stack that has the Pulumi
Automation API's interface, moto/Stubber AWS clients, recorded Kubernetes objects and a scripted exec."""

from __future__ import annotations

import dataclasses
import warnings
from datetime import UTC, datetime

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import _worlds as worlds
import boto3
import pytest
from _aws_run import (
    DEPLOYER_IP,
    NCCL,
    REGION,
    SET_CIDRS,
    client_factory,
    cluster_exec,
    make_target,
    outputs,
    run,
    step_names,
)
from _pod_requests import PodAction, asks
from botocore.stub import Stubber

from automation import scaling
from automation.errors import DriverError
from automation.kube import ExecResult
from automation.targets.aws import API_CIDRS_KEY, DRIVER_CIDR_KEY, GPU_AZ_KEY, PIPELINE, PLAN
from infra.config import ConfigWarning, read_stack_file, validate


def test_run_executes_every_step_in_order(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(make_target(api, stack), PIPELINE)
    assert result.ok, f"expected success, failed at {result.failed_step}: {result.reason}"
    assert step_names(result) == list(PIPELINE), f"expected {list(PIPELINE)}, got {step_names(result)}"
    # `up` reads the outputs first: the GPU node group's live size is kept for it (automation/steps/stack_steps.py)
    live = "ray-efa-eks:gpuLiveDesiredSize"
    expected = [*SET_CIDRS, "preview", "outputs", f"set_config {live}", "up", f"remove_config {live}"]
    assert stack.calls == expected, f"expected preview then up, got {stack.calls}"


def test_preview_failure_stops_before_up(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack(
            "us-west-2", outputs=outputs(api), fail={"preview": "error: program failed: invalid config"}
        )
        result = run(make_target(api, stack), PIPELINE)
    assert result.failed_step == "preview", f"expected preview to fail, got {result.failed_step}"
    assert "up" not in stack.calls, f"up must not run after a failed preview, stack calls {stack.calls}"
    assert result.not_run == PIPELINE[PIPELINE.index("up") :], f"got {result.not_run}"
    assert result.advice.exists.startswith("nothing was created"), result.advice.exists


def test_preflight_failure_stops_before_any_stack_call(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(make_target(api, stack, clients=client_factory(quota=48)), PIPELINE)
    assert (result.failed_step, stack.calls) == ("preflight", []), (
        f"got {result.failed_step}, stack calls {stack.calls}"
    )


def test_plan_stops_after_preview(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(make_target(api, stack), PLAN)
    assert result.ok and stack.calls == [*SET_CIDRS, "preview"], f"expected a preview, got {result.ok} {stack.calls}"


def test_declined_confirmation_changes_nothing(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(make_target(api, stack, confirm=lambda q: False, yes=False), PIPELINE)
    assert result.failed_step == "up" and "up" not in stack.calls, f"got {result.failed_step}, calls {stack.calls}"
    assert "not confirmed" in result.reason, result.reason


def test_up_failure_reports_the_scaling_activity_cause(aws):
    eks = boto3.client("eks", region_name=REGION)
    asg = boto3.client("autoscaling", region_name=REGION)
    eks_stub, asg_stub = Stubber(eks), Stubber(asg)
    eks_stub.add_response("list_nodegroups", {"nodegroups": ["gpu"]}, {"clusterName": "ray-efa-eks"})
    eks_stub.add_response(
        "describe_nodegroup",
        {
            "nodegroup": {
                "nodegroupName": "gpu",
                "status": "CREATE_FAILED",
                "health": {
                    "issues": [
                        {"code": "AsgInstanceLaunchFailures", "message": "Could not launch On-Demand Instances."}
                    ]
                },
                "resources": {"autoScalingGroups": [{"name": "eks-gpu-1234"}]},
            }
        },
        {"clusterName": "ray-efa-eks", "nodegroupName": "gpu"},
    )
    asg_stub.add_response(
        "describe_scaling_activities",
        {
            "Activities": [
                {
                    "ActivityId": "a1",
                    "AutoScalingGroupName": "eks-gpu-1234",
                    "Cause": "user request",
                    "StartTime": "2026-12-02T10:00:00Z",
                    "StatusCode": "Failed",
                    "StatusMessage": "We currently do not have sufficient g6.12xlarge capacity in the "
                    "Availability Zone you requested (us-west-2a).",
                }
            ]
        },
        {"AutoScalingGroupName": "eks-gpu-1234", "MaxRecords": 1},
    )
    eks_stub.activate()
    asg_stub.activate()
    with helpers.FakeKubeApi() as api:
        # A first `up`: no node group in the outputs yet, so no live size is read before it.
        outs = {k: v for k, v in outputs(api).items() if k != "nodegroup_name"}
        failing = {"up": "eks:index:ManagedNodeGroup gpu: CREATE_FAILED"}
        stack = helpers.FakeStack("us-west-2", outputs=outs, fail=failing)
        clients = client_factory(extra={"eks": eks, "autoscaling": asg})
        # No --auto-az, and the terminal declines the move to another AZ: the failure stands with its cause.
        result = run(make_target(api, stack, confirm=lambda q: False, clients=clients), PIPELINE)
    assert result.failed_step == "up", f"expected up to fail, got {result.failed_step}"
    assert "sufficient g6.12xlarge capacity" in result.reason, f"expected the ASG's cause in {result.reason!r}"
    assert any("destroy --stack us-west-2" in c for c in result.advice.next_commands), result.advice


def test_socket_fallback_fails_the_pipeline(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack, pod_exec=cluster_exec(nccl_log=NCCL / "socket_cluster_nccl952.log"))
        result = run(target, PIPELINE)
    assert result.failed_step == "check", f"expected check to fail, got {result.failed_step}"
    assert "NET/Socket" in result.reason, result.reason


def test_single_node_nccl_log_on_aws_fails_the_pipeline_as_inconclusive(aws):
    # an inconclusive verdict proves no EFA: the run must not end "NCCL over efa" with exit 0
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack, pod_exec=cluster_exec(nccl_log=NCCL / "single_node_shm_nccl1609.log"))
        result = run(target, PIPELINE)
    assert result.failed_step == "check", f"expected check to fail, got {result.failed_step}: {result.reason}"
    assert "inconclusive" in result.reason, f"expected the inconclusive verdict named, got {result.reason!r}"


def test_failed_job_stops_before_check_with_its_log_tail(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack, pod_exec=cluster_exec(ends="FAILED"))
        result = run(target, PIPELINE)
    assert result.failed_step == "follow", f"expected follow to fail, got {result.failed_step}"
    assert "ended FAILED" in result.reason and "[train] step 100/100" in result.reason, result.reason


def test_missing_kubeconfig_output_after_up_fails_the_scale_up_with_destroy_advice(aws):
    with helpers.FakeKubeApi() as api:
        outs = {k: v for k, v in outputs(api).items() if k != "kubeconfig"}
        stack = helpers.FakeStack("us-west-2", outputs=outs)
        result = run(make_target(api, stack), PIPELINE)
    assert result.failed_step == "scale-up", f"expected scale-up to fail, got {result.failed_step}: {result.reason}"
    assert "no kubeconfig output" in result.reason, result.reason
    assert result.advice is not None and "is up and costs money" in result.advice.exists, f"got {result.advice}"
    cmds = " ".join(result.advice.next_commands)
    assert "run --stack us-west-2" in cmds and "destroy --stack us-west-2" in cmds, f"got {cmds!r}"


def target_without_gpu_az(api, stack):
    target = make_target(api, stack)
    target.cfg = dataclasses.replace(
        target.cfg, gpu_nodes=dataclasses.replace(target.cfg.gpu_nodes, availability_zone="")
    )
    return target


def test_az_chosen_by_preflight_is_set_in_the_stack_before_preview(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = target_without_gpu_az(api, stack)
        result = run(target, PLAN)
    assert result.ok, f"expected success, failed at {result.failed_step}: {result.reason}"
    assert stack.calls == [f"set_config {GPU_AZ_KEY}", *SET_CIDRS, "preview"], (
        f"expected the AZ set before preview, got {stack.calls}"
    )
    value = stack.config[GPU_AZ_KEY]
    assert (type(value).__name__, value.value, value.secret) == ("ConfigValue", "us-west-2a", False), f"got {value!r}"
    assert any(f"{GPU_AZ_KEY} = us-west-2a" in n for n in target.notes), f"expected the user told, notes {target.notes}"


def test_api_allow_list_left_empty_gets_this_machines_address_before_preview(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack)
        run(target, ("preview",))
    value = stack.config.get(f"{API_CIDRS_KEY}[0]")
    got = (stack.calls[0], getattr(value, "value", None), target.cfg.cluster.public_access_cidrs)
    assert got == (SET_CIDRS[0], f"{DEPLOYER_IP}/32", (f"{DEPLOYER_IP}/32",)), f"got {got}"


def test_the_address_written_is_said_in_one_line(aws):
    with helpers.FakeKubeApi() as api:
        target = make_target(api, helpers.FakeStack("us-west-2", outputs=outputs(api)))
        run(target, ("preview",))
    said = [n for n in target.notes if API_CIDRS_KEY in n]
    assert len(said) == 1 and f"{DEPLOYER_IP}/32" in said[0], f"expected one line with the address, notes {said}"


def test_api_allow_list_set_in_the_stack_is_kept(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack)
        target.cfg = dataclasses.replace(
            target.cfg, cluster=dataclasses.replace(target.cfg.cluster, public_access_cidrs=("198.51.100.0/24",))
        )
        run(target, ("preview",))
    assert stack.calls == ["preview"], f"expected no config written, got {stack.calls}"


# A second run from another address (issue 44 item 3): the stack holds what an earlier run wrote from 198.51.100.9
# (TEST-NET-2), this machine is DEPLOYER_IP.
def _allow_list(target, cidrs, driver_cidr=""):
    cluster = dataclasses.replace(target.cfg.cluster, public_access_cidrs=cidrs, driver_cidr=driver_cidr)
    target.cfg = dataclasses.replace(target.cfg, cluster=cluster)


def test_the_drivers_entry_from_another_address_is_replaced_before_preview_in_one_line(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack)
        _allow_list(target, ("192.0.2.0/24", "198.51.100.9/32"), driver_cidr="198.51.100.9/32")
        run(target, ("preview",))
    mine = f"{DEPLOYER_IP}/32"
    written = (stack.calls, stack.config[f"{API_CIDRS_KEY}[1]"].value, stack.config[DRIVER_CIDR_KEY].value)
    want = ([f"set_config {API_CIDRS_KEY}[1]", f"set_config {DRIVER_CIDR_KEY}", "preview"], mine, mine)
    assert written == want, f"expected entry 1 and the driver's key set to {mine} before preview, got {written}"
    said = [n for n in target.notes if "198.51.100.9/32" in n]
    assert len(said) == 1 and mine in said[0] and "in place" in said[0], f"expected one line, notes {target.notes}"


def test_the_drivers_entry_that_still_covers_this_machine_is_kept(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack)
        _allow_list(target, ("203.0.113.0/24",), driver_cidr="203.0.113.0/24")
        run(target, ("preview",))
    assert stack.calls == ["preview"], f"expected no config written, got {stack.calls}"


def test_a_user_list_without_this_address_fails_preflight_before_any_aws_call(aws):
    built = []

    def no_client(name):
        built.append(name)
        raise AssertionError(f"AWS client {name} built after the allow-list had failed")

    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack, clients=no_client)
        _allow_list(target, ("198.51.100.9/32",))
        result = run(target, PLAN)
    got = (result.failed_step, built, stack.calls)
    assert got == ("preflight", [], []), f"expected preflight to fail with no AWS client and no stack call, got {got}"


def test_up_without_a_way_to_learn_the_address_names_the_key_and_changes_nothing(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack)
        target.deps = dataclasses.replace(target.deps, public_ip=None)
        with pytest.raises(DriverError) as err:
            run(target, ("up",))
    assert (err.value.exit_code, API_CIDRS_KEY in str(err.value), stack.calls) == (2, True, []), (
        f"got {err.value.exit_code}: {err.value}, calls {stack.calls}"
    )


def test_up_without_az_and_without_preflight_changes_nothing(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        with pytest.raises(DriverError) as err:
            run(target_without_gpu_az(api, stack), ("up",))
    assert err.value.exit_code == 2 and "gpuAvailabilityZone" in str(err.value), (
        f"got {err.value.exit_code}: {err.value}"
    )
    assert stack.calls == [], f"expected no stack call, got {stack.calls}"


# --------------------------------------------------------------------------- failure worlds, whole pipeline

WORLD_CAUSES = {
    # world: (the one failing check, words of its detail, words of its fix)
    "hugepages": ("GPU nodes hugepages-2Mi", f"{worlds.GPU_NODE} has 0Mi", "vm.nr_hugepages"),
    "efa": ("Ray worker pods cannot start", "Insufficient vpc.amazonaws.com/efa", "EFA device plugin"),
    "gpus": ("Ray worker pods cannot start", "Insufficient nvidia.com/gpu", "NVIDIA device plugin"),
    "efa-plugin-crashloop": (f"node {worlds.GPU_NODE}", "vpc.amazonaws.com/efa >= 1, got 0", "EFA device plugin pod"),
    "node-not-ready": (f"node {worlds.GPU_NODE}", "NotReady", f"kubectl describe node {worlds.GPU_NODE}"),
    "image-pull": ("Ray worker pods cannot start", "Init:ImagePullBackOff", "rayImage"),
    "gcs-unreachable": ("Ray worker pods cannot start", "cannot reach the Ray head's GCS", "port 6379"),
    "untolerated-taint": ("Ray worker pods cannot start", "is Pending: untolerated taint", "toleration"),
    "node-selector": ("Ray worker pods cannot start", "is Pending: node selector/affinity", "nodeSelector"),
    "head-image-pull": ("Ray head pod cannot start", "ImagePullBackOff", "rayImage"),
    "head-node-selector": ("Ray head pod cannot start", "no node of 3 matches role=system-nodes", "role=system"),
}


@pytest.mark.parametrize("world", sorted(WORLD_CAUSES))
def test_failure_world_stops_the_pipeline_at_verify_with_one_finding_naming_cause_and_fix(aws, world):
    objects = helpers.load_k8s()
    worlds.WORLDS[world](objects)
    with helpers.FakeKubeApi(objects) as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        # verify's findings are the subject: `scale-up` would wait out a node that is not Ready before it
        result = run(make_target(api, stack), [n for n in PIPELINE if n != "scale-up"])
    verify = result.state.verify
    failed = [(f.check, f.detail, f.fix) for f in (verify.findings if verify else ()) if f.status == "fail"]
    check, cause, fix = WORLD_CAUSES[world]
    assert result.failed_step == "verify" and len(failed) == 1, f"expected one failing verify finding, got {failed}"
    got_check, detail, got_fix = failed[0]
    assert (got_check, cause in detail, fix in got_fix) == (check, True, True), (
        f"expected {check}/{cause}/{fix}: {failed}"
    )


def test_s3_access_denied_from_an_old_pyarrow_stops_verify_naming_the_sdk_and_the_irsa_key(aws):
    ok = cluster_exec()

    def answer(pod, cmd, stdin):
        if asks(cmd, PodAction.S3_MARKER):
            return ExecResult(
                1,
                "PYARROW 16.1.0 CREDENTIALS pod-identity\nFILESYSTEM S3FileSystem\n",
                "OSError: When initiating multiple part upload for key 'k' in bucket 'b': AWS Error ACCESS_DENIED "
                "during CreateMultipartUpload operation: Access Denied",
            )
        return ok.answer(pod, cmd, stdin)

    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(make_target(api, stack, pod_exec=helpers.ScriptedExec(answer)), PIPELINE)
    wanted = (
        "pyarrow 16.1.0",
        "older than 1.11.263",
        "pulumi config set --stack us-west-2 ray-efa-eks:podIdentityMode irsa",
    )
    missing = [w for w in wanted if w not in result.reason]
    assert result.failed_step == "verify" and not missing, f"{result.failed_step}: missing {missing} in {result.reason}"


def capacity_block_target(api, stack, reservation):
    """The us-west-2 stack on a Capacity Block (worlds.CAPACITY_BLOCK_STACK), EC2 answering `reservation`."""
    found = read_stack_file("us-west-2", helpers.REPO)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigWarning)
        cfg = validate({**found.values, **worlds.CAPACITY_BLOCK_STACK}, stack="us-west-2", region=found.region)
    quotas = boto3.client("service-quotas", region_name=REGION)
    stub = Stubber(quotas)
    for code in ("L-417A185B", "L-1216C47A"):  # P instances (the GPU nodes), then Standard (the system node)
        stub.add_response(
            "get_service_quota",
            {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": 1000}},
            {"ServiceCode": "ec2", "QuotaCode": code},
        )
    stub.activate()
    ec2 = worlds.Ec2WithReservation(boto3.client("ec2", region_name=REGION), reservation)
    target = make_target(api, stack, clients=client_factory(extra={"service-quotas": quotas, "ec2": ec2}))
    target.cfg = cfg
    return target


def test_capacity_block_not_yet_active_stops_the_pipeline_at_preflight_with_one_finding_naming_its_start(aws):
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(capacity_block_target(api, stack, worlds.CAPACITY_BLOCK_SCHEDULED), PIPELINE)
    pre = result.state.preflight
    failed = [(f.check, f.detail, f.fix) for f in (pre.findings if pre else ()) if f.status == "fail"]
    assert result.failed_step == "preflight" and len(failed) == 1, f"expected one failing preflight row, got {failed}"
    check, detail, fix = failed[0]
    assert (check, "starts at 2026-12-08 11:30 UTC" in detail, "run again once it is active" in fix) == (
        "capacity reservation",
        True,
        True,
    ), f"got {failed[0]}"
    assert stack.calls == [], f"expected nothing created before the block starts, got {stack.calls}"


def test_capacity_block_world_passes_preflight_once_the_block_is_active(aws):
    active = {**worlds.CAPACITY_BLOCK_SCHEDULED, "State": "active", "AvailableInstanceCount": 2}
    active["TotalInstanceCount"] = 2
    with helpers.FakeKubeApi() as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        result = run(capacity_block_target(api, stack, active), PLAN)
    assert result.ok, f"expected the active block to pass the plan, failed at {result.failed_step}: {result.reason}"


def test_run_records_the_phases_of_the_start_from_the_cluster(aws):
    # The recorded cluster: GPU nodes created 10:04:11, Ready 10:04:42; Ray containers started 10:13:40; the world
    # adds the workers' Pulled events (10:13:37, 1m29.9s); the driver sees the first step line at 10:15:10.
    objects = helpers.load_k8s()
    worlds.cold_pulls(objects)
    with helpers.FakeKubeApi(objects) as api:
        stack = helpers.FakeStack("us-west-2", outputs=outputs(api))
        target = make_target(api, stack)
        seen = datetime(2026, 12, 2, 10, 15, 10, tzinfo=UTC).timestamp()
        target.deps.clock = scaling.Clock(now=lambda: seen, sleep=lambda s: None)
        result = run(target, PIPELINE)
    start = result.state.follow.data.start
    want = {"node_join_s": 31.0, "image_pull_s": 89.9, "pod_start_s": 3.0, "first_step_s": 90.0}
    assert start == {**want, "image_bytes": worlds.COLD_PULL_BYTES}, f"expected {want}, got {start}"


# --------------------------------------------------------------------------- up --auto-az
# EKS's error when EC2 refuses the node group's instances carries EC2's code in the health issue
# (https://docs.aws.amazon.com/eks/latest/APIReference/API_Issue.html, AsgInstanceLaunchFailures).
NO_CAPACITY_ERROR = (
    "eks:index:ManagedNodeGroup gpu: CREATE_FAILED: AsgInstanceLaunchFailures: InsufficientInstanceCapacity: "
    "We currently do not have sufficient g6.12xlarge capacity in the Availability Zone you requested"
)


CLUSTER = "ray-efa-eks"
GPU_LABELS = {"role": "gpu-worker"}  # infra/names.py's GPU_NODE_SELECTOR, as the node group's labels carry it


class Ec2WithoutReservations:
    """moto's EC2 client, but DescribeCapacityReservations answers that the account holds none (moto 5.2.5 does not
    model capacity reservations; the shape is the EC2 API's DescribeCapacityReservations response)."""

    def __init__(self) -> None:
        self._moto = boto3.client("ec2", region_name=REGION)

    def describe_capacity_reservations(self, **kwargs) -> dict:
        return {"CapacityReservations": []}

    def __getattr__(self, name: str):
        return getattr(self._moto, name)


def auto_az_target(api, stack, auto_az: bool = True, move_answer: bool = True):
    # `yes` answers the cost question; `move_answer` is the terminal's answer to the move (False: declined, or no
    # terminal, where tty_confirm raises and nothing moves).
    clients = client_factory(extra={"ec2": Ec2WithoutReservations()})
    target = make_target(api, stack, confirm=lambda q: move_answer, clients=clients)
    target.run = dataclasses.replace(target.run, auto_az=auto_az)
    return target


class ShortOfCapacityIn(helpers.FakeStack):
    """A stack whose `up` fails for want of capacity while its GPU AZ is one of ``short`` (the AZ the stack file
    names until `pulumi config set` moves it), with the GPU node groups it leaves in moto's EKS: each `up` makes the
    group of its AZ (labelled role=gpu-worker, at gpuNodeCount) before the old one goes, as Pulumi replaces a node
    group whose subnet changed (create before delete); a failed `up` deletes nothing, so the failed group stays
    (EKS keeps a CREATE_FAILED group: https://docs.aws.amazon.com/eks/latest/APIReference/API_Nodegroup.html).
    ``others_at_up`` records, at each `up`, the desired size of every other GPU group."""

    def __init__(self, *args, short: tuple[str, ...], **kwargs):
        super().__init__(*args, **kwargs)
        self.short = short
        self.others_at_up: list[dict[str, int]] = []
        self.eks = boto3.client("eks", region_name=REGION)
        if CLUSTER not in self.eks.list_clusters()["clusters"]:  # the `aws` fixture's moto EKS may hold it already
            self.eks.create_cluster(
                name=CLUSTER,
                roleArn="arn:aws:iam::123456789012:role/eks",
                resourcesVpcConfig={"subnetIds": ["subnet-1"]},
            )

    def gpu_groups(self) -> dict[str, int]:
        names = self.eks.list_nodegroups(clusterName=CLUSTER)["nodegroups"]
        groups = [self.eks.describe_nodegroup(clusterName=CLUSTER, nodegroupName=n)["nodegroup"] for n in names]
        return {g["nodegroupName"]: g["scalingConfig"]["desiredSize"] for g in groups if g["labels"] == GPU_LABELS}

    def up(self, on_event=None):
        az = self.config[GPU_AZ_KEY].value if GPU_AZ_KEY in self.config else "us-west-2a"
        mine = f"gpu-{az}"
        self.others_at_up.append({n: size for n, size in self.gpu_groups().items() if n != mine})
        if mine not in self.gpu_groups():
            self.eks.create_nodegroup(
                clusterName=CLUSTER,
                nodegroupName=mine,
                nodeRole="arn:aws:iam::123456789012:role/node",
                subnets=[f"subnet-{az}"],
                scalingConfig={"desiredSize": 2, "minSize": 0, "maxSize": 2},
                labels=GPU_LABELS,
            )
        self.fail = {"up": NO_CAPACITY_ERROR} if az in self.short else {}
        result = super().up(on_event)
        for old in set(self.gpu_groups()) - {mine}:
            self.eks.delete_nodegroup(clusterName=CLUSTER, nodegroupName=old)
        return result


def test_up_with_auto_az_moves_the_gpu_nodes_to_the_next_network_az_and_says_so(aws):
    with helpers.FakeKubeApi() as api:
        stack = ShortOfCapacityIn("us-west-2", outputs=outputs(api), short=("us-west-2a",))
        target = auto_az_target(api, stack)
        result = run(target, PIPELINE)
    moved = [n for n in target.notes if n.startswith("moving the GPU node group from us-west-2a to us-west-2b")]
    got = (result.ok, stack.config[GPU_AZ_KEY].value, stack.calls.count("up"), len(moved))
    assert got == (True, "us-west-2b", 2, 1), f"expected one move to us-west-2b and a second up: {got}, {target.notes}"


def test_a_move_empties_the_failed_azs_gpu_node_group_before_the_next_up(aws):
    with helpers.FakeKubeApi() as api:
        stack = ShortOfCapacityIn("us-west-2", outputs=outputs(api), short=("us-west-2a",))
        run(auto_az_target(api, stack), PIPELINE)
    assert stack.others_at_up == [{}, {"gpu-us-west-2a": 0}], f"other GPU groups at each up: {stack.others_at_up}"


def test_when_every_network_az_is_short_the_groups_moved_from_are_left_at_zero(aws):
    with helpers.FakeKubeApi() as api:
        stack = ShortOfCapacityIn("us-west-2", outputs=outputs(api), short=("us-west-2a", "us-west-2b"))
        run(auto_az_target(api, stack), PIPELINE)
    asking = {n: size for n, size in stack.gpu_groups().items() if n != "gpu-us-west-2b"}
    assert asking == {"gpu-us-west-2a": 0}, f"GPU node groups besides the last one tried: {stack.gpu_groups()}"


def test_up_without_auto_az_and_a_declined_move_names_the_shortage_and_moves_nothing(aws):
    with helpers.FakeKubeApi() as api:
        stack = ShortOfCapacityIn("us-west-2", outputs=outputs(api), short=("us-west-2a",))
        result = run(auto_az_target(api, stack, auto_az=False, move_answer=False), PIPELINE)
    got = (result.failed_step, "sufficient g6.12xlarge capacity" in result.reason, stack.calls.count("up"))
    assert got == ("up", True, 1) and GPU_AZ_KEY not in stack.config, f"expected one failed up, no move: {got}"


def test_a_move_accepted_on_the_terminal_moves_without_auto_az(aws):
    with helpers.FakeKubeApi() as api:
        stack = ShortOfCapacityIn("us-west-2", outputs=outputs(api), short=("us-west-2a",))
        result = run(auto_az_target(api, stack, auto_az=False, move_answer=True), PIPELINE)
    got = (result.ok, stack.config[GPU_AZ_KEY].value)
    assert got == (True, "us-west-2b"), f"expected the accepted move to us-west-2b: {got}"


def test_auto_az_stops_when_no_network_az_has_capacity_and_says_so(aws):
    with helpers.FakeKubeApi() as api:
        stack = ShortOfCapacityIn("us-west-2", outputs=outputs(api), short=("us-west-2a", "us-west-2b"))
        target = auto_az_target(api, stack)
        result = run(target, PIPELINE)
    said = any("no other AZ of the stack's network" in n for n in target.notes)
    got = (result.failed_step, stack.calls.count("up"), said)
    assert got == ("up", 2, True), f"expected two ups (2a, 2b), then a stop that says why: {got}, {target.notes}"
