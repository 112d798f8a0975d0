"""Noise-aware timing: measure until the medians settle, and call a slowdown only beyond the noise.

One timing round is ``executor.time(warmup, n)`` (CUDA-event times on the GPU). A first round of
the spec's ``iterations`` calibrates: later rounds take at least ``MIN_ROUND_SECONDS`` each (more
executions when one is short), so a round's median is not at the mercy of one scheduler hiccup.
A round's median still moves with the machine's mood (clocks, other processes, caches), so
rounds are repeated until the relative spread of their medians is below ``TARGET_SPREAD``, as
nvbench does with its relative noise, or until ``MAX_ROUNDS`` or ``MAX_SECONDS`` are used up.
The spread that remains is the measured noise. It is the interquartile range of the round
medians over their median (half the range for three rounds), so one round that a background
process slowed down does not pass for noise of the pipeline.

A replay is a regression when its median exceeds the recorded one by more than ``regress_pct``
*plus* the larger of the two noises, and a second measurement agrees (the faster of the two
counts). Speed-ups never fail. Without ``regress_pct`` the ratio is reported, not judged.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from cuvil_dsl.runtime.base import Executor, Timing

TARGET_SPREAD = 0.05
MIN_ROUNDS = 3
MAX_ROUNDS = 10
MAX_SECONDS = 2.0
MIN_ROUND_SECONDS = 0.02
MAX_ROUND_ITERATIONS = 10_000


@dataclass(frozen=True)
class TimingStats:
    """Statistics of several timing rounds, in microseconds per execution of the pipeline."""

    median_us: float  # the median of the round medians
    p99_us: float
    mean_us: float
    std_us: float
    spread: float  # interquartile range of the round medians over their median: the measured noise
    samples: int
    round_medians_us: tuple[float, ...]
    samples_us: tuple[float, ...] = ()  # every sample, kept in memory for the budget, not recorded

    @staticmethod
    def from_rounds(rounds: list[Timing]) -> TimingStats:
        medians = np.array([r.p50_us for r in rounds])
        every = tuple(s for r in rounds for s in r.samples_us)
        whole = Timing(every)
        median = float(np.median(medians))
        q25, q75 = np.percentile(medians, [25, 75])
        spread = float((q75 - q25) / median) if median > 0 else 0.0
        return TimingStats(median, whole.p99_us, whole.mean_us, whole.std_us, spread, len(every),
                           tuple(float(m) for m in medians), every)

    def as_timing(self) -> Timing:
        """All samples as one :class:`Timing`, for the budget (p50 and p99 over every sample)."""
        return Timing(self.samples_us)

    def to_json(self) -> dict:
        return {
            "median_us": self.median_us,
            "p99_us": self.p99_us,
            "mean_us": self.mean_us,
            "std_us": self.std_us,
            "spread": self.spread,
            "samples": self.samples,
            "rounds": len(self.round_medians_us),
            "round_medians_us": list(self.round_medians_us),
        }

    @staticmethod
    def from_json(data: dict) -> TimingStats:
        return TimingStats(
            float(data["median_us"]), float(data["p99_us"]), float(data["mean_us"]), float(data["std_us"]),
            float(data["spread"]), int(data["samples"]), tuple(float(m) for m in data["round_medians_us"]),
        )


def measure(executor: Executor, warmup: int, iterations: int, first: Timing | None = None) -> TimingStats:
    """Timing rounds until their medians agree within ``TARGET_SPREAD`` (or the limits are hit).

    ``first`` is a round already measured (``run``'s own timing), used as the calibration round.
    Later rounds warm up with one execution only: the calibration already brought caches, clocks
    and graphs up.
    """
    calibration = first if first is not None and first.iterations else executor.time(warmup, iterations)
    per_round = iterations
    if calibration.p50_us > 0:
        per_round = max(iterations, math.ceil(MIN_ROUND_SECONDS * 1e6 / calibration.p50_us))
    per_round = min(per_round, max(iterations, MAX_ROUND_ITERATIONS))
    rounds: list[Timing] = []
    started = time.perf_counter()
    while True:
        rounds.append(executor.time(min(warmup, 1), per_round))
        stats = TimingStats.from_rounds(rounds)
        if len(rounds) < MIN_ROUNDS:
            continue
        if stats.spread < TARGET_SPREAD or len(rounds) >= MAX_ROUNDS or time.perf_counter() - started > MAX_SECONDS:
            return stats


@dataclass(frozen=True)
class Verdict:
    """How a replay's median compares with the recording's."""

    ratio: float
    noise: float
    limit: float | None  # the largest ratio that passes; None when not judged
    passed: bool | None

    def describe(self, recorded: TimingStats, measured: TimingStats, regress_pct: float | None) -> str:
        head = (f"median {measured.median_us:.1f} us vs recorded {recorded.median_us:.1f} us: "
                f"{self.ratio:.2f}x ({(self.ratio - 1) * 100:+.0f}%), noise {self.noise * 100:.1f}%")
        if self.limit is None:
            return head + "; reported, not judged (budget.regress_pct is not set)"
        allowed = f"regress_pct {regress_pct:g}% + noise {self.noise * 100:.1f}%"
        if self.passed:
            return f"{head}; within {allowed}"
        return f"regression: {head}; beyond {allowed}"


def judge(recorded: TimingStats, measured: TimingStats, regress_pct: float | None) -> Verdict:
    """Compare medians; a slowdown fails only beyond ``regress_pct`` plus the measured noise."""
    ratio = measured.median_us / recorded.median_us if recorded.median_us > 0 else float("inf")
    noise = max(recorded.spread, measured.spread)
    if regress_pct is None:
        return Verdict(ratio, noise, None, None)
    limit = 1.0 + regress_pct / 100.0 + noise
    return Verdict(ratio, noise, limit, ratio <= limit)
