"""Which baselines exist for a spec, which are installed here, and whether one computes our result.

A baseline is keyed by *what the pipeline computes* (a kind: ``softmax``, ``gemm_bias_gelu``, ...),
and a spec is matched to a kind by its file's stem (``benchmarks/softmax_f16.yaml`` -> ``softmax``), or by
the stem's part before a ``-`` (``benchmarks/shapes/softmax_f16-long.yaml``: the same pipeline at other shapes).
Matching by name rather than by pattern-matching the IR keeps this honest in one direction only,
so the other direction is checked: every baseline's output is compared with our float64 reference
with the spec's tolerances before it is timed, and a baseline that computes something else is
reported as wrong, never timed. A spec with no known kind still benchmarks ours and the roofline.

Families (one implementation module each, imported only when used, so a missing package costs
nothing): ``cupy`` (CuPy eager), ``torch`` (PyTorch eager), ``torch_compile``, ``triton``
(hand-written kernels, :mod:`~cuvil_dsl.bench.impl_triton`) and ``numpy`` (on the host).
Every baseline gets the same input values as ours: the spec's inputs, moved to its device.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from cuvil_dsl.check import Comparison, compare
from cuvil_dsl.types import DType

if TYPE_CHECKING:
    from cuvil_dsl.bench.contender import Contender
    from cuvil_dsl.driver import Session

# What a pipeline computes -> how many tensor parameters it takes (in declaration order).
KINDS: dict[str, int] = {
    "elementwise_chain": 1,  # y = relu(x * 1.5 + 0.25) * 2 - 0.5
    "softmax": 1,  # y = softmax(x, axis=-1)
    "layernorm": 3,  # y = layernorm(x, w, b, eps) over the last axis
    "gemm_bias_gelu": 3,  # y = gelu(a @ b + bias), erf GELU
    "attention_scores": 2,  # p = softmax(q @ k^T * scale, axis=-1)
    "attention": 3,  # o = softmax(q @ k^T * scale, axis=-1) @ v
    # o = softmax(where(kpos <= qpos, q @ k^T * scale, fill), axis=-1) @ v, the positions qpos [M, 1] and kpos [1, N]
    # given as data (a causal mask when both count 0, 1, 2, ...)
    "attention_causal": 5,
}

# Spec file stem -> kind: the benchmarks (benchmarks/*.yaml) and their small examples (specs/).
STEMS: dict[str, str] = {
    "elementwise_f32": "elementwise_chain",
    "elementwise_chain": "elementwise_chain",
    "softmax_f16": "softmax",
    "softmax_f32": "softmax",
    "softmax": "softmax",
    "layernorm_f16": "layernorm",
    "layernorm": "layernorm",
    "gemm_gelu_f16": "gemm_bias_gelu",
    "gemm_bias_gelu": "gemm_bias_gelu",
    "attention_f16": "attention_scores",
    "attention_scores": "attention_scores",
    "attention_full_f16": "attention",
    "attention_full_f16-causal": "attention_causal",
    "attention_causal": "attention_causal",
}


def kind_of(stem: str) -> str | None:
    """The kind a spec file's stem names: a known stem, or a known stem and ``-`` and a variant's label."""
    return STEMS.get(stem) or STEMS.get(stem.split("-", 1)[0])


class NotApplicable(Exception):
    """A baseline cannot compute this instance (a shape or dtype it does not handle)."""


@dataclass(frozen=True)
class Problem:
    """One benchmark instance as the baselines see it."""

    kind: str
    inputs: tuple[np.ndarray, ...]  # host arrays of the declared dtypes, in parameter order
    result: str  # the result's name
    result_dtype: DType
    scale: float = 0.125  # attention_scores, attention: the logits' scale (the `scale` parameter, else 0.125)
    eps: float = 1e-5  # layernorm: from the pipeline's layernorm op
    fill: float = float("-inf")  # attention_causal: the masked logits' value (the where's third operand)

    @property
    def compute_dtype(self) -> np.dtype:
        """Half types are computed in float32 by every baseline, as by our kernels."""
        return np.dtype(self.result_dtype.compute.numpy)


def problem_for(session: "Session") -> tuple[Problem | None, str]:
    """The baseline problem of an opened spec, or None and why there is none."""
    stem = Path(session.loaded.file).stem
    kind = kind_of(stem)
    if kind is None:
        return None, f"no baseline known for `{stem}` (known: {', '.join(sorted(STEMS))})"
    pipeline = session.pipeline
    tensors = pipeline.tensor_params
    if len(tensors) != KINDS[kind] or len(pipeline.results) != 1:
        return None, (f"`{stem}` is matched to `{kind}`, which takes {KINDS[kind]} tensor(s) and gives one result; "
                      f"pipeline `{pipeline.name}` takes {len(tensors)} and gives {len(pipeline.results)}")
    eps = next((float(op.attr("eps")) for op in pipeline.ops() if op.op == "layernorm" and op.attr("eps") is not None),
               1e-5)
    fill = float("-inf")
    if kind == "attention_causal":
        where = next((op for op in pipeline.ops() if op.op == "where"), None)
        folded = None if where is None else constant_value(pipeline, where.args[2])
        if folded is None:
            return None, (f"`{stem}` is matched to `{kind}`, whose masked logits are a constant: pipeline "
                          f"`{pipeline.name}` has no `where(mask, logits, constant)`")
        fill = folded
    result = pipeline.results[0]
    problem = Problem(kind, tuple(session.inputs[p.name] for p in tensors), result.name, result.type.dtype,
                      scale=float(session.binding.params.get("scale", 0.125)), eps=eps, fill=fill)
    return problem, ""


def constant_value(pipeline, value: str) -> float | None:
    """``value`` of ``pipeline`` when it is computed from literals alone (no parameter), in the reference's
    semantics (a ``to_tensor`` rounds, saturating, to its dtype), else None."""
    from cuvil_dsl.ir.nodes import ancestors
    from cuvil_dsl.reference.executor import evaluate

    ops = {op.out: op for op in pipeline.ops()}
    if any(v not in ops for v in ancestors(ops, value)):
        return None  # read from memory
    result = np.asarray(evaluate(pipeline, value, {}, {}))
    return float(result) if result.size == 1 else None


@dataclass(frozen=True)
class Family:
    """One kind of baseline: where it runs, what it needs, where its implementation lives."""

    name: str
    label: str
    device: str  # "gpu" | "host"
    needs: tuple[str, ...]  # importable packages
    module: str
    builder: str

    def missing(self, gpu: Callable[[], bool] | None = None) -> str | None:
        """Why this family cannot run here (a package not installed, no GPU), or None."""
        absent = [name for name in self.needs if importlib.util.find_spec(name) is None]
        if absent:
            return f"not installed: {', '.join(absent)}"
        if self.device == "gpu":
            from cuvil_dsl.runtime.device import gpu_available

            if not (gpu or gpu_available)():
                return "no GPU here"
        return None

    def build(self, problem: Problem) -> "Contender":
        """A contender for ``problem`` (its inputs already on the device); NotApplicable if it cannot."""
        return getattr(importlib.import_module(self.module), self.builder)(problem)


FAMILIES: tuple[Family, ...] = (
    Family("cupy", "CuPy", "gpu", ("cupy",), "cuvil_dsl.bench.impl_cupy", "build"),
    Family("torch", "PyTorch", "gpu", ("torch",), "cuvil_dsl.bench.impl_torch", "build_eager"),
    Family("torch_compile", "torch.compile", "gpu", ("torch", "triton"), "cuvil_dsl.bench.impl_torch",
           "build_compiled"),
    Family("triton", "Triton", "gpu", ("torch", "triton"), "cuvil_dsl.bench.impl_triton", "build"),
    Family("numpy", "NumPy", "host", ("numpy",), "cuvil_dsl.bench.impl_numpy", "build"),
)
ALIASES = {"torch.compile": "torch_compile", "torch-compile": "torch_compile", "compile": "torch_compile",
           "pytorch": "torch", "np": "numpy"}


def select(option: str, backend: str, families: tuple[Family, ...] = FAMILIES) -> list[Family]:
    """The families ``--baselines`` asks for.

    ``auto`` (the default): those on the same kind of device as ours (GPU baselines for ``cuda``,
    NumPy for ``cpu`` and ``reference``); ``all``: every family; ``none``; or a comma list of names.
    Raises ValueError naming an unknown one.
    """
    option = option.strip().lower()
    if option == "none":
        return []
    if option == "all":
        return list(families)
    if option == "auto":
        device = "gpu" if backend == "cuda" else "host"
        return [f for f in families if f.device == device]
    by_name = {f.name: f for f in families}
    chosen: list[Family] = []
    for word in filter(None, (w.strip() for w in option.split(","))):
        name = ALIASES.get(word, word)
        if name not in by_name:
            raise ValueError(f"unknown baseline `{word}`; expected all, none, auto or some of: {', '.join(by_name)}")
        if by_name[name] not in chosen:
            chosen.append(by_name[name])
    return chosen


def check_output(name: str, output: np.ndarray, expected: np.ndarray, dtype: DType, rtol: float,
                 atol: float) -> Comparison:
    """A baseline's result against our reference, by the rule our own results are judged by."""
    out = np.asarray(output)
    if out.dtype.kind == "V" or out.dtype.name == "bfloat16":
        out = out.astype(np.float32)
    return compare(name, out, expected, dtype, rtol, atol)
