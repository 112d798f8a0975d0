"""A benchmark end to end on the host, with injected baselines; the GPU path through a fake clock."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from bench_support import FakeClock, FakeFamily, FakeStream, fake_gpu_contender

from cuvil_dsl import driver
from cuvil_dsl.bench import runner
from cuvil_dsl.bench.baselines import FAMILIES, NotApplicable
from cuvil_dsl.bench.runner import Bench
from cuvil_dsl.bench.timing import Settings
from cuvil_dsl.reference import execute as reference_execute

FAST = Settings(budget_s=0.002, min_samples=5, max_samples=50, warmup_s=0.0, host_min_samples=2, e2e_samples=3)
NUMPY = [f for f in FAMILIES if f.name == "numpy"]


def session_for(folder, stem="softmax_f32"):
    return driver.open_spec(folder / f"{stem}.yaml", backend="reference")


def expected_of(session):
    return reference_execute(session.pipeline, session.inputs, session.binding.params)["y"]


def test_ours_and_numpy_on_the_reference_backend(small_benchmarks):
    result = Bench("reference", FAST, NUMPY).run(session_for(small_benchmarks))
    ours, numpy = result.entries
    assert (ours.name, ours.status, ours.device, ours.measurement.clock) == ("ours", "ok", "host", "host")
    assert (numpy.name, numpy.status, numpy.check.passed) == ("numpy", "ok", True)
    assert numpy.measurement.samples >= FAST.host_min_samples
    assert result.kind == "softmax" and result.exit_code == 0
    assert result.check_passed is None  # the reference backend is the reference
    assert result.floor.bytes == 2 * 32 * 128 * 4 and result.floor.floor_us is None  # no ceilings measured


def test_a_gpu_baseline_is_timed_with_events_on_its_stream(small_benchmarks):
    session = session_for(small_benchmarks)
    clock = FakeClock()
    good = fake_gpu_contender(clock, "fakegpu", itertools.repeat(40.0), expected_of(session).astype(np.float32))
    result = Bench("reference", FAST, [FakeFamily("fakegpu", lambda p: good)], clock_factory=lambda: clock).run(session)
    entry = result.entry("fakegpu")
    assert entry.status == "ok" and entry.measurement.clock == "fake-events"
    # 3 interleaved rounds of 2/3 ms at 40 us: 16 samples each (the cap of 50 split: 16 a round)
    assert entry.median_us == 40.0 and entry.measurement.samples == 48
    assert entry.measurement.rounds_us == (40.0, 40.0, 40.0)
    assert "flush" in clock.log


def test_a_wrong_baseline_is_reported_and_never_timed(small_benchmarks):
    session = session_for(small_benchmarks)
    clock, launches = FakeClock(), []
    wrong = fake_gpu_contender(clock, "liar", itertools.repeat(1.0), expected_of(session) * 1.01, calls=launches)
    result = Bench("reference", FAST, [FakeFamily("liar", lambda p: wrong)], clock_factory=lambda: clock).run(session)
    entry = result.entry("liar")
    assert entry.status == "wrong" and entry.measurement is None and not entry.check.passed
    assert "computes something else" in entry.reason
    assert len(launches) == 1  # run once for the check, not timed
    assert result.exit_code == 0  # a baseline's failure is not ours


def test_baselines_that_fail_or_do_not_apply(small_benchmarks):
    def broken(problem):
        raise RuntimeError("driver exploded")

    def refuses(problem):
        raise NotApplicable("no bf16 here")

    families = [FakeFamily("broken", broken), FakeFamily("refuses", refuses)]
    result = Bench("reference", FAST, families).run(session_for(small_benchmarks))
    assert result.entry("broken").status == "error" and "driver exploded" in result.entry("broken").reason
    assert result.entry("refuses").status == "unavailable" and result.entry("refuses").reason == "no bf16 here"


def test_a_family_not_installed_is_unavailable(small_benchmarks):
    class Absent(FakeFamily):
        def missing(self, gpu=None):
            return "not installed: nothing"

    result = Bench("reference", FAST, [Absent("absent", lambda p: pytest.fail("built"))]).run(
        session_for(small_benchmarks))
    assert result.entry("absent").status == "unavailable" and result.entry("absent").reason == "not installed: nothing"


def test_no_baselines_for_an_unknown_stem_but_ours_and_the_floor(small_benchmarks):
    result = Bench("reference", FAST, NUMPY).run(session_for(small_benchmarks, "small_graph"))
    assert [e.name for e in result.entries] == ["ours"] and "small_graph" in result.baseline_note
    assert result.floor.bytes == 2 * 16 * 16 * 4


def test_our_wrong_result_fails_the_benchmark(small_benchmarks, monkeypatch):
    real = runner.reference_execute
    monkeypatch.setattr(runner, "reference_execute",
                        lambda *a: {k: (v + 1).astype(v.dtype) for k, v in real(*a).items()})
    result = Bench("cpu", FAST, NUMPY).run(driver.open_spec(small_benchmarks / "elementwise_f32.yaml", backend="cpu"))
    ours = result.entry("ours")
    assert result.check_passed is False and result.exit_code == 1
    assert ours.status == "wrong" and ours.measurement is not None  # timed, and flagged
    assert result.entry("numpy").status == "wrong"  # against the same (broken) reference


class FakeCudaExecutor:
    """Stands for a CudaExecutor: each execution takes 25 us on the fake device, 5 us of host time."""

    backend = "cuda"

    def __init__(self, clock, outputs):
        self.clock, self.outputs = clock, outputs
        self.stream = FakeStream()
        self.executions, self.syncs, self.closed = 0, 0, False

    def run(self, inputs, params, hooks):
        return self.outputs

    def execute(self, hooks):
        assert hooks is None  # host statements skipped, as in run's timing
        self.executions += 1
        self.clock.device_us += 25.0
        self.clock.host_s += 5e-6

    def synchronize(self):
        self.syncs += 1

    def close(self):
        self.closed = True


def test_the_cuda_path_of_a_benchmark_with_a_fake_executor_and_clock(small_benchmarks, monkeypatch):
    session = session_for(small_benchmarks)
    session.target = dataclasses.replace(session.target, backend="cuda")
    expected = reference_execute(session.pipeline, session.inputs, session.binding.params)
    clock = FakeClock()
    executor = FakeCudaExecutor(clock, expected)
    monkeypatch.setattr(runner, "make_executor", lambda s: executor)
    # no GPU here: the Python API path cannot be built, so the latency goes through the executor
    monkeypatch.setattr("cuvil_dsl.api.load", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("no GPU")))
    bench = Bench("cuda", FAST, [], clock_factory=lambda: clock)
    result = bench.run(session)
    ours = result.entry("ours")
    assert result.check_passed is True and result.exit_code == 0 and executor.closed
    assert ours.status == "ok" and ours.device == "gpu" and ours.measurement.clock == "fake-events"
    # 3 rounds of 2/3 ms at 25 us, each capped at 50 // 3 samples
    assert ours.median_us == 25.0 and ours.measurement.samples == 3 * (FAST.max_samples // 3)
    assert ours.measurement.rounds_us == (25.0, 25.0, 25.0)
    assert "through the executor" in ours.note and "no GPU" in ours.note
    assert executor.syncs == FAST.e2e_samples and ours.measurement.e2e_p50_us == pytest.approx(5.0)


def test_gpu_contenders_are_timed_in_interleaved_rounds(small_benchmarks):
    """Each GPU contender is checked first; then every round times each of them in turn, so a device
    that drifts (clocks, temperature, power) affects all of them alike, and each round's median is kept."""
    session = session_for(small_benchmarks)
    clock, order = FakeClock(), []
    want = expected_of(session).astype(np.float32)

    def contender(name, us):
        c = fake_gpu_contender(clock, name, itertools.repeat(us), want)
        launch = c.launch

        def logged():
            order.append(name)
            return launch()

        c.launch = logged
        return c

    families = [FakeFamily(n, lambda p, n=n, us=us: contender(n, us)) for n, us in (("a", 10.0), ("b", 20.0),
                                                                                  ("c", 30.0))]
    result = Bench("reference", FAST, families, clock_factory=lambda: clock).run(session)
    runs = [name for i, name in enumerate(order) if i == 0 or order[i - 1] != name]
    # the checks, then 3 rounds, each starting one contender later: none always first or after the same one
    assert "".join(runs) == "abc" + "abc" + "bca" + "cab"
    a, b = result.entry("a").measurement, result.entry("b").measurement
    assert a.rounds_us == (10.0,) * FAST.rounds and b.rounds_us == (20.0,) * FAST.rounds
    assert a.samples == b.samples == FAST.rounds * 16  # 2/3 ms a round, the cap of 50 split in three


def test_a_baseline_that_fails_in_a_later_round_is_an_error_and_keeps_no_time(small_benchmarks):
    session = session_for(small_benchmarks)
    clock = FakeClock()
    want = expected_of(session).astype(np.float32)
    durations = itertools.chain([5.0] * 30, iter(()))  # enough for the check and about one round, then fails
    flaky = fake_gpu_contender(clock, "flaky", durations, want)
    closed = []
    flaky.close = lambda: closed.append(1)
    result = Bench("reference", FAST, [FakeFamily("flaky", lambda p: flaky)], clock_factory=lambda: clock).run(session)
    entry = result.entry("flaky")
    assert entry.status == "error" and entry.measurement is None and "StopIteration" in entry.reason
    assert closed == [1] and result.exit_code == 0  # closed once; a baseline's failure is not ours


def test_one_round_times_as_before(small_benchmarks):
    session = session_for(small_benchmarks)
    clock = FakeClock()
    good = fake_gpu_contender(clock, "g", itertools.repeat(40.0), expected_of(session).astype(np.float32))
    settings = dataclasses.replace(FAST, rounds=1)
    result = Bench("reference", settings, [FakeFamily("g", lambda p: good)], clock_factory=lambda: clock).run(session)
    m = result.entry("g").measurement
    assert m.samples == 50 and m.rounds_us == ()  # the whole budget, capped at 50; no rounds to report
