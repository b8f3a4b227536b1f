"""Pure parts of the steps: engine-event lines, the Pricing API's answer, the NCCL verdict's mapping."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.stub import Stubber

from automation.cost import estimate
from automation.ec2 import family, quota_for
from automation.pipeline import ChangeSummary, TransportVerdict
from automation.pulumi_stack import describe_event
from automation.steps.check import check_result, not_applicable_on_cpu
from automation.targets.local import LOCAL_GPU_NOTE


def engine_event(**body):
    from pulumi.automation import EngineEvent

    return EngineEvent.from_json({"sequence": 1, "timestamp": 0, **body})


def step_meta(op, type_, name):
    return {
        "metadata": {
            "op": op,
            "urn": f"urn:pulumi:us-west-2::ray-efa-eks::{type_}::{name}",
            "type": type_,
            "provider": "",
        }
    }


def test_resource_event_becomes_an_operation_line():
    ev = engine_event(resourcePreEvent=step_meta("create", "aws:eks/nodeGroup:NodeGroup", "ray-efa-eks-gpu"))
    assert describe_event(ev) == "create aws:eks/nodeGroup:NodeGroup ray-efa-eks-gpu"


def test_unchanged_resources_make_no_line():
    assert describe_event(engine_event(resourcePreEvent=step_meta("same", "aws:ec2/vpc:Vpc", "vpc"))) is None


def test_error_diagnostics_are_shown():
    ev = engine_event(
        diagnosticEvent={"message": "creating EKS Node Group: CREATE_FAILED\n", "color": "never", "severity": "error"}
    )
    assert describe_event(ev) == "error: creating EKS Node Group: CREATE_FAILED"


def test_creates_cost_money_and_no_changes_do_not():
    assert ChangeSummary({"create": 3}).costs_money and not ChangeSummary({"same": 40}).costs_money


def price_list(usd: str) -> str:
    # Shape of one GetProducts PriceList entry, built from the Pricing API reference (not recorded).
    return json.dumps(
        {
            "product": {
                "attributes": {"instanceType": "g6.12xlarge", "regionCode": "us-west-2", "operatingSystem": "Linux"}
            },
            "terms": {
                "OnDemand": {
                    "SKU.JRTCKXETXF": {
                        "priceDimensions": {"SKU.JRTCKXETXF.6YS6EN2CT7": {"unit": "Hrs", "pricePerUnit": {"USD": usd}}}
                    }
                }
            },
        }
    )


def pricing_client(answers):
    client = boto3.client("pricing", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    for answer in answers:
        if isinstance(answer, Exception):
            stub.add_client_error("get_products", service_error_code="ThrottlingException")
        else:
            stub.add_response("get_products", {"PriceList": [price_list(answer)], "FormatVersion": "aws_v1"})
    stub.activate()
    return client


def test_cost_is_count_times_on_demand_price():
    est = estimate(pricing_client(["4.6016", "0.2016"]), "us-west-2", [("g6.12xlarge", 2), ("m7i.xlarge", 1)])
    assert est.usd_per_hour == round(2 * 4.6016 + 0.2016, 4), f"got {est.usd_per_hour}"


def test_cost_is_unknown_when_pricing_fails():
    est = estimate(pricing_client([RuntimeError()]), "us-west-2", [("g6.12xlarge", 2)])
    assert est.usd_per_hour is None and est.text().startswith("unknown"), f"got {est}"


def test_quota_code_follows_the_instance_family():
    got = {t: quota_for(t)[0] for t in ("g6.12xlarge", "vt1.3xlarge", "p5.48xlarge", "m7i.xlarge")}
    assert got == {
        "g6.12xlarge": "L-DB2E81BA",
        "vt1.3xlarge": "L-DB2E81BA",
        "p5.48xlarge": "L-417A185B",
        "m7i.xlarge": "L-1216C47A",
    }, got
    assert family("g6e.12xlarge") == "g"


def test_cpu_run_is_a_skip_with_its_reason_not_a_pass():
    r = check_result(not_applicable_on_cpu())
    assert (r.status, r.summary) == ("skip", "no NCCL on CPU/gloo, EFA not applicable"), f"got {r.status}: {r.summary}"


def test_local_gpu_pass_is_not_reported_as_efa_proof():
    r = check_result(TransportVerdict("pass", "any", "4 intra-node connections over P2P"), note=LOCAL_GPU_NOTE)
    assert r.status == "skip" and LOCAL_GPU_NOTE in r.summary, f"got {r.status}: {r.summary}"


def test_socket_fallback_fails_with_evidence():
    v = TransportVerdict(
        "fail", "efa", "NCCL sent inter-node traffic over TCP sockets", ("nccl.rank0.log:3: via NET/Socket/0 (socket)",)
    )
    r = check_result(v)
    assert r.status == "fail" and [f.detail for f in r.findings if f.check == "evidence"] == list(v.evidence), (
        f"got {r}"
    )


@pytest.mark.parametrize("verdict", ["inconclusive", "bad-input"])
def test_aws_verdict_other_than_pass_or_fail_is_a_failing_check_never_nccl_over_efa(verdict):
    # on AWS (no note) only a pass proves EFA: an inconclusive run once could exit 0 as "NCCL over efa"
    r = check_result(TransportVerdict(verdict, "efa", "no inter-node connection in scope"))
    assert (r.status, r.ok) == ("fail", False), f"expected a failing check for {verdict!r}, got {r.status}: {r.summary}"
    assert "NCCL over" not in r.summary and verdict in r.summary, f"expected the verdict named, got {r.summary!r}"
