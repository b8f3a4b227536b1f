"""bench/suite_timings.py: the test counts it reads from pytest's JUnit report, and one real tiny run."""

from __future__ import annotations

import json

import pytest

from bench import suite_timings

# The shape pytest 9 writes with --junitxml: <testsuites><testsuite name="pytest" errors= failures= skipped=
# tests= time=...> (_pytest/junitxml.py, LogXML.pytest_sessionfinish).
JUNIT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">'
    '<testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10" time="1.5"></testsuite></testsuites>'
)


def test_counts_split_the_tests_into_passed_failed_errors_and_skipped():
    got = suite_timings.counts(JUNIT)
    assert got == {"tests": 10, "passed": 4, "failed": 2, "errors": 1, "skipped": 3}, got


@pytest.mark.slow
def test_a_tiny_suite_is_timed_and_counted_per_tier(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\naddopts = -m 'not slow'\n")
    (suite / "test_tiny.py").write_text(
        "import pytest\n\ndef test_a():\n    pass\n\ndef test_b():\n    assert False\n\n"
        "@pytest.mark.skip\ndef test_c():\n    pass\n\n@pytest.mark.slow\ndef test_d():\n    pass\n"
    )
    out = tmp_path / "suite.json"
    rc = suite_timings.main(["--out", str(out), "--cwd", str(suite)])
    tiers = {
        t["tier"]: (t["tests"], t["passed"], t["failed"], t["skipped"], t["exit_code"])
        for t in json.loads(out.read_text())["tiers"]
    }
    assert (rc, tiers) == (1, {"default": (3, 1, 1, 1, 1), "slow": (1, 1, 0, 0, 0)}), f"rc {rc}, tiers {tiers}"
    loads = [t["load_average"] for t in json.loads(out.read_text())["tiers"]]
    assert all(len(pair) == 2 and all(x >= 0 for x in pair) for pair in loads), f"got load averages {loads}"
