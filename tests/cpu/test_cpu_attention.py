"""Fused attention (``softmax(q @ k.T * c) @ v``, one ``attention`` kernel) on the CPU backend against the
float64 reference: the test programs the GPU runs too, fresh random inputs, and rows that are all
``-inf``, hold a NaN or a ``+inf`` (NaN rows, as NumPy gives)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from cpu_support import as_dtype, assert_matches_reference, build, random_inputs

from cuvil_dsl import driver
from cuvil_dsl.passes import plan_pipeline
from cuvil_dsl.types import DType

PROGRAMS = Path(__file__).resolve().parents[1] / "codegen" / "programs"


@pytest.mark.parametrize("stem", ["attention_fused", "attention_fused_bf16", "attention_fused_deep"])
def test_attention_programs_match_the_reference(stem):
    session = driver.open_spec(PROGRAMS / f"{stem}.yaml", backend="cpu")
    plan, _ = plan_pipeline(session.pipeline, dict(session.spec.kernels))
    assert plan.kernels[-1].kind == "attention"
    report = driver.execute(session, iterations=1)
    assert report.failure is None
    assert report.check_passed is True, "\n".join(c.describe() for c in report.comparisons)
    assert report.snapshot is not None and not report.snapshot.damaged_guards()


MASKED = """
pipeline masked_{dt}(q: {dt}[B, M, D], k: {dt}[B, N, D], v: {dt}[N, E], bias: {dt}[M, N]) -> o: {dt}[B, M, E] {{
    o = softmax(q @ k.T * 0.2 + bias) @ v
}}
"""


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_fresh_inputs_and_special_rows(dt):
    sizes = {"B": 2, "M": 9, "N": 37, "D": 24, "E": 20}
    pipeline, ex = build(MASKED.format(dt=dt), sizes)
    assert [k.kind for k in ex.plan.kernels] == ["attention"]
    seed = int.from_bytes(os.urandom(4), "little")
    inputs = random_inputs(pipeline, sizes, seed=seed)
    dtype = DType(dt)
    inputs["bias"][1, :] = as_dtype([-np.inf] * sizes["N"], dtype)  # every score -inf: 0 / 0
    inputs["bias"][2, 5] = as_dtype([np.nan], dtype)[0]
    inputs["bias"][3, 7] = as_dtype([np.inf], dtype)[0]  # inf - inf in the softmax
    inputs["bias"][4, ::2] = as_dtype([-np.inf] * len(range(0, sizes["N"], 2)), dtype)  # half the keys masked
    try:
        got = assert_matches_reference(pipeline, ex, inputs)
    except AssertionError as exc:
        raise AssertionError(f"inputs of seed {seed}: {exc}") from None
    o = got["o"].astype(np.float64)
    assert np.isnan(o[:, 1:4]).all() and np.isfinite(o[:, [0, 4, 5]]).all()


WINDOW = """
pipeline window(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], qpos: i32[M, 1],
                kpos: i32[1, N]) -> o: f16[B, M, D] {
    o = softmax(where((kpos <= qpos) & (kpos > qpos - 8), q @ k.T * 0.125, -30000.0)) @ v
}
"""


def test_a_window_mask_computed_in_the_kernel_matches_the_reference():
    """A sliding window of 8 keys (``kpos <= qpos`` and ``kpos > qpos - 8``): the planner computes the whole mask,
    ``qpos - 8`` included, inside the attention kernel; on fresh inputs and out-of-order positions (rows before
    every key: masked whole, uniform over the fill) it matches the reference."""
    sizes = {"B": 2, "M": 21, "N": 37, "D": 16}
    pipeline, ex = build(WINDOW, sizes)
    (k,) = ex.plan.kernels
    assert k.kind == "attention" and set(k.inputs) == {"q", "k", "v", "qpos", "kpos"}
    seed = int.from_bytes(os.urandom(4), "little")
    inputs = random_inputs(pipeline, sizes, seed=seed)
    rng = np.random.default_rng(seed)
    inputs["qpos"] = (np.arange(sizes["M"], dtype=np.int32)[:, None] + 10)
    inputs["qpos"][3] = -5  # before every key
    inputs["kpos"] = rng.permutation(sizes["N"]).astype(np.int32)[None, :]
    try:
        assert_matches_reference(pipeline, ex, inputs)
    except AssertionError as exc:
        raise AssertionError(f"inputs of seed {seed}: {exc}") from None
