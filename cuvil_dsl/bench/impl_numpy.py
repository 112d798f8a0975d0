"""The host baseline: each benchmark as a NumPy user would write it.

Half-precision inputs are converted to float32 inside the call (NumPy has no fast half
arithmetic, and a NumPy user holding f16 data pays that conversion), the result is rounded to the
declared dtype at the end. NumPy has no erf, so GELU uses the reference's (libm's erf, vectorised).
"""

from __future__ import annotations

import math

import numpy as np

from cuvil_dsl.bench.baselines import NotApplicable, Problem
from cuvil_dsl.bench.contender import Contender


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    e /= e.sum(axis=-1, keepdims=True)
    return e


def _gelu(h: np.ndarray) -> np.ndarray:
    from cuvil_dsl.reference._special import erf

    return (0.5 * h * (1.0 + erf(h * (1.0 / math.sqrt(2.0))))).astype(h.dtype, copy=False)


def _elementwise_chain(x):
    return np.maximum(x * 1.5 + 0.25, 0) * 2 - 0.5


def _layernorm(x, w, b, eps):
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + eps) * w + b


def _attention_scores(q, k, scale):
    return _softmax(np.matmul(q, np.swapaxes(k, -1, -2)) * scale)


def compute(problem: Problem, *arrays: np.ndarray) -> np.ndarray:
    """The benchmark's result from host arrays, in ``problem.compute_dtype``, rounded to the result dtype."""
    ct = problem.compute_dtype
    args = [a.astype(ct, copy=False) for a in arrays]
    if problem.kind == "elementwise_chain":
        y = _elementwise_chain(*args)
    elif problem.kind == "softmax":
        y = _softmax(*args)
    elif problem.kind == "layernorm":
        y = _layernorm(*args, ct.type(problem.eps))
    elif problem.kind == "gemm_bias_gelu":
        a, b, bias = args
        y = _gelu(np.matmul(a, b) + bias)
    elif problem.kind == "attention_scores":
        y = _attention_scores(*args, ct.type(problem.scale))
    elif problem.kind == "attention":
        q, k, v = args
        y = np.matmul(_attention_scores(q, k, ct.type(problem.scale)), v)
    elif problem.kind == "attention_causal":
        q, k, v, qpos, kpos = args
        s = np.where(kpos <= qpos, np.matmul(q, np.swapaxes(k, -1, -2)) * ct.type(problem.scale), ct.type(problem.fill))
        y = np.matmul(_softmax(s), v)
    else:
        raise NotApplicable(f"no NumPy baseline for `{problem.kind}`")
    return y.astype(problem.result_dtype.numpy, copy=False)


def build(problem: Problem) -> Contender:
    arrays = problem.inputs

    def launch():
        return compute(problem, *arrays)

    return Contender("numpy", "NumPy", "host", launch)
