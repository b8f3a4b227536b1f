"""The EKS API endpoint's allow-list left to the driver: this machine's address from checkip.amazonaws.com
(read through a stand-in opener, never the network) and preflight's row that shows it.

checkip.amazonaws.com answers one line, the caller's public IPv4 and a newline (`curl -s
https://checkip.amazonaws.com` prints e.g. `203.0.113.7`); the stand-in answers the same way.
"""

from __future__ import annotations

import dataclasses
import io
import urllib.error

import pytest
from conftest import quiet_stack

from automation.errors import DriverError
from automation.steps.preflight import check_api_endpoint
from automation.targets.aws import API_CIDRS_KEY, CHECKIP_URL, checkip_address


def opener(body: bytes = b"203.0.113.7\n", error: Exception | None = None):
    asked = []

    def urlopen(url, timeout):
        asked.append((url, timeout))
        if error is not None:
            raise error
        return io.BytesIO(body)

    urlopen.asked = asked
    return urlopen


def test_address_is_read_from_checkip_amazonaws_com():
    urlopen = opener()
    got = checkip_address(urlopen)
    assert (got, urlopen.asked[0][0]) == ("203.0.113.7", CHECKIP_URL), f"got {got} from {urlopen.asked}"


def test_unreachable_checkip_names_the_key_to_set_by_hand():
    with pytest.raises(DriverError) as err:
        checkip_address(opener(error=urllib.error.URLError("Name or service not known")))
    assert (err.value.exit_code, API_CIDRS_KEY in str(err.value)) == (2, True), f"got {err.value}"


def test_an_answer_that_is_no_ipv4_address_is_refused():
    with pytest.raises(DriverError) as err:
        checkip_address(opener(b"<html>captive portal</html>"))
    assert "not an IPv4 address" in str(err.value), f"got {err.value}"


def _cluster(**changes):
    return dataclasses.replace(quiet_stack("us-west-2").cluster, **changes)


def test_preflight_shows_the_address_run_will_write():
    row = check_api_endpoint(_cluster(), "us-west-2", lambda: "203.0.113.7/32")
    assert (row.status, "203.0.113.7/32" in row.detail) == ("pass", True), f"got {row}"


def test_preflight_fails_when_the_address_cannot_be_learned():
    def fails() -> str:
        raise DriverError("could not read this machine's address", exit_code=2)

    row = check_api_endpoint(_cluster(), "us-west-2", fails)
    assert (row.status, API_CIDRS_KEY in row.fix) == ("fail", True), f"got {row}"


def test_preflight_shows_an_allow_list_the_stack_sets():
    row = check_api_endpoint(_cluster(public_access_cidrs=("198.51.100.0/24",)), "us-west-2", None)
    assert (row.status, "198.51.100.0/24" in row.detail) == ("pass", True), f"got {row}"


# ---- a second run from another address (issue 44 item 3). This machine's address is faked: HERE, in TEST-NET-3;
# the earlier machine's in TEST-NET-2 (RFC 5737).
HERE = "203.0.113.7/32"
ELSEWHERE = "198.51.100.9/32"


def _row(cidrs: tuple[str, ...], driver_cidr: str = ""):
    cluster = _cluster(public_access_cidrs=cidrs, driver_cidr=driver_cidr)
    return check_api_endpoint(cluster, "us-west-2", lambda: HERE)


def test_a_list_the_user_wrote_without_this_address_fails_with_the_command_that_adds_it():
    row = _row((ELSEWHERE, "192.0.2.0/24"))
    wanted = f"pulumi config set --stack us-west-2 --path '{API_CIDRS_KEY}[2]' {HERE}"
    assert (row.status, row.fix) == ("fail", wanted), f"expected fail with `{wanted}`, got {row}"


def test_a_list_open_to_the_world_passes():
    assert _row(("0.0.0.0/0",)).status == "pass", "0.0.0.0/0 covers every address"


def test_a_cidr_covering_this_address_passes():
    row = _row((ELSEWHERE, "203.0.113.0/24"))
    assert (row.status, "203.0.113.0/24" in row.detail) == ("pass", True), f"got {row}"


def test_the_drivers_entry_from_another_address_passes_saying_run_replaces_it():
    row = _row((ELSEWHERE,), driver_cidr=ELSEWHERE)
    assert (row.status, "replace" in row.detail, HERE in row.detail) == ("pass", True, True), f"got {row}"


def test_an_unreachable_address_service_skips_the_comparison_of_a_list_the_stack_sets():
    def fails() -> str:
        raise DriverError("could not read this machine's address", exit_code=2)

    row = check_api_endpoint(_cluster(public_access_cidrs=(ELSEWHERE,)), "us-west-2", fails)
    assert row.status == "skip", f"expected skip (the list may well hold this machine), got {row}"
