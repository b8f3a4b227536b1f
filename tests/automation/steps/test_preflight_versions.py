"""preflight's Kubernetes version row against EKS's DescribeClusterVersions, answered by botocore's Stubber (the
answer's shape is botocore's EKS model; the dates are EKS's published 1.36 / 1.32 support windows as
https://endoflife.date/amazon-eks lists them, read 2026-12-06, and illustrative only)."""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
from botocore.stub import Stubber

from automation.steps.preflight import check_kubernetes_version

REGION = "us-east-2"


def eks_answering(version: str, versions: list[dict] | None = None, error: str = ""):
    client = boto3.client("eks", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    ask = {"clusterVersions": [version], "includeAll": True}
    if error:
        stub.add_client_error("describe_cluster_versions", error, "denied", expected_params=ask)
    else:
        stub.add_response("describe_cluster_versions", {"clusterVersions": versions or []}, ask)
    stub.activate()
    return client


def info(version: str, status: str) -> dict:
    return {
        "clusterVersion": version,
        "versionStatus": status,
        "endOfStandardSupportDate": datetime(2027, 8, 2, tzinfo=UTC),
        "endOfExtendedSupportDate": datetime(2028, 8, 2, tzinfo=UTC),
    }


def test_a_version_in_standard_support_passes_with_its_end_date():
    row = check_kubernetes_version(eks_answering("1.36", [info("1.36", "STANDARD_SUPPORT")]), "1.36", REGION)
    assert (row.status, row.detail) == ("pass", "1.36 is in EKS standard support until 2027-08-02 ($0.10/h)"), row


def test_a_version_in_extended_support_warns_with_the_price():
    row = check_kubernetes_version(eks_answering("1.32", [info("1.32", "EXTENDED_SUPPORT")]), "1.32", REGION)
    expected = ("WARNING 1.32 is in EKS extended support until 2028-08-02", "$0.60/h ($14.40 a day) instead of $0.10/h")
    assert row.status == "pass" and all(e in row.detail for e in expected), row


def test_a_version_past_support_fails_naming_the_supported_ones():
    row = check_kubernetes_version(eks_answering("1.28", []), "1.28", REGION)
    assert (row.status, row.detail) == ("fail", f"1.28 is past EKS support in {REGION}"), row
    assert "describe-cluster-versions" in row.fix and "STANDARD_SUPPORT" in row.fix, row.fix


def test_a_refused_call_skips_the_row_leaving_it_to_eks():
    row = check_kubernetes_version(eks_answering("1.36", error="AccessDeniedException"), "1.36", REGION)
    assert (row.status, "AccessDeniedException" in row.detail) == ("skip", True), row
