"""The fake pods' request parser (tests/support/_pod_requests.py) reads each command the driver builds as its
action, and nothing else as one: a fake that matched the wrong command would answer for code it does not test."""

from __future__ import annotations

import pytest
from _pod_requests import PodAction, pod_request

from automation.ray_head import RAY_RESOURCES_SNIPPET, status_command, upload_command
from automation.run_files import collect_command, pack_command
from automation.steps.verify_checks import FI_INFO_COMMAND
from automation.storage import marker_probe_command
from automation.targets.aws import READER_SYSFS_ROOT
from workloads.nccl_check.counters import SYSFS_ROOT, read_script

BUILT = [
    (FI_INFO_COMMAND, PodAction.FI_INFO, ""),
    (["python", "-c", RAY_RESOURCES_SNIPPET], PodAction.RAY_RESOURCES, ""),
    (marker_probe_command("s3://bucket/stack/m"), PodAction.S3_MARKER, "s3://bucket/stack/m"),
    (["sh", "-c", read_script()], PodAction.EFA_COUNTERS, SYSFS_ROOT),
    (["sh", "-c", read_script(READER_SYSFS_ROOT)], PodAction.EFA_COUNTERS, READER_SYSFS_ROOT),
    (upload_command("/tmp/ray-efa-eks/src/r1", 1234), PodAction.UPLOAD, "/tmp/ray-efa-eks/src/r1"),
    (["cat", "/tmp/ray-efa-eks/runs/r1/summary.json"], PodAction.READ_FILE, "/tmp/ray-efa-eks/runs/r1/summary.json"),
    (collect_command("/tmp/ray-efa-eks/runs/r1/nccl"), PodAction.COLLECT_LOGS, "/tmp/ray-efa-eks/runs/r1/nccl"),
    (pack_command("/tmp/ray-efa-eks/runs/r1", ("summary.json",)), PodAction.PACK_FILES, "/tmp/ray-efa-eks/runs/r1"),
    (status_command("r1"), PodAction.JOB, ""),
]


@pytest.mark.parametrize(("argv", "action", "arg"), BUILT, ids=[a.name for _, a, _ in BUILT])
def test_each_command_the_driver_builds_is_read_as_its_action(argv, action, arg):
    request = pod_request(argv)
    got = (request.action, request.arg) if request else None
    assert got == (action, arg), f"expected {(action, arg)}, got {got} for {argv}"


@pytest.mark.parametrize(
    "argv",
    [
        ["sh", "-c", "echo fi_info -p efa"],  # names fi_info, is not verify's script
        ["python", "-c", "print('RAY_CLUSTER_RESOURCES')"],
        ["sh", "-c", "rm -rf /x && mkdir -p /x && head -c 12 | base64 -d | tar -xzf - -C /y"],  # two folders
    ],
    ids=["fi_info-in-an-echo", "another-python", "upload-into-another-folder"],
)
def test_a_command_that_only_looks_like_one_is_no_request(argv):
    assert pod_request(argv) is None, f"expected no request for {argv}, got {pod_request(argv)}"
