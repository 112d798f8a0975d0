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


@pytest.mark.parametrize("spec", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.stem)
def test_example_spec_matches_the_reference_through_the_python_api(spec):
    """The same pipelines called as a user calls them, ``cuvil_dsl.load(...).compile(backend="cpu")``, on the spec's
    inputs and sizes: a CPU target has no architecture, and planning a GEMM once failed on that (a TypeError from
    every pipeline with ``@``)."""
    import cuvil_dsl
    from cuvil_dsl.check import compare
    from cuvil_dsl.reference import execute

    session = driver.open_spec(spec, backend="cpu")
    loaded, pipeline = session.loaded, session.pipeline
    compiled = cuvil_dsl.load(loaded.pipeline_path, entry=pipeline.name).compile(
        session.binding.sizes, backend="cpu", kernels=driver.kernel_overrides(loaded))
    tensors = [session.inputs[p.name] for p in pipeline.tensor_params]
    scalars = {p.name: session.binding.params[p.name] for p in pipeline.params if not p.is_tensor}
    got = compiled(*tensors, **scalars)
    got = got if isinstance(got, tuple) else (got,)
    want = execute(pipeline, session.inputs, session.binding.params)
    for r, out in zip(pipeline.results, got):
        rtol, atol = loaded.spec.check.tolerances(r.type.dtype, loaded.spec.target.tf32)
        comparison = compare(r.name, out, want[r.name], r.type.dtype, rtol, atol)
        assert comparison.passed, comparison.describe()
