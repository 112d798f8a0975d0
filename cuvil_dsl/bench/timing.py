"""One timing method for every contender, so their numbers compare.

**Device time** (GPU contenders, :class:`GpuTimer`). Each sample is a pair of CUDA events recorded
on the stream the contender launches on, around one call of it. Before each sample a buffer of
twice the L2 size is cleared with a memset on that same stream, *outside* the event pair, so every
sample starts with a cold L2 (as ``triton.testing.do_bench`` does) and inputs smaller than the
cache are not timed from it. All samples are queued first and waited for once at the end, so the
device never idles waiting for the host between samples (the flush also keeps the host ahead).
The sample count follows a time budget (``Settings.budget_s`` of device time, at least
``min_samples``), estimated from three synchronised samples after the first call; a warm-up of
``warmup_s`` precedes the samples. Reported: the median and the spread (IQR / median).

**Interleaved rounds.** A benchmark's GPU contenders are timed in ``Settings.rounds`` rounds, ours and
each baseline in turn per round (each round starting one contender later), each round with its
share of the budget, samples and warm-up
(:meth:`Settings.per_round`); the rounds' samples are pooled (:func:`merge`) and each round's median
kept. Contenders timed one after the other meet the device in different states (clocks, temperature,
the power cap a GEMM runs into), so a difference of a percent between two of them can be the order
they ran in; a comparison that holds in every round does not depend on it. Also reported: the
interquartile mean (robust like the median, and not stuck on a clock's steps) and the smallest step
between distinct samples (the clock's resolution as seen: 0.032 us for CUDA events on an H200).

**End-to-end latency** is measured separately: the wall clock from the call to the end of a
device synchronisation (L2 flushed and device idle before each), median reported. It adds what a
caller pays and events do not show: Python, launch overhead, allocation of results.

**Host time** (NumPy, the cpu and reference backends, :class:`HostTimer`): ``perf_counter``
around each synchronous call after a warm-up, median and spread; a call's sample is also its
end-to-end latency.

The GPU primitives sit behind a *clock* object (:class:`CudaClock` here) so the method itself is
tested on machines without a GPU with a fake clock.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Settings:
    """How long and how often each contender is timed."""

    budget_s: float = 0.1  # timed work per contender (device time on the GPU, wall time on the host)
    min_samples: int = 20  # at least this many device samples, whatever the budget
    max_samples: int = 2000  # at most this many (tiny kernels would otherwise queue tens of thousands)
    warmup_s: float = 0.025  # warm-up work before the samples (at least one call)
    host_min_samples: int = 5  # host contenders: a NumPy call on GPU-sized data takes a second
    e2e_samples: int = 50  # end-to-end latency samples (each one synchronises the device)
    rounds: int = 3  # a benchmark's GPU contenders are timed in this many interleaved rounds

    @classmethod
    def quick(cls) -> "Settings":
        """``--quick``: a fifth of the budget and fewer samples, for a first look or a smoke test."""
        return cls(budget_s=0.02, min_samples=5, max_samples=400, warmup_s=0.005, host_min_samples=3, e2e_samples=10)

    def per_round(self) -> "Settings":
        """One round's share: the budget, the warm-up and the sample bounds divided by ``rounds``
        (the minimum rounded up, so the rounds together take at least the whole run's, the maximum
        down, so they take at most its)."""
        r = max(1, self.rounds)
        least = math.ceil(self.min_samples / r)
        return replace(self, budget_s=self.budget_s / r, warmup_s=self.warmup_s / r, min_samples=least,
                       max_samples=max(least, self.max_samples // r), e2e_samples=math.ceil(self.e2e_samples / r),
                       rounds=1)

    def count(self, estimate_us: float, minimum: int) -> int:
        """Samples that fit the budget at ``estimate_us`` each, within ``[minimum, max_samples]``."""
        fit = int(self.budget_s * 1e6 / max(estimate_us, 1e-3))
        return max(minimum, min(self.max_samples, fit))

    def warmups(self, estimate_us: float) -> int:
        return max(1, min(1000, int(self.warmup_s * 1e6 / max(estimate_us, 1e-3))))


@dataclass(frozen=True)
class Measurement:
    """The samples of one contender, in microseconds, and what measured them."""

    clock: str  # "cuda-events" | "host"
    samples_us: tuple[float, ...]
    e2e_us: tuple[float, ...] = ()
    rounds_us: tuple[float, ...] = ()  # each interleaved round's median, in order (empty: one round)

    def _quartiles(self) -> tuple[float, float, float]:
        q1, q2, q3 = np.percentile(np.asarray(self.samples_us, dtype=np.float64), [25, 50, 75])
        return float(q1), float(q2), float(q3)

    @property
    def samples(self) -> int:
        return len(self.samples_us)

    @property
    def median_us(self) -> float:
        return self._quartiles()[1] if self.samples_us else float("nan")

    @property
    def iqr_us(self) -> float:
        if not self.samples_us:
            return float("nan")
        q1, _, q3 = self._quartiles()
        return q3 - q1

    @property
    def spread(self) -> float:
        """IQR / median: the relative noise; two contenders closer than this are not told apart."""
        median = self.median_us
        return self.iqr_us / median if median > 0 else float("nan")

    @property
    def iqm_us(self) -> float:
        """The interquartile mean: the mean of the samples between the quartiles. As robust to
        outliers as the median, but not stuck on the clock's steps. Two samples have none between their
        (interpolated) quartiles: their mean, the median, stands for it."""
        if not self.samples_us:
            return float("nan")
        q1, q2, q3 = self._quartiles()
        values = np.asarray(self.samples_us, dtype=np.float64)
        inner = values[(values >= q1) & (values <= q3)]
        return float(inner.mean()) if inner.size else q2

    @property
    def step_us(self) -> float:
        """The smallest difference between two distinct samples: the clock's resolution as these
        samples show it (NaN with fewer than two distinct values)."""
        distinct = np.unique(np.asarray(self.samples_us, dtype=np.float64))
        return float(np.diff(distinct).min()) if distinct.size > 1 else float("nan")

    @property
    def e2e_p50_us(self) -> float:
        return float(np.median(self.e2e_us)) if self.e2e_us else float("nan")

    def to_json(self) -> dict:
        def num(value: float) -> float | None:
            return None if not np.isfinite(value) else round(float(value), 4)

        return {
            "clock": self.clock,
            "median_us": num(self.median_us),
            "iqm_us": num(self.iqm_us),
            "iqr_us": num(self.iqr_us),
            "spread": num(self.spread),
            "min_us": num(min(self.samples_us)) if self.samples_us else None,
            "samples": self.samples,
            "e2e_p50_us": num(self.e2e_p50_us),
            "e2e_samples": len(self.e2e_us),
            "step_us": num(self.step_us),
            "rounds_us": [num(r) for r in self.rounds_us],
        }


def merge(parts: list[Measurement]) -> Measurement:
    """The rounds of one contender as one measurement: samples and latencies pooled, each round's
    median kept in order."""
    if not parts:
        raise ValueError("no rounds to merge")
    if len(parts) == 1:
        return parts[0]
    return Measurement(parts[0].clock, tuple(v for p in parts for v in p.samples_us),
                       tuple(v for p in parts for v in p.e2e_us), tuple(p.median_us for p in parts))


class CudaClock:
    """CUDA events, the L2 flush and synchronisation through CuPy, on one device."""

    name = "cuda-events"

    def __init__(self, device: int = 0, flush_bytes: int | None = None):
        """``flush_bytes`` defaults to twice the device's L2 (62.9 MB on an H200: 126 MB)."""
        import cupy

        from cuvil_dsl.runtime.device import device_info

        self._cupy = cupy
        self.device = cupy.cuda.Device(device)
        nbytes = flush_bytes or 2 * max(device_info(device).l2_bytes, 1 << 20)
        with self.device:
            self._flush = cupy.empty(nbytes, dtype=cupy.uint8)

    @property
    def flush_bytes(self) -> int:
        return int(self._flush.nbytes)

    def event(self):
        return self._cupy.cuda.Event()

    def record(self, event, stream) -> None:
        event.record(stream)

    def flush(self, stream) -> None:
        """Clear the flush buffer on ``stream``: evicts whatever the L2 held (not timed: callers
        record their start event after this)."""
        self._cupy.cuda.runtime.memsetAsync(self._flush.data.ptr, 0, self._flush.nbytes, stream.ptr)

    def synchronize(self, stream) -> None:
        stream.synchronize()

    def synchronize_device(self) -> None:
        self.device.synchronize()

    def elapsed_us(self, start, end) -> float:
        return float(self._cupy.cuda.get_elapsed_time(start, end)) * 1e3

    @staticmethod
    def now() -> float:
        return time.perf_counter()

    def close(self) -> None:
        self._flush = None


class GpuTimer:
    """Device time of GPU contenders through a clock (see the module docstring for the method)."""

    ESTIMATE_SAMPLES = 3

    def __init__(self, clock, settings: Settings | None = None):
        self.clock = clock
        self.settings = settings or Settings()

    def _sample(self, launch: Callable[[], object], stream):
        """Queue one flushed, timed sample; returns its event pair."""
        clock = self.clock
        start, end = clock.event(), clock.event()
        clock.flush(stream)
        clock.record(start, stream)
        launch()
        clock.record(end, stream)
        return start, end

    def measure(self, launch: Callable[[], object], stream, call: Callable[[], object] | None = None) -> Measurement:
        """Time ``launch`` (which queues its work on ``stream``); ``call`` (default ``launch``) is
        what a user calls, for the end-to-end latency. ``launch`` must have run once already
        (compilation, autotuning and module loading are not part of any sample)."""
        clock, settings = self.clock, self.settings
        estimates = []
        for _ in range(self.ESTIMATE_SAMPLES):
            start, end = self._sample(launch, stream)
            clock.synchronize(stream)
            estimates.append(clock.elapsed_us(start, end))
        estimate = float(np.median(estimates))
        for _ in range(settings.warmups(estimate)):
            launch()
        pairs = [self._sample(launch, stream) for _ in range(settings.count(estimate, settings.min_samples))]
        clock.synchronize(stream)  # the only wait: every sample was queued before it
        samples = tuple(clock.elapsed_us(start, end) for start, end in pairs)
        e2e = self.latency(call or launch, stream, min(settings.e2e_samples, len(samples)))
        return Measurement(clock.name, samples, e2e)

    def latency(self, call: Callable[[], object], stream, count: int) -> tuple[float, ...]:
        """Wall clock of ``call`` plus a device synchronisation, each from a flushed, idle device."""
        clock = self.clock
        out = []
        for _ in range(count):
            clock.flush(stream)
            clock.synchronize_device()
            started = clock.now()
            call()
            clock.synchronize_device()
            out.append((clock.now() - started) * 1e6)
        return tuple(out)


class HostTimer:
    """``perf_counter`` around synchronous calls: NumPy, the cpu and reference backends."""

    name = "host"

    def __init__(self, settings: Settings | None = None, now: Callable[[], float] = time.perf_counter):
        self.settings = settings or Settings()
        self.now = now

    def _timed(self, launch: Callable[[], object]) -> float:
        started = self.now()
        launch()
        return (self.now() - started) * 1e6

    def measure(self, launch: Callable[[], object]) -> Measurement:
        """Warm up for ``warmup_s`` (at least one call), then sample within the budget."""
        settings = self.settings
        warm = [self._timed(launch)]
        while sum(warm) < settings.warmup_s * 1e6 and len(warm) < 1000:
            warm.append(self._timed(launch))
        count = settings.count(float(np.median(warm)), settings.host_min_samples)
        samples = tuple(self._timed(launch) for _ in range(count))
        return Measurement(self.name, samples, samples)
