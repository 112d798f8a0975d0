"""The noise-aware timing rule and the bitwise comparison, without running any pipeline."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cuvil_dsl.runtime.base import Timing
from cuvil_dsl.testing import timing
from cuvil_dsl.testing.checks import bitwise_difference
from cuvil_dsl.testing.timing import TimingStats, judge, measure


class ScriptedExecutor:
    """``time`` returns rounds whose samples all equal the next scripted value."""

    def __init__(self, values):
        self.values = iter(values)
        self.calls: list[tuple[int, int]] = []

    def time(self, warmup, iterations):
        self.calls.append((warmup, iterations))
        value = next(self.values)
        return Timing((value,) * iterations)


def stats(*medians: float) -> TimingStats:
    return TimingStats.from_rounds([Timing((m, m, m)) for m in medians])


def test_quiet_rounds_stop_at_the_minimum_and_calibrate_their_length():
    executor = ScriptedExecutor(itertools.repeat(100.0))
    result = measure(executor, warmup=4, iterations=5)
    assert len(result.round_medians_us) == timing.MIN_ROUNDS and result.spread == 0.0
    assert executor.calls[0] == (4, 5)  # the calibration round: the spec's warmup and iterations
    # later rounds last MIN_ROUND_SECONDS: 20 ms / 100 us = 200 executions, one warmup each
    assert executor.calls[1:] == [(1, 200)] * timing.MIN_ROUNDS
    assert result.samples == 200 * timing.MIN_ROUNDS and result.median_us == 100.0


def test_noisy_rounds_continue_up_to_the_maximum():
    executor = ScriptedExecutor(itertools.cycle([100.0, 150.0]))
    result = measure(executor, warmup=0, iterations=10)
    assert len(result.round_medians_us) == timing.MAX_ROUNDS and result.spread > timing.TARGET_SPREAD


def test_a_first_round_from_run_is_the_calibration():
    executor = ScriptedExecutor(itertools.repeat(50.0))
    measure(executor, warmup=2, iterations=5, first=Timing((50.0,) * 5))
    assert executor.calls == [(1, 400)] * timing.MIN_ROUNDS


def test_spread_is_the_interquartile_range_so_one_slow_round_is_not_noise():
    assert stats(100, 100, 100, 100, 100, 100, 100, 300).spread == 0.0
    assert stats(90, 100, 110).spread == pytest.approx(0.1)


def test_judge_calls_a_regression_only_beyond_regress_pct_plus_noise():
    recorded = stats(100, 100, 100)
    assert judge(recorded, stats(109, 109, 109), 10).passed is True
    assert judge(recorded, stats(111, 111, 111), 10).passed is False
    noisy = stats(105, 115, 125)  # median 115, spread (120 - 110) / 115
    verdict = judge(recorded, noisy, 10)
    assert verdict.passed is True and verdict.limit == pytest.approx(1.1 + 10 / 115)
    assert judge(recorded, stats(50, 50, 50), 10).passed is True  # speed-ups never fail


def test_without_regress_pct_the_ratio_is_reported_not_judged():
    recorded, measured = stats(100, 100, 100), stats(300, 300, 300)
    verdict = judge(recorded, measured, None)
    assert verdict.passed is None and verdict.ratio == 3.0
    assert "3.00x (+200%)" in verdict.describe(recorded, measured, None) and "not judged" in verdict.describe(
        recorded, measured, None)


def test_stats_round_trip_through_the_manifest():
    original = stats(100, 120, 110)
    again = TimingStats.from_json(original.to_json())
    assert again.median_us == original.median_us and again.round_medians_us == original.round_medians_us


def test_bitwise_difference_sees_signed_zeros_and_nan_payloads():
    a = np.array([0.0, 1.0, np.nan], dtype=np.float32)
    assert bitwise_difference(a, a.copy()) is None
    signed = a.copy()
    signed[0] = -0.0
    assert "1 of 3 elements differ, first at index [0]" in bitwise_difference(a, signed)
    payload = a.copy()
    payload.view(np.uint32)[2] ^= 1
    assert bitwise_difference(a, payload).startswith("1 of 3 elements differ, first at index [2]")
    assert "float64[3] where float32[3] was recorded" == bitwise_difference(a, a.astype(np.float64))
