"""preflight's GPU availability-zone row: which AZ it picks or refuses, and the fix it names.

`check_az` is pure (the offerings and the stack's AZs are passed in), so no AWS client is needed.
"""

from __future__ import annotations

from automation.steps.preflight import check_az

STACK_AZS = ("us-west-2a", "us-west-2b")


def test_open_az_passes_naming_the_chosen_and_the_valid_azs():
    row, az, valid = check_az({"us-west-2c", "us-west-2b", "us-west-2a"}, STACK_AZS, "", "g6.12xlarge", "us-west-2")
    assert (az, valid) == ("us-west-2a", STACK_AZS), f"expected us-west-2a among {STACK_AZS}, got {az} among {valid}"
    assert (row.check, row.status) == ("GPU availability zone", "pass"), f"expected a passing AZ row, got {row}"
    expected = "chose us-west-2a (valid: us-west-2a, us-west-2b)"
    assert row.detail == expected, f"expected {expected!r}, got {row.detail!r}"


def test_configured_az_that_cannot_be_used_fails_naming_the_key_and_a_valid_az():
    row, az, _ = check_az(STACK_AZS, STACK_AZS, "us-west-2d", "g6.12xlarge", "us-west-2")
    expected = (
        "set 'ray-efa-eks:gpuAvailabilityZone: us-west-2a' in Pulumi.us-west-2.yaml (valid: us-west-2a, us-west-2b)"
    )
    assert (row.status, az, row.fix) == ("fail", None, expected), f"expected a fail with fix {expected!r}, got {row}"


def test_type_offered_only_outside_the_stack_fails_naming_where_and_how_to_list_offerings():
    row, az, valid = check_az({"us-west-2c"}, STACK_AZS, "us-west-2a", "p5e.48xlarge", "us-west-2")
    assert (row.status, az, valid) == ("fail", None, ()), f"expected a fail with no AZ, got {row}, {az}, {valid}"
    assert "p5e.48xlarge is offered in ['us-west-2c']" in row.detail, (
        f"expected where it is offered, got {row.detail!r}"
    )
    expected_fix = (
        "add an AZ that offers it to ray-efa-eks:availabilityZones in Pulumi.us-west-2.yaml "
        "(aws ec2 describe-instance-type-offerings --location-type availability-zone "
        "--filters Name=instance-type,Values=p5e.48xlarge)"
    )
    assert row.fix == expected_fix, f"expected fix {expected_fix!r}, got {row.fix!r}"


def test_type_offered_nowhere_says_so():
    row, _, _ = check_az(set(), STACK_AZS, "", "p5e.48xlarge", "us-west-2")
    assert row.status == "fail" and "is offered in no AZ but" in row.detail, f"expected 'offered in no AZ', got {row}"


def test_configured_az_that_offers_the_type_passes_as_is():
    row, az, valid = check_az(STACK_AZS, STACK_AZS, "us-west-2b", "g6.12xlarge", "us-west-2")
    assert (row.check, row.status, az) == ("GPU availability zone", "pass", "us-west-2b"), f"got {row}, {az}"
    expected = "us-west-2b offers g6.12xlarge (valid: us-west-2a, us-west-2b)"
    assert row.detail == expected, f"expected {expected!r}, got {row.detail!r}"
