"""preflight imports nothing heavy unless it has data to check: torch and transformers come only with
workloads/data_check.py, which a stack whose train: block reads no S3 data never needs (issue 36, item 7).

Each case runs the whole AWS preflight in a fresh interpreter (a clean sys.modules: another test of this
session may have imported torch already) against moto's in-process AWS and a Stubber for Service Quotas,
which moto does not model (docs of the existing preflight tests, tests/automation/commands/test_run_steps.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

from _shared_env import MOTO_REGION, driver_env
from conftest import REPO

HEAVY = ("torch", "transformers")

PROBE = """
import dataclasses, json, sys, warnings
from pathlib import Path
import boto3
from botocore.stub import Stubber
from moto import mock_aws

from automation.steps import preflight
from automation.targets.aws import AwsDeps, AwsRun, AwsTarget
from infra.config import ConfigWarning, load_stack

# A v2 `aws --version` line (AWS CLI user guide's example), so this machine's CLI does not decide the row.
preflight.aws_cli_version = lambda path: "aws-cli/2.22.0 Python/3.12.6 Linux/6.1.0"


def client(name):
    made = boto3.client(name, region_name=REGION)
    if name == "service-quotas":
        stub = Stubber(made)
        for code in ("L-DB2E81BA", "L-1216C47A"):  # the GPU family's On-Demand quota, then the Standard one
            stub.add_response(
                "get_service_quota",
                {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "Value": 1000.0}},
                {"ServiceCode": "ec2", "QuotaCode": code},
            )
        stub.activate()
    return made


REGION, TRAIN = sys.argv[1], json.loads(sys.argv[2])
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConfigWarning)
    cfg = dataclasses.replace(load_stack("us-west-2", Path(".")), train=TRAIN)
with mock_aws():
    target = AwsTarget(AwsRun(cfg, "r1"), AwsDeps(client=client, stack=None, kube=None))
    result = preflight.run(target, {})
print(json.dumps({"status": result.status, "summary": result.summary, "modules": sorted(sys.modules)}))
"""


def preflight_in_a_fresh_interpreter(train: dict) -> dict:
    env = dict(
        driver_env(), AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION=MOTO_REGION
    )
    env.pop("AWS_PROFILE", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, MOTO_REGION, json.dumps(train)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, f"the preflight probe failed (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_preflight_of_a_stack_without_data_imports_no_torch_or_transformers():
    done = preflight_in_a_fresh_interpreter({"steps": 7})
    assert done["status"] == "pass", f"expected preflight to pass against moto, got {done['summary']}"
    heavy = [m for m in HEAVY if m in done["modules"]]
    assert not heavy, f"preflight of a stack without data imported {heavy}"
