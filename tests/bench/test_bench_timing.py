"""The timing method, on a simulated device (no GPU needed) and a scripted host clock."""

from __future__ import annotations

import itertools

import pytest

from cuvil_dsl.bench.timing import GpuTimer, HostTimer, Measurement, Settings, merge
from bench_support import FakeClock, FakeStream, fake_gpu_contender

SETTINGS = Settings(budget_s=0.01, min_samples=20, max_samples=2000, warmup_s=0.001, e2e_samples=5)


def measure(durations, settings=SETTINGS, host_us=7.0):
    clock = FakeClock()
    contender = fake_gpu_contender(clock, "fake", durations, None, host_us=host_us)
    result = GpuTimer(clock, settings).measure(contender.launch, contender.stream)
    return clock, result


def test_samples_time_the_work_only_and_the_flush_precedes_each_start_event():
    clock, result = measure(itertools.repeat(100.0))
    assert result.clock == "fake-events"
    # 10 ms budget at 100 us a sample; the 50 us flushes are outside every event pair
    assert result.samples == 100 and set(result.samples_us) == {100.0}
    assert result.median_us == 100.0 and result.spread == 0.0
    estimates = 3 * ["flush", "record", "launch", "record", "sync"]
    warmups = 10 * ["launch"]  # 1 ms of warm-up at 100 us
    timed = 100 * ["flush", "record", "launch", "record"] + ["sync"]  # queued back to back, one wait
    latency = 5 * ["flush", "sync_device", "launch", "sync_device"]
    assert clock.log == estimates + warmups + timed + latency


def test_sample_count_follows_the_budget_within_its_bounds():
    assert measure(itertools.repeat(1e6))[1].samples == SETTINGS.min_samples  # slow: the minimum
    assert measure(itertools.repeat(0.5))[1].samples == SETTINGS.max_samples  # tiny: the cap
    assert measure(itertools.repeat(400.0))[1].samples == 25


def test_end_to_end_latency_is_the_host_wall_clock_around_call_and_sync():
    _, result = measure(itertools.repeat(100.0), host_us=7.0)
    assert len(result.e2e_us) == 5 and result.e2e_p50_us == pytest.approx(7.0)


def test_a_separate_call_is_used_for_end_to_end_latency():
    clock = FakeClock()
    contender = fake_gpu_contender(clock, "fake", itertools.repeat(10.0), None)
    calls = []

    def call():
        calls.append(1)
        clock.host_s += 30e-6

    result = GpuTimer(clock, SETTINGS).measure(contender.launch, FakeStream(), call)
    assert len(calls) == 5 and result.e2e_p50_us == pytest.approx(30.0)


def test_median_and_spread_of_a_noisy_measurement():
    m = Measurement("x", (1.0, 2.0, 3.0, 4.0, 100.0))
    assert m.median_us == 3.0 and m.iqr_us == 2.0 and m.spread == pytest.approx(2 / 3)
    data = m.to_json()
    assert data["samples"] == 5 and data["min_us"] == 1.0 and data["e2e_p50_us"] is None
    assert Measurement("x", ()).to_json()["median_us"] is None
    # two samples (a slow contender within a small budget): none lies between the quartiles, 2.25 and 2.75
    assert Measurement("x", (2.0, 3.0)).iqm_us == 2.5 and Measurement("x", (7.0,)).iqm_us == 7.0


def test_host_timer_warms_up_then_samples_within_the_budget():
    ticks = itertools.count(0.0, 0.001)  # every reading of the clock advances 1 ms: each call "takes" 1 ms
    timer = HostTimer(Settings(budget_s=0.01, warmup_s=0.003, host_min_samples=2), now=lambda: next(ticks))
    calls = []
    result = timer.measure(lambda: calls.append(1))
    assert result.clock == "host" and result.samples_us == pytest.approx((1000.0,) * result.samples)
    assert result.samples == 10 and len(calls) == 3 + 10  # 3 ms warm-up, 10 ms of samples
    assert result.e2e_p50_us == result.median_us


def test_quick_settings_are_smaller():
    quick = Settings.quick()
    assert quick.budget_s < Settings().budget_s and quick.min_samples < Settings().min_samples
    assert Settings().count(100.0, 20) == 1000 and Settings().warmups(1e9) == 1


def test_a_round_takes_its_share_of_the_settings():
    whole = Settings(budget_s=0.09, min_samples=20, max_samples=2000, warmup_s=0.03, e2e_samples=50, rounds=3)
    one = whole.per_round()
    assert (one.budget_s, one.warmup_s, one.rounds) == pytest.approx((0.03, 0.01, 1))
    assert one.min_samples == 7 and one.max_samples == 666 and one.e2e_samples == 17  # 3 x 7 >= 20; 3 x 666 <= 2000
    assert Settings(rounds=1).per_round() == Settings(rounds=1)


def test_rounds_merge_into_one_measurement_that_keeps_each_median():
    parts = [Measurement("c", (1.0, 2.0, 3.0), (7.0,)), Measurement("c", (4.0, 5.0, 6.0), (8.0,))]
    m = merge(parts)
    assert m.samples_us == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0) and m.e2e_us == (7.0, 8.0) and m.rounds_us == (2.0, 5.0)
    assert merge(parts[:1]) is parts[0] and m.to_json()["rounds_us"] == [2.0, 5.0]
    with pytest.raises(ValueError):
        merge([])


def test_the_interquartile_mean_resolves_below_the_clock_step():
    """Event times come in steps; two kernels 0.2 us apart give the same median, not the same IQ mean."""
    step = 0.64
    fast = Measurement("c", tuple([130.0] * 70 + [130.0 + step] * 30))
    slow = Measurement("c", tuple([130.0] * 40 + [130.0 + step] * 60))
    assert fast.step_us == pytest.approx(step) and Measurement("c", (1.0, 1.0)).to_json()["step_us"] is None
    assert fast.median_us == 130.0 and slow.median_us == 130.0 + step  # the median jumps a whole step
    assert fast.iqm_us < slow.iqm_us and 130.0 <= fast.iqm_us <= 130.0 + step
