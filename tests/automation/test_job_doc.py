"""The estimate in docs/aws-first-run.md and the README of how long the default AWS job trains follows from its defaults
(automation/job.py, CLUSTER_JOB) and the tokens/s predicted for it (bench/results/2026-12-05-h100/README.md, "The
re-chosen default and its prediction", the **new default** row), so a change to either shows here."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

from automation.job import CLUSTER_JOB


def _predicted_tokens_per_s() -> tuple[int, int]:
    text = (REPO / "bench" / "results" / "2026-12-05-h100" / "README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| **new default** |"))
    low, high = re.search(r"\*\*([\d,]+)–([\d,]+)\*\*", row).groups()
    return int(low.replace(",", "")), int(high.replace(",", ""))


@pytest.mark.parametrize("page", ["docs/aws-first-run.md", "README.md"])
def test_the_stated_training_time_follows_from_the_defaults_and_the_prediction(page):
    tokens = CLUSTER_JOB["steps"] * CLUSTER_JOB["global_batch_size"] * CLUSTER_JOB["seq_len"]
    low, high = _predicted_tokens_per_s()
    fastest, slowest = tokens / high / 60, tokens / low / 60
    text = " ".join((REPO / page).read_text().split())  # the README wraps the sentence
    stated = re.search(r"about (\d+(?:\.\d+)?) to (\d+(?:\.\d+)?) minutes of training", text)
    assert stated, f"{page} states no 'about A to B minutes of training'"
    got = (float(stated.group(1)), float(stated.group(2)))
    assert abs(got[0] - fastest) <= 0.5 and abs(got[1] - slowest) <= 0.5, (
        f"expected about {fastest:.1f} to {slowest:.1f} minutes ({tokens} tokens at {high}-{low} tokens/s), "
        f"{page} says {got}"
    )
