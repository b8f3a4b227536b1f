"""workloads/summary.py: the run summary keeps summary.json's format, and reads the partial summaries of older runs."""

from __future__ import annotations

import json

from workloads.summary import RunSummary


def test_a_summary_survives_its_json_file_unchanged():
    s = RunSummary(run_id="r1", steps=4, tokens_per_s=1.5e4, losses=(2.0, 1.5), oom_fallbacks=({"step": 1},))
    got = RunSummary.parse(json.dumps(s.to_dict()))
    assert got == s, f"expected {s}, got {got}"


def test_a_partial_summary_of_an_older_run_reads_with_the_rest_not_recorded():
    got = RunSummary.from_dict({"tokens_per_s": 100.0, "a_key_of_a_later_version": 1})
    assert (got.tokens_per_s, got.precision, got.losses) == (100.0, None, ()), f"got {got}"
