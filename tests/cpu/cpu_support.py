"""Helpers of the CPU backend tests: build a program once per process, make inputs, compare.

numba's compile time dominates these tests, so executors are built once per (source, sizes)
and shared by every test that asks for the same program.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np

from cuvil_dsl.check import compare, tolerances
from cuvil_dsl.frontend import check_source
from cuvil_dsl.ir.nodes import Pipeline
from cuvil_dsl.passes.fusion import plan_pipeline
from cuvil_dsl.reference.executor import execute
from cuvil_dsl.runtime.base import Target
from cuvil_dsl.runtime.cpu_executor import CpuExecutor
from cuvil_dsl.types import DType, concrete_shape

SPECS = Path(__file__).resolve().parents[2] / "specs"
_BUILT: dict[tuple, tuple[Pipeline, CpuExecutor]] = {}


def build(source: str, sizes: dict[str, int], fast_math: bool = False) -> tuple[Pipeline, CpuExecutor]:
    """The checked pipeline of ``source`` and its CPU executor for ``sizes`` (built once per process)."""
    key = (source, tuple(sorted(sizes.items())), fast_math)
    if key not in _BUILT:
        checked = check_source(source)
        assert checked.module is not None, [str(d) for d in checked.diagnostics]
        pipeline = checked.module.pipelines[0]
        plan, diags = plan_pipeline(pipeline)
        assert not [d for d in diags if d.is_error], diags
        _BUILT[key] = pipeline, CpuExecutor.build(pipeline, plan, sizes, Target("cpu", fast_math=fast_math))
    return _BUILT[key]


def random_inputs(pipeline: Pipeline, sizes: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Normal floats, small integers, random booleans, of each parameter's declared dtype."""
    rng = np.random.default_rng(seed)
    out = {}
    for p in pipeline.tensor_params:
        shape = concrete_shape(p.type.shape, sizes)
        dtype = p.type.dtype
        if dtype is DType.I32:
            out[p.name] = rng.integers(-20, 20, size=shape, dtype=np.int32)
        elif dtype is DType.BOOL:
            out[p.name] = rng.random(shape) < 0.5
        else:
            out[p.name] = rng.normal(size=shape).astype(dtype.numpy)
    return out


def as_dtype(values, dtype: DType) -> np.ndarray:
    """Python numbers as an array of ``dtype`` (bf16 through ml_dtypes)."""
    return np.asarray(values, dtype=np.float64).astype(ml_dtypes.bfloat16 if dtype is DType.BF16 else dtype.numpy)


def assert_matches_reference(pipeline: Pipeline, executor: CpuExecutor, inputs: dict[str, np.ndarray],
                             params: dict | None = None, hooks=None) -> dict[str, np.ndarray]:
    """Run on the CPU and check every result against the float64 reference with the default tolerances."""
    params = params or {}
    got = executor.run(inputs, params, hooks)
    resolved = {p.name: params.get(p.name, p.default) for p in pipeline.scalar_params}
    expected = execute(pipeline, inputs, resolved)
    problems = []
    for res in pipeline.results:
        rtol, atol = tolerances(res.type.dtype, None, None)
        c = compare(res.name, got[res.name], expected[res.name], res.type.dtype, rtol, atol)
        if not c.passed:
            problems.append(c.describe())
    assert not problems, "\n".join(problems)
    return got
