"""PyTorch baselines: eager (the library's own kernels) and ``torch.compile`` (Inductor's fusion).

Each benchmark is the one-liner a PyTorch user writes (``torch.softmax``, ``F.layer_norm``,
``F.gelu(torch.addmm(...))``; for attention eager runs ``F.scaled_dot_product_attention``, PyTorch's fused
kernel, with ``is_causal`` where the mask is causal, and ``torch.compile`` the expression as written).
Work goes to PyTorch's current stream; the timer records its events and flushes on a CuPy wrapper of that
same stream. ``torch.compile`` is called with ``dynamic=False`` and Dynamo is reset when the contender
closes: the benchmarks share one function body, and Dynamo would otherwise recompile it per shape, then
fall back to eager at its cache limit, or compile it for dynamic shapes.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from cuvil_dsl.bench.baselines import NotApplicable, Problem
from cuvil_dsl.bench.contender import Contender


def to_torch(array: np.ndarray, device: str = "cuda"):
    """A host array as a tensor on ``device`` (bf16 through its bit pattern: torch cannot read ml_dtypes)."""
    import torch

    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def to_host(tensor) -> np.ndarray:
    import torch

    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.cpu().numpy()


def function(problem: Problem):
    """The benchmark as a function of tensors."""
    import torch
    import torch.nn.functional as F

    kind = problem.kind
    if kind == "elementwise_chain":
        return lambda x: torch.relu(x * 1.5 + 0.25) * 2 - 0.5
    if kind == "softmax":
        return lambda x: torch.softmax(x, -1)
    if kind == "layernorm":
        eps = problem.eps
        return lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, eps)
    if kind == "gemm_bias_gelu":
        def gemm_bias_gelu(a, b, bias):
            h = torch.addmm(bias, a, b) if a.dim() == 2 and b.dim() == 2 else a @ b + bias
            return F.gelu(h)

        return gemm_bias_gelu
    if kind == "attention_scores":
        scale = problem.scale
        return lambda q, k: torch.softmax(q @ k.transpose(-1, -2) * scale, -1)
    if kind == "attention":  # as written; Inductor's pattern matcher may turn it into its fused attention
        scale = problem.scale
        return lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v
    if kind == "attention_causal":  # as written
        scale, fill = problem.scale, problem.fill
        return lambda q, k, v, qpos, kpos: torch.softmax(
            torch.where(kpos <= qpos, q @ k.transpose(-1, -2) * scale, fill), -1) @ v
    raise NotApplicable(f"no PyTorch baseline for `{kind}`")


def _contender(name: str, label: str, fn, problem: Problem, close_extra=None) -> Contender:
    import torch

    from cuvil_dsl.runtime.interop import caller_stream

    tensors = [to_torch(a) for a in problem.inputs]
    torch.cuda.synchronize()

    def close() -> None:
        tensors.clear()
        if close_extra is not None:
            close_extra()
        torch.cuda.empty_cache()

    return Contender(name, label, "gpu", lambda: fn(*tensors), fetch=to_host, stream=caller_stream("torch-cuda"),
                     close=close)


def counts_up(positions: np.ndarray) -> bool:
    """Whether ``positions`` (of shape [n, 1] or [1, n]) are 0, 1, ..., n - 1."""
    return bool(np.array_equal(positions.reshape(-1), np.arange(positions.size)))


def build_eager(problem: Problem) -> Contender:
    if problem.kind in ("attention", "attention_causal"):  # what a PyTorch user calls: its fused attention
        import torch.nn.functional as F

        scale = problem.scale
        causal = problem.kind == "attention_causal"
        # positions 0, 1, 2, ... on both sides make the mask causal (top left aligned, as PyTorch's `is_causal`),
        # which its flash kernel takes; other positions go in as a boolean mask (its memory-efficient kernel)
        flash_causal = causal and all(counts_up(p) for p in problem.inputs[3:])

        def sdpa(q, k, v, *positions):
            mask = None if not causal or flash_causal else positions[1] <= positions[0]
            # as (batch, heads, sequence, head dim): PyTorch's flash and memory-efficient kernels take only 4-D
            # inputs and fall back to the unfused math for others
            if q.shape[:-2] != k.shape[:-2] or k.shape[:-2] != v.shape[:-2]:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=flash_causal, scale=scale)
            four = [t.reshape(-1, 1, *t.shape[-2:]) for t in (q, k, v)]
            o = F.scaled_dot_product_attention(*four, attn_mask=mask, is_causal=flash_causal, scale=scale)
            return o.reshape(*q.shape[:-1], v.shape[-1])

        return _contender("torch", "PyTorch", sdpa, problem)
    return _contender("torch", "PyTorch", function(problem), problem)


def build_compiled(problem: Problem) -> Contender:
    import torch

    compiled = torch.compile(function(problem), dynamic=False)
    return _contender("torch_compile", "torch.compile", compiled, problem, close_extra=torch._dynamo.reset)

