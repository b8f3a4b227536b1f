"""bench/float8_curve.py: the pre-registered float8 tolerance applied to two loss curves, and the offline corpus."""

from __future__ import annotations

import pytest

from bench import float8_curve


def curves(excess_last_window: float) -> dict:
    bf16 = [10.0] * 200
    f8 = [10.0] * 180 + [10.0 * (1 + excess_last_window)] * 20
    return {"steps": 200, "curves": {"default": bf16, "default+float8=tensorwise": f8}}


@pytest.mark.parametrize("excess, met", [(0.010, True), (0.012, False), (-0.05, True)])
def test_a_window_more_than_the_tolerance_above_bf16_misses_it(excess, met):
    got = float8_curve.judge(curves(excess))
    assert (got["met"], got["worst"]) == (met, pytest.approx(max(excess, 0.0))), got


def test_the_corpus_is_real_text_one_document_a_line(tmp_path):
    lines = float8_curve.write_corpus(tmp_path).read_text().splitlines()
    assert len(lines) > 50 and sum(map(len, lines)) > 300_000 and all(lines), f"{len(lines)} lines"
