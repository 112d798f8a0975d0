"""Helpers for the regression-harness tests: small specs and executor wrappers.

Cases are recorded on the reference backend from the example specs at small sizes, so every
test runs in a fraction of a second without a GPU. Faults (a slow pipeline, a nondeterministic
kernel, a damaged guard band, changed generated code) are injected by wrapping the executor the
driver builds, exactly where a real backend would misbehave.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from cuvil_dsl.runtime.base import Executor, Timing

SPECS = Path(__file__).resolve().parents[2] / "specs"


class WrappedExecutor(Executor):
    """Delegates everything to a real executor; tests override the one method they break."""

    def __init__(self, inner: Executor):
        self.inner = inner
        self.backend = inner.backend
        self.runs = 0

    def run(self, inputs, params, hooks=None):
        self.runs += 1
        return self.inner.run(inputs, params, hooks)

    def time(self, warmup, iterations):
        return self.inner.time(warmup, iterations)

    def snapshot(self):
        return self.inner.snapshot()

    def kernel_reports(self):
        return self.inner.kernel_reports()

    def sources(self):
        return self.inner.sources()

    def toolchain(self):
        return self.inner.toolchain()

    def close(self):
        self.inner.close()


class SteadyClock(WrappedExecutor):
    """Times from a perfectly quiet machine: 100 us per execution, +-1 us, so verdicts are exact."""

    factor = 1.0

    def time(self, warmup, iterations):
        self.inner.time(0, 1)  # still executes, as a real timing would
        return Timing(tuple(self.factor * (100.0 + (i % 3) - 1) for i in range(iterations)))


def write_spec(folder: Path, budget: str = "{backend: reference}") -> Path:
    """A copy of the softmax example at 16 x 32, with a budget judged on the reference backend.

    No ``regress_pct`` by default: real timings on a shared test machine drift between a recording
    and its replay, so tests that judge time use :class:`SteadyClock` timings instead."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(SPECS / "softmax.cuvil", folder / "softmax.cuvil")
    spec = folder / "small_softmax.yaml"
    spec.write_text(
        "# small_softmax.yaml: the softmax example, small\n"
        "pipeline: softmax.cuvil\n"
        "shapes: {R: 16, C: 32}\n"
        "inputs:\n  x: {init: normal, std: 2.0, seed: 7}\n"
        "run: {warmup: 1, iterations: 5}\n"
        f"budget: {budget}\n"
    )
    return spec


def add_noise(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every float result nudged by one unit in the last place, as a racy reduction would."""
    return {name: np.nextafter(a, np.inf, dtype=a.dtype) if a.dtype.kind == "f" else a
            for name, a in outputs.items()}
