"""Captures of a real cluster are redacted of AWS account ids before they are written."""

from __future__ import annotations

from automation.capture import REDACTED_ACCOUNT, redact


def test_account_ids_in_arns_and_image_uris_are_replaced():
    obj = {
        "role": "arn:aws:iam::123456789012:role/ray-pods",
        "image": ["602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"],
    }
    got = redact(obj)
    expected = {
        "role": f"arn:aws:iam::{REDACTED_ACCOUNT}:role/ray-pods",
        "image": [f"{REDACTED_ACCOUNT}.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20"],
    }
    assert got == expected, f"expected {expected}, got {got}"


def test_longer_digit_runs_and_numbers_are_kept_and_managed_fields_dropped():
    obj = {
        "metadata": {"managedFields": [{"manager": "kubelet"}], "resourceVersion": "184470123456789"},
        "n": 123456789012,
    }
    got = redact(obj)
    assert got == {"metadata": {"resourceVersion": "184470123456789"}, "n": 123456789012}, f"got {got}"
