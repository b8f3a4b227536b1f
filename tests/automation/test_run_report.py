"""A failure half-way through the AWS pipeline, after resources exist: the result says what exists,
what it costs per hour while it stays up (from the Pricing API, or that the cost is unknown), and the
exact commands to resume or to tear down. The outside world is the fakes of test_run_steps.py:
a FakeStack with the Automation API's interface, moto clients, recorded Kubernetes objects and a
scripted pod exec."""

from __future__ import annotations

import io
import json

import _driver_helpers as helpers  # tests/support is on pytest's pythonpath
import boto3
import pytest
from _aws_run import (  # noqa: F401 - aws is the moto fixture the tests use
    NCCL,
    KubeWithExec,
    aws,
    client_factory,
    cluster_exec,
    outputs,
    run,
)
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber
from rich.console import Console

from automation.run_outcome import build_report, render
from automation.targets.aws import PIPELINE, AwsDeps, AwsRun, AwsTarget

STACK = "us-west-2"
RESUME = f"python -m automation run --stack {STACK}"
TEARDOWN = f"python -m automation destroy --stack {STACK}"
# Test values in the Pricing API's answer shape (a PriceList of JSON strings, as in
# https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_pricing_GetProducts.html);
# not real prices.
GPU_USD, SYSTEM_USD = 4.5, 0.25
pytestmark = pytest.mark.usefixtures("aws")


def price_item(usd: float) -> str:
    dim = {"unit": "Hrs", "pricePerUnit": {"USD": str(usd)}}
    return json.dumps({"terms": {"OnDemand": {"t1": {"priceDimensions": {"d1": dim}}}}})


def stubbed_pricing():
    """A Pricing client answering the GPU node type's price, then the system node type's, as often as asked."""
    client = boto3.client("pricing", region_name="us-east-1")
    stub = Stubber(client)
    for _ in range(4):  # advise and the report's cost may each ask once
        for usd in (GPU_USD, SYSTEM_USD):
            stub.add_response("get_products", {"PriceList": [price_item(usd)]})
    stub.activate()
    return client


class UnreachablePricing:
    def get_products(self, **kwargs):
        raise EndpointConnectionError(endpoint_url="https://api.pricing.us-east-1.amazonaws.com/")


def target(api, stack, pricing, pod_exec=None, clients=None) -> AwsTarget:
    deps = AwsDeps(
        client=clients or client_factory(),
        stack=lambda: stack,
        kube=lambda kc: KubeWithExec(kc, pod_exec or cluster_exec()),
        confirm=lambda q: True,
        pricing=pricing,
        public_ip=helpers.deployer_ip,
    )
    return AwsTarget(AwsRun(helpers.stack_config(STACK), "r1", yes=True, node_wait_s=0, pod_wait_s=0), deps)


def expected_usd_per_hour() -> float:
    cfg = helpers.stack_config(STACK)
    return cfg.gpu_nodes.node_count * GPU_USD + cfg.system_nodes.count * SYSTEM_USD


def up_fails(api):
    return helpers.FakeStack(STACK, outputs=outputs(api), fail={"up": "eks:index:ManagedNodeGroup gpu: CREATE_FAILED"})


def no_efa_objects() -> dict:
    objects = helpers.load_k8s()
    for node in objects["nodes"]["items"]:
        node["status"]["allocatable"].pop("vpc.amazonaws.com/efa", None)
    return objects


def failing_run(case: str, pricing) -> tuple:
    """Run the whole pipeline with the failure `case` injected; the result and the target."""
    objects = no_efa_objects() if case == "verify-no-efa" else None
    with helpers.FakeKubeApi(objects) as api:
        stack = up_fails(api) if case == "up-after-cluster" else helpers.FakeStack(STACK, outputs=outputs(api))
        pod_exec = {
            "follow-job-fails": cluster_exec(ends="FAILED"),
            "check-socket-fallback": cluster_exec(nccl_log=NCCL / "socket_cluster_nccl952.log"),
        }.get(case)
        t = target(api, stack, pricing, pod_exec=pod_exec)
        return run(t, PIPELINE), t


_RUNS: dict[str, tuple] = {}


def stubbed_run(case: str) -> tuple:
    """`failing_run(case, stubbed_pricing)`, run once per case for the module: the four judgements below read
    the same run (its result and target are plain data once the run is over; no test changes them)."""
    if case not in _RUNS:
        _RUNS[case] = failing_run(case, stubbed_pricing)
    return _RUNS[case]


CASES = {
    "up-after-cluster": "up",
    "verify-no-efa": "verify",
    "follow-job-fails": "follow",
    "check-socket-fallback": "check",
}


@pytest.mark.parametrize("case", list(CASES))
def test_halfway_failure_stops_at_its_step(case):
    result, _ = stubbed_run(case)
    assert result.failed_step == CASES[case], f"expected {case} to fail at {CASES[case]}, got {result.failed_step}"


@pytest.mark.parametrize("case", list(CASES))
def test_halfway_failure_states_the_cost_per_hour(case):
    result, _ = stubbed_run(case)
    cost = f"${expected_usd_per_hour():,.2f}/h"
    assert result.advice is not None and cost in result.advice.exists, (
        f"expected {cost} in what exists after {case}, got {result.advice}"
    )


@pytest.mark.parametrize("case", list(CASES))
def test_halfway_failure_names_what_exists(case):
    result, _ = stubbed_run(case)
    exists = result.advice.exists if result.advice else ""
    named = f"stack {STACK} may be partly created" if case == "up-after-cluster" else f"cluster of stack {STACK} is up"
    assert named in exists, f"expected {named!r} in what exists after {case}, got {exists!r}"


@pytest.mark.parametrize("case", list(CASES))
def test_halfway_failure_gives_the_resume_and_destroy_commands(case):
    result, _ = stubbed_run(case)
    cmds = list(result.advice.next_commands) if result.advice else []
    missing = [c for c in (RESUME, TEARDOWN) if not any(c in line for line in cmds)]
    assert missing == [], f"expected the commands {missing} after {case}, got {cmds}"


@pytest.mark.parametrize("case", ["up-after-cluster", "check-socket-fallback"])
def test_halfway_failure_says_the_cost_is_unknown_when_pricing_is_unreachable(case):
    result, _ = failing_run(case, UnreachablePricing)
    exists = result.advice.exists if result.advice else ""
    expected = "cost per hour unknown: Pricing API: EndpointConnectionError"
    assert expected in exists, f"expected {expected!r} after {case}, got {exists!r}"


def test_halfway_failure_report_prints_cost_and_commands():
    result, t = stubbed_run("verify-no-efa")
    out = io.StringIO()
    render(build_report(t, result, "run"), Console(file=out, width=400, color_system=None))
    text = out.getvalue()
    wanted = [f"${expected_usd_per_hour():,.2f}/h", RESUME, TEARDOWN, "failed at verify"]
    missing = [w for w in wanted if w not in text]
    assert missing == [], f"expected the printed report to hold {missing}, got:\n{text}"
