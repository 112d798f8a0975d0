"""Every example spec runs on the CPU backend (through the driver, as ``cuvil-dsl run`` does) and
matches the float64 reference."""

from __future__ import annotations

import pytest
from cpu_support import SPECS

from cuvil_dsl import driver


@pytest.mark.parametrize("spec", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_example_spec_matches_the_reference_on_the_cpu(spec):
    session = driver.open_spec(spec, backend="cpu")
    report = driver.execute(session, iterations=1)
    assert report.failure is None
    assert report.check_passed is True, "\n".join(c.describe() for c in report.comparisons)
    assert report.snapshot is not None and not report.snapshot.damaged_guards()
    assert report.timing is not None and report.timing.iterations == 1
    assert report.kernels and all(k.compile_ms is not None for k in report.kernels)
