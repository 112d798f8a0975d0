"""Every example spec runs through the float64 reference and its result is of the declared kind."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl import driver

SPECS = sorted((Path(__file__).resolve().parents[1] / "specs").glob("*.yaml"))


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_example_runs_on_the_reference(spec):
    session = driver.open_spec(spec, backend="reference")
    report = driver.execute(session, iterations=1)
    assert report.exit_code == 0, report.failure or report.diagnostics
    for res in session.pipeline.results:
        out = report.outputs[res.name]
        assert out.dtype == res.type.dtype.numpy
        assert out.shape == session.binding.shapes[res.name]
        if out.dtype.kind == "f" or out.dtype.name == "bfloat16":
            assert np.isfinite(out.astype(np.float32)).any()
