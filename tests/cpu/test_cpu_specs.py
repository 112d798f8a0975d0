"""Every example spec runs on the CPU backend and matches the float64 reference."""

from __future__ import annotations

import pytest
from cpu_support import SPECS

from cuvil_dsl import driver
from cuvil_dsl.passes.fusion import plan_pipeline
from cuvil_dsl.runtime.cpu_executor import CpuExecutor


def _executor(session: driver.Session) -> CpuExecutor:
    """What ``driver.make_executor`` builds for the cpu backend (built here because the driver
    imports ``plan_pipeline`` from ``cuvil_dsl.passes``, which does not export it yet)."""
    plan, diags = plan_pipeline(session.pipeline, driver.kernel_overrides(session.loaded), "sm_90")
    assert not [d for d in diags if d.is_error]
    return CpuExecutor.build(session.pipeline, plan, session.binding.sizes, session.target)


@pytest.mark.parametrize("spec", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_example_spec_matches_the_reference_on_the_cpu(spec, capsys):
    session = driver.open_spec(spec, backend="cpu")
    executor = _executor(session)
    try:
        report = driver.execute(session, iterations=1, executor=executor)
    finally:
        executor.close()
    assert report.failure is None
    assert report.check_passed is True, "\n".join(c.describe() for c in report.comparisons)
    assert report.snapshot is not None and not report.snapshot.damaged_guards()
    assert report.timing is not None and report.timing.iterations == 1
    assert all(k.compile_ms is not None for k in report.kernels)
