"""The CuPy eager baseline: each benchmark as a chain of CuPy operations (one kernel or cuBLAS call each).

It is what a CuPy user writes without a fusing compiler: half inputs converted to float32 for the
reductions and transcendental functions (CuPy has no fused softmax or layernorm), matrix products
by cuBLAS in the input dtype. Work is queued on CuPy's current stream at build time, which the
timer records its events on.
"""

from __future__ import annotations

import math

import numpy as np

from cuvil_dsl.bench.baselines import NotApplicable, Problem
from cuvil_dsl.bench.contender import Contender
from cuvil_dsl.types import DType


def _softmax(cp, x, out_dtype):
    x = x.astype(cp.float32, copy=False) if x.dtype == cp.float16 else x
    e = cp.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(out_dtype, copy=False)


def function(cp, problem: Problem, erf=None):
    """The benchmark as a function of arrays of the module ``cp`` (CuPy; NumPy works too, which the
    tests use); ``erf`` defaults to ``cupyx.scipy.special.erf``."""
    out = np.dtype(problem.result_dtype.numpy)
    ct = problem.compute_dtype
    kind = problem.kind
    if kind == "elementwise_chain":
        return lambda x: cp.maximum(x * 1.5 + 0.25, 0) * 2 - 0.5
    if kind == "softmax":
        return lambda x: _softmax(cp, x, out)
    if kind == "layernorm":
        eps = ct.type(problem.eps)

        def layernorm(x, w, b):
            xf = x.astype(ct, copy=False)
            centred = xf - xf.mean(axis=-1, keepdims=True)
            var = (centred * centred).mean(axis=-1, keepdims=True)
            return (centred / cp.sqrt(var + eps) * w.astype(ct, copy=False) + b).astype(out, copy=False)

        return layernorm
    if kind == "gemm_bias_gelu":
        inv_sqrt2 = ct.type(1.0 / math.sqrt(2.0))
        if erf is None:
            from cupyx.scipy.special import erf

        def gemm_bias_gelu(a, b, bias):
            h = cp.matmul(a, b).astype(ct, copy=False) + bias
            return (0.5 * h * (1.0 + erf(h * inv_sqrt2))).astype(out, copy=False)

        return gemm_bias_gelu
    if kind == "attention_scores":
        scale = ct.type(problem.scale)
        return lambda q, k: _softmax(cp, cp.matmul(q, k.swapaxes(-1, -2)).astype(ct, copy=False) * scale, out)
    if kind == "attention":  # the probabilities stored in the operands' dtype, then cuBLAS again
        scale = ct.type(problem.scale)
        return lambda q, k, v: cp.matmul(
            _softmax(cp, cp.matmul(q, k.swapaxes(-1, -2)).astype(ct, copy=False) * scale, v.dtype), v).astype(out, copy=False)
    if kind == "attention_causal":  # the mask by a where, then as "attention"
        scale, fill = ct.type(problem.scale), ct.type(problem.fill)

        def attention_causal(q, k, v, qpos, kpos):
            s = cp.where(kpos <= qpos, cp.matmul(q, k.swapaxes(-1, -2)).astype(ct, copy=False) * scale, fill)
            return cp.matmul(_softmax(cp, s, v.dtype), v).astype(out, copy=False)

        return attention_causal
    raise NotApplicable(f"no CuPy baseline for `{kind}`")


def build(problem: Problem) -> Contender:
    import cupy as cp

    if problem.result_dtype is DType.BF16 or any(a.dtype.name == "bfloat16" for a in problem.inputs):
        raise NotApplicable("CuPy has no bfloat16")
    fn = function(cp, problem)
    arrays = [cp.asarray(a) for a in problem.inputs]
    stream = cp.cuda.get_current_stream()
    stream.synchronize()

    def close() -> None:
        arrays.clear()
        cp.get_default_memory_pool().free_all_blocks()

    return Contender("cupy", "CuPy", "gpu", lambda: fn(*arrays), fetch=lambda out: cp.asnumpy(out),
                     stream=stream, close=close)
