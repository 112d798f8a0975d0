"""Fixtures for the regression-harness tests: small recorded cases and executor wrappers.

Cases are recorded on the reference backend from the example specs at small sizes, so every
test runs in a fraction of a second without a GPU. Faults (a slow pipeline, a nondeterministic
kernel, a damaged guard band, changed generated code) are injected by wrapping the executor the
driver builds, exactly where a real backend would misbehave.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from cuvil_dsl import driver
from cuvil_dsl.runtime.base import Executor
from cuvil_dsl.testing.record import record_case

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


@pytest.fixture
def wrap_executor(monkeypatch) -> Callable[[type[WrappedExecutor]], None]:
    """``wrap_executor(Cls)``: from now on the driver builds ``Cls(real executor)``."""
    real = driver.make_executor

    def install(cls: type[WrappedExecutor]) -> None:
        monkeypatch.setattr(driver, "make_executor", lambda session: cls(real(session)))

    return install


def write_spec(folder: Path, budget: str = "{backend: reference, regress_pct: 10}") -> Path:
    """A copy of the softmax example at 16 x 32, with a budget judged on the reference backend."""
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


@pytest.fixture
def spec_path(tmp_path) -> Path:
    return write_spec(tmp_path / "src")


@pytest.fixture
def case_dir(tmp_path, spec_path) -> Path:
    """A freshly recorded small softmax case on the reference backend."""
    out = tmp_path / "regression" / "reference" / "small_softmax"
    record_case(spec_path, out, backend="reference")
    return out


def add_noise(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every float result nudged by one unit in the last place, as a racy reduction would."""
    return {name: np.nextafter(a, np.inf, dtype=a.dtype) if a.dtype.kind == "f" else a
            for name, a in outputs.items()}
