"""The CPU executor's arena, snapshots, guard bands, timing and reports."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_support import build, random_inputs

from cuvil_dsl.diagnostics import InternalError, RunFailure
from cuvil_dsl.runtime.reference_executor import ReferenceExecutor

# no intermediates: the arena holds exactly what the reference's does
DIRECT = """
pipeline direct(x: f16[R, C], w: bf16[C], m: bool[R, C]) -> (y: f16[R, C], n: i32[R, 1]) {
    y = where(m, x * cast(w, f16), 0)
    n = sum(cast(m, i32), axis=-1, keepdims=true)
}
"""
# an intermediate between two kernels of different row axes
STAGED = """
pipeline staged(x: f32[R, C]) -> (y: f32[R, C], z: f32[1, C]) {
    h = softmax(x, axis=-1)
    y = h * 2
    z = sum(h, axis=0, keepdims=true)
}
"""
SIZES = {"R": 7, "C": 33}


def _layout(snapshot):
    return [(b.name, b.role, b.dtype, b.shape, b.offset, b.nbytes) for b in snapshot.buffers]


def test_snapshot_layout_equals_the_reference_backends():
    pipeline, ex = build(DIRECT, SIZES)
    inputs = random_inputs(pipeline, SIZES, seed=11)
    ex.run(inputs, {})
    reference = ReferenceExecutor(pipeline, SIZES)
    reference.run(inputs, {})
    ours, theirs = ex.snapshot(), reference.snapshot()
    assert ours.backend == "cpu" and (ours.alignment, ours.guard_bytes) == (theirs.alignment, theirs.guard_bytes)
    assert _layout(ours) == _layout(theirs)
    digests = {b.name: b.digest for b in theirs.buffers if b.role == "input"}
    assert {b.name: b.digest for b in ours.buffers if b.role == "input"} == digests
    assert not ours.damaged_guards()


def test_intermediates_live_in_the_arena_and_inputs_and_results_keep_the_reference_layout():
    pipeline, ex = build(STAGED, SIZES)
    inputs = random_inputs(pipeline, SIZES, seed=12)
    ex.run(inputs, {})
    assert [k.kind for k in ex.plan.kernels] == ["row", "reduce"]
    reference = ReferenceExecutor(pipeline, SIZES)
    reference.run(inputs, {})
    ours = ex.snapshot()
    assert [(b.name, b.role) for b in ours.buffers] == [("x", "input"), ("h", "intermediate"), ("y", "result"),
                                                         ("z", "result")]

    def outside(snapshot):  # what the harness compares across backends: no intermediates, no offsets
        return {b.name: (b.role, b.dtype, b.shape, b.nbytes) for b in snapshot.buffers if b.role != "intermediate"}

    assert outside(ours) == outside(reference.snapshot())


def test_a_write_past_a_buffer_damages_its_guard_band_and_fails_the_run():
    pipeline, ex = build(STAGED, SIZES)
    inputs = random_inputs(pipeline, SIZES, seed=13)
    ex.run(inputs, {})
    slot = ex.layout.slot("y")
    ex.arena._bytes[slot.end] ^= 0xFF  # what a kernel writing one byte past `y` would leave
    assert ex.check_guards() == ["y"] and ex.snapshot().damaged_guards() == ["y"]
    with pytest.raises(RunFailure, match=r"guard bands damaged around `y`[\s\S]*kernel `main_k1` writes `y`"):
        ex.run(inputs, {})
    ex.arena._bytes[slot.end] ^= 0xFF
    assert ex.check_guards() == []


def test_time_reports_each_execution_and_needs_a_run_first():
    pipeline, ex = build(DIRECT, {"R": 3, "C": 5})  # a fresh executor: nothing run yet
    with pytest.raises(InternalError, match="needs a run"):
        ex.time(0, 1)
    ex.run(random_inputs(pipeline, {"R": 3, "C": 5}), {})
    timing = ex.time(warmup=1, iterations=4)
    assert timing.iterations == 4 and all(s > 0 for s in timing.samples_us)


def test_reports_sources_and_toolchain():
    pipeline, ex = build(STAGED, SIZES)
    reports = ex.kernel_reports()
    assert [r.name for r in reports] == ["main_k1", "main_k2"]
    assert all(r.registers is None and r.spill_bytes is None and r.compile_ms >= 0 for r in reports)
    assert all(isinstance(r.cache_hit, bool) and r.compiler.startswith("numba ") for r in reports)
    sources = ex.sources()
    assert sorted(sources) == ["cvl_main_k1.py", "cvl_main_k2.py"]
    assert "def cvl_main_k1(" in sources["cvl_main_k1.py"]
    tool = ex.toolchain()
    assert tool["backend"] == "cpu" and tool["numpy"] == np.__version__
    assert {"numba", "llvmlite", "cpu", "threads"} <= set(tool)
