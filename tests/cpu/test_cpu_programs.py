"""A compact table of programs covering every builtin, dtype and indexing case on the CPU backend.

Each program is compiled once (numba's compile time dominates) and compared with the float64
reference at the default tolerances; special values (NaN, infinities, i32 extremes, values
beyond the f16 range) are planted where the semantics are easy to get wrong.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from cpu_support import as_dtype, assert_matches_reference, build, random_inputs

from cuvil_dsl.diagnostics import RunFailure
from cuvil_dsl.reference.executor import HostHooks
from cuvil_dsl.types import DType

UNARY_BINARY = """
pipeline math_{dt}(x: {dt}[R, C], y: {dt}[R, C]) -> (a: {dt}[R, C], b: {dt}[R, C], c: {dt}[R, C], d: {dt}[R, C], q: {dt}[R, C]) {{
    pos = abs(x) + 0.5
    big = x + 1000
    q = big - 1000
    a = gelu(x) + gelu_tanh(x) + silu(x) + sigmoid(x) + tanh(x) + erf(x) + relu(x) + abs(-x)
    b = exp(x) + exp2(x) + log(pos) + log2(pos) + sqrt(pos) + rsqrt(pos) + sin(x) + cos(x) + pos ** y + x / pos
    c = maximum(x, y)
    d = minimum(x, y)
}}
"""


@pytest.mark.parametrize("dt", ["f16", "bf16", "f64"])
def test_every_elementwise_function_in_each_float_dtype(dt):
    sizes = {"R": 3, "C": 67}
    pipeline, ex = build(UNARY_BINARY.format(dt=dt), sizes)
    inputs = random_inputs(pipeline, sizes, seed=3)
    dtype = DType(dt)
    inputs["x"][0, :4] = as_dtype([np.nan, np.inf, -np.inf, 0.0], dtype)
    inputs["y"][1, :2] = as_dtype([np.nan, -np.inf], dtype)
    got = assert_matches_reference(pipeline, ex, inputs)
    for result in ("c", "d"):  # NaN on either side of maximum/minimum wins, as in NumPy
        assert np.isnan(got[result][:2, 0].astype(np.float32)).all()


INTS = """
pipeline ints(a: i32[N], b: i32[N], m: bool[N]) -> (c: i32[N], d: bool[N], e: f32[N], s: i32[1], hi: i32[1], lo: i32[1], up: bool[N]) {
    up = a + b > a
    c = where(m, abs(a) * b - (-a), relu(b - a) + maximum(a, b) * minimum(a, b))
    d = (a < b) & ~m | (a == b) | (a != 0) & (b >= a) & (a <= 3) & (b > -5)
    e = cast(c, f32) + cast(d, f32) + cast(m, f32)
    s = sum(c, axis=0, keepdims=true)
    hi = max(c, axis=0, keepdims=true)
    lo = min(c, axis=0, keepdims=true)
}
"""


def test_i32_wraps_and_bool_logic_selects_and_casts():
    sizes = {"N": 300}
    pipeline, ex = build(INTS, sizes)
    inputs = random_inputs(pipeline, sizes, seed=4)
    inputs["a"][:4] = [-(2**31), 2**31 - 1, 123456789, -7]
    inputs["b"][:4] = [3, 2**31 - 1, 98765, 0]
    inputs["m"][:4] = [True, False, True, False]
    assert_matches_reference(pipeline, ex, inputs)


CASTS = """
pipeline casts(x: f32[N], d: f64[N], i: i32[N], h: f16[N]) -> (xi: i32[N], dh: f16[N], db: bf16[N], ih: f16[N], ib: bf16[N], hb: bf16[N], xb: bool[N], bh: f16[N], hd: f64[N], xd: f64[N]) {
    xi = cast(x, i32)
    dh = cast(d, f16)
    db = cast(d, bf16)
    ih = cast(i, f16)
    ib = cast(i, bf16)
    hb = cast(h, bf16)
    xb = cast(x, bool)
    bh = cast(xb, f16) + h
    hd = cast(h, f64) * d
    xd = cast(x, f64)
}
"""


def test_casts_round_once_truncate_and_saturate():
    sizes = {"N": 16}
    pipeline, ex = build(CASTS, sizes)
    inputs = random_inputs(pipeline, sizes, seed=5)
    inputs["x"][:8] = [np.nan, np.inf, -np.inf, 3e9, -3e9, -2.7, 0.0, 2.5]
    inputs["d"][:6] = [1e6, -1e6, 1.0 + 2.0**-11 + 2.0**-40, 1.0 + 2.0**-8 + 2.0**-40, 1e-9, np.nan]
    inputs["i"][:5] = [70000, 16777217, -(2**31), 2049, 33]
    assert_matches_reference(pipeline, ex, inputs)


ROWS = """
pipeline rows(x: f16[A, B, C], v: f32[A, B, C]) -> (s0: f16[1, B, C], m1: f16[A, C], sm0: f16[A, B, C], ls1: f32[A, B, C], mx2: f32[A, B, 1], mn1: f32[A, 1, C], mean2: f16[A, B]) {
    s0 = sum(x, axis=0, keepdims=true)
    m1 = mean(x, axis=1)
    sm0 = softmax(x, axis=0)
    ls1 = log_softmax(v, axis=1)
    mx2 = max(v, axis=2, keepdims=true)
    mn1 = min(v, axis=1, keepdims=true)
    mean2 = mean(x * 2, axis=-1)
}
"""


def test_reductions_and_softmax_along_every_axis_with_keepdims_and_nan():
    sizes = {"A": 19, "B": 18, "C": 37}  # rows of several 8-lane chunks and a tail, strided and contiguous
    pipeline, ex = build(ROWS, sizes)
    inputs = random_inputs(pipeline, sizes, seed=6)
    inputs["v"][0, 0, 0] = np.nan
    got = assert_matches_reference(pipeline, ex, inputs)
    assert np.isnan(got["mx2"][0, 0, 0]) and np.isnan(got["mn1"][0, 0, 0]) and np.isnan(got["ls1"][0, :, 0]).all()


NORMS = """
pipeline norms(x: bf16[T, H], w: bf16[H], y: f64[T, H]) -> (a: bf16[T, H], b: bf16[T, H], c: f64[T, H], d: f64[T, H]) {
    a = layernorm(x, eps=1e-5) + layernorm(x, w)
    b = rmsnorm(x * 2, eps=1e-6) + rmsnorm(x, w)
    c = layernorm(y) * 0.5 + 1
    d = rmsnorm(y)
}
"""


def test_norms_with_and_without_weights_in_bf16_and_f64():
    sizes = {"T": 7, "H": 96}
    pipeline, ex = build(NORMS, sizes)
    assert_matches_reference(pipeline, ex, random_inputs(pipeline, sizes, seed=7))


MATMULS = """
pipeline mm(a: f32[G, M, K], b: f32[K, N], c: bf16[M, K], d: bf16[N, K], e: f64[M, K], f: f64[G, K, N], bias: f32[N], h: f16[G, 1, K, M], g: f16[G, M, K]) -> (y: f32[G, M, N], z: bf16[M, N], u: f64[G, M, N], p: f32[G, M, N], r: f16[G, G, K, K]) {
    y = a @ b + bias
    z = gelu(c @ d.T)
    u = e @ f
    p = softmax(a @ b * 0.5, axis=-1)
    r = h @ g
}
"""


def test_matmul_batches_broadcast_transposes_and_fused_epilogues():
    sizes = {"G": 3, "M": 5, "K": 8, "N": 6}
    pipeline, ex = build(MATMULS, sizes)
    assert {k.kind for k in ex.plan.kernels} == {"matmul", "matmul_softmax"}
    assert_matches_reference(pipeline, ex, random_inputs(pipeline, sizes, seed=8))


BROADCAST = """
pipeline bc(col: f16[R, 1], row: f16[1, C], t: f32[R, C], z: f32[1], alpha: f32 = 0.5, flag: bool = true) -> (o: f16[R, C], p: f32[R, C], q: f32[C, R], lo: f16[R, C]) {
    o = col * row - alpha
    p = where(flag, t * z, t.T.T - z)
    q = t.T * 2 + z
    lo = o + -1e9
}
"""


def test_broadcasting_transposes_and_scalar_parameters():
    sizes = {"R": 9, "C": 13}
    pipeline, ex = build(BROADCAST, sizes)
    inputs = random_inputs(pipeline, sizes, seed=9)
    got = assert_matches_reference(pipeline, ex, inputs)
    assert np.all(got["lo"] == -65504)  # -1e9 meets f16 saturated, not as -inf
    # a new scalar value is an argument, not a recompile: same kernels, new results
    modules = ex.sources()
    assert_matches_reference(pipeline, ex, inputs, {"alpha": -3.0, "flag": False})
    assert ex.sources() == modules


HOST = """
pipeline host(x: f32[R, C]) -> (y: f32[R, C], total: f32[R]) {
    graph first {
        h = exp(x)
    }
    sync
    print(h)
    assert_finite(h)
    graph second {
        y = h / sum(h, axis=1, keepdims=true)
        total = sum(y, axis=1)
    }
}
"""


def test_host_statements_run_between_graphs_with_several_results():
    sizes = {"R": 4, "C": 10}
    pipeline, ex = build(HOST, sizes)
    inputs = random_inputs(pipeline, sizes, seed=10)
    out = io.StringIO()
    assert_matches_reference(pipeline, ex, inputs, hooks=HostHooks(stream=out))
    assert out.getvalue().startswith("h: f32[4, 10] min=")
    inputs["x"][2, 3] = np.inf
    with pytest.raises(RunFailure, match=r"assert_finite\(h\) failed: 1 of 40"):
        ex.run(inputs, {}, HostHooks(stream=io.StringIO()))
    ex.run(inputs, {}, HostHooks(skip=True))  # timed executions skip host statements
