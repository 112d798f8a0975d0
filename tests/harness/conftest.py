"""Fixtures for the regression-harness tests (the helpers they use are in harness_support)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from harness_support import WrappedExecutor, write_spec

from cuvil_dsl import driver
from cuvil_dsl.testing.record import record_case


@pytest.fixture
def wrap_executor(monkeypatch) -> Callable[[type[WrappedExecutor]], None]:
    """``wrap_executor(Cls)``: from now on the driver builds ``Cls(real executor)``."""
    real = driver.make_executor

    def install(cls: type[WrappedExecutor]) -> None:
        monkeypatch.setattr(driver, "make_executor", lambda session: cls(real(session)))

    return install


@pytest.fixture
def spec_path(tmp_path) -> Path:
    return write_spec(tmp_path / "src")


@pytest.fixture
def case_dir(tmp_path, spec_path) -> Path:
    """A freshly recorded small softmax case on the reference backend."""
    out = tmp_path / "regression" / "reference" / "small_softmax"
    record_case(spec_path, out, backend="reference")
    return out
