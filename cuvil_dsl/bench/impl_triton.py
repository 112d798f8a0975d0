"""The Triton baseline: one straightforward hand-written kernel per benchmark.

Written the way the Triton tutorials teach, with no tricks our generator lacks, so the comparison
is of code generation rather than of algorithms: an elementwise kernel; one program per row for
softmax and layernorm (the whole row in registers, float32 math); the tutorial's grouped-tile
GEMM with ``tl.dot`` and the bias + erf GELU epilogue (autotuned over three tile shapes); and the
attention scores ``softmax(Q K^T * scale)`` in two passes over the keys per block of query rows (an
online max and sum first, then the probabilities recomputed and stored), so the logits never
reach memory, as in our fused kernel; full attention ``softmax(Q K^T * scale) V`` in one pass over the
keys (the FlashAttention forward pass as the Triton tutorial teaches it), causal attention the same with each
block's loop ending at its last row. Kernels take PyTorch tensors and run on PyTorch's current stream.
Matrix products are offered for f16 and bf16 only: ``tl.dot`` on float32 defaults to tf32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from cuvil_dsl.bench.baselines import NotApplicable, Problem
from cuvil_dsl.bench.contender import Contender
from cuvil_dsl.bench.impl_torch import counts_up, to_host, to_torch
from cuvil_dsl.types import DType

_TORCH = {DType.F16: torch.float16, DType.BF16: torch.bfloat16, DType.F32: torch.float32}
_HALF = (torch.float16, torch.bfloat16)
MAX_ROW = 65536  # one program holds a whole row in registers
CHAIN_BLOCK = 4096


@triton.jit
def _chain_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.maximum(x * 1.5 + 0.25, 0.0) * 2.0 - 0.5
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, stride_x, stride_y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, stride_x, stride_y, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_y + cols, (centred * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=3, num_warps=8),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_stages=4, num_warps=4),
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_stages=4, num_warps=4),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def _gemm_bias_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                           stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_am = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_bn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    bias = tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0).to(tl.float32)
    h = acc + bias[None, :]
    y = 0.5 * h * (1.0 + tl.math.erf(h * 0.7071067811865476))
    c_ptrs = c_ptr + offs_cm[:, None] * stride_cm + offs_cn[None, :] * stride_cn
    tl.store(c_ptrs, y.to(c_ptr.dtype.element_ty), mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.jit
def _attention_scores_kernel(q_ptr, k_ptr, p_ptr, M, N, D, scale,
                             stride_qb, stride_qm, stride_qd, stride_kb, stride_kn, stride_kd,
                             stride_pb, stride_pm, stride_pn,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    pid_m = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < M
    q = tl.load(q_ptr + batch * stride_qb + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)
    k_base = k_ptr + batch * stride_kb + offs_d[:, None] * stride_kd  # K^T tiles: [BLOCK_D, BLOCK_N]

    # Pass 1: the row maxima and the sums of exponentials, online over blocks of keys.
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    for start in range(0, N, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        col_ok = offs_n < N
        kt = tl.load(k_base + offs_n[None, :] * stride_kn, mask=(offs_d[:, None] < D) & col_ok[None, :], other=0.0)
        s = tl.where(col_ok[None, :], tl.dot(q, kt) * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        l_i = l_i * tl.exp(m_i - m_new) + tl.sum(tl.exp(s - m_new[:, None]), axis=1)
        m_i = m_new

    # Pass 2: the logits recomputed, normalised and stored.
    inv_l = 1.0 / l_i
    p_base = p_ptr + batch * stride_pb + offs_m[:, None] * stride_pm
    for start in range(0, N, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        col_ok = offs_n < N
        kt = tl.load(k_base + offs_n[None, :] * stride_kn, mask=(offs_d[:, None] < D) & col_ok[None, :], other=0.0)
        s = tl.where(col_ok[None, :], tl.dot(q, kt) * scale, float("-inf"))
        p = tl.exp(s - m_i[:, None]) * inv_l[:, None]
        tl.store(p_base + offs_n[None, :] * stride_pn, p.to(p_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, M, N, D, DV, scale,
                      stride_qb, stride_qm, stride_qd, stride_kb, stride_kn, stride_kd,
                      stride_vb, stride_vn, stride_vd, stride_ob, stride_om, stride_od,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
                      CAUSAL: tl.constexpr = False):
    # softmax(Q K^T * scale) V in one pass over the keys: an online max and sum, the output rescaled
    # when the max grows, the probabilities never stored (the FlashAttention forward pass). CAUSAL: key j
    # seen by row i where j <= i, the loop ending at the block's last row (the keys past it are all masked)
    pid_m = tl.program_id(0)
    batch = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    row_ok = offs_m < M
    q = tl.load(q_ptr + batch * stride_qb + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qd,
                mask=row_ok[:, None] & (offs_d[None, :] < D), other=0.0)
    k_base = k_ptr + batch * stride_kb + offs_d[:, None] * stride_kd  # K^T tiles: [BLOCK_D, BLOCK_N]
    v_base = v_ptr + batch * stride_vb + offs_dv[None, :] * stride_vd
    qk_scale = scale * 1.4426950408889634  # exp(x) = 2^(x log2 e)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_DV), tl.float32)
    end = N
    if CAUSAL:
        end = tl.minimum(N, (pid_m + 1) * BLOCK_M)
    for start in range(0, end, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        col_ok = offs_n < N
        kt = tl.load(k_base + offs_n[None, :] * stride_kn, mask=(offs_d[:, None] < D) & col_ok[None, :], other=0.0)
        seen = col_ok[None, :]
        if CAUSAL:
            seen = seen & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(seen, tl.dot(q, kt) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_base + offs_n[:, None] * stride_vn, mask=col_ok[:, None] & (offs_dv[None, :] < DV), other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(o_ptr + batch * stride_ob + offs_m[:, None] * stride_om + offs_dv[None, :] * stride_od,
             o.to(o_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_dv[None, :] < DV))


def _row_launch(n_cols: int) -> tuple[int, int]:
    """``(BLOCK, num_warps)`` for one program per row of ``n_cols``."""
    block = triton.next_power_of_2(n_cols)
    if block > MAX_ROW:
        raise NotApplicable(f"rows of {n_cols} do not fit one Triton program (at most {MAX_ROW})")
    return block, 4 if block <= 1024 else 8 if block <= 4096 else 16


def _launcher(problem: Problem, tensors: list):
    """A function of no arguments that launches the kernel for ``problem`` on ``tensors``."""
    kind = problem.kind
    out_dtype = _TORCH[problem.result_dtype]
    if kind == "elementwise_chain":
        (x,) = tensors
        n = x.numel()
        grid = (triton.cdiv(n, CHAIN_BLOCK),)

        def chain():
            y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
            _chain_kernel[grid](x, y, n, BLOCK=CHAIN_BLOCK, num_warps=8)
            return y

        return chain
    if kind in ("softmax", "layernorm"):
        x = tensors[0]
        n_cols = x.shape[-1]
        rows = x.reshape(-1, n_cols)
        block, warps = _row_launch(n_cols)
        grid = (rows.shape[0],)
        if kind == "softmax":
            def softmax():
                y = torch.empty(rows.shape, dtype=out_dtype, device=x.device)
                _softmax_kernel[grid](rows, y, rows.stride(0), y.stride(0), n_cols, BLOCK=block, num_warps=warps)
                return y.view(x.shape)

            return softmax
        w, b = tensors[1], tensors[2]
        if w.numel() != n_cols or b.numel() != n_cols:
            raise NotApplicable("the Triton layernorm takes a weight and a bias of the row's length")

        def layernorm():
            y = torch.empty(rows.shape, dtype=out_dtype, device=x.device)
            _layernorm_kernel[grid](rows, w, b, y, rows.stride(0), y.stride(0), n_cols, problem.eps,
                                    BLOCK=block, num_warps=warps)
            return y.view(x.shape)

        return layernorm
    if any(t.dtype not in _HALF for t in tensors[:2]):
        raise NotApplicable("the Triton matrix products take f16 or bf16 (tl.dot on float32 is tf32)")
    if kind == "gemm_bias_gelu":
        a, b, bias = tensors
        if a.dim() != 2 or b.dim() != 2 or bias.dim() != 1:
            raise NotApplicable("the Triton GEMM takes a [M, K] @ [K, N] + bias [N]")
        (M, K), N = a.shape, b.shape[1]

        def gemm_bias_gelu():
            c = torch.empty((M, N), dtype=out_dtype, device=a.device)
            grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)  # noqa: E731
            _gemm_bias_gelu_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                         c.stride(0), c.stride(1))
            return c

        return gemm_bias_gelu
    if kind == "attention_scores":
        q, k = tensors
        if q.dim() < 2 or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
            raise NotApplicable("the Triton attention scores take q [..., M, D] and k [..., N, D] of one batch shape")
        M, D, N = q.shape[-2], q.shape[-1], k.shape[-2]
        q3, k3 = q.reshape(-1, M, D), k.reshape(-1, N, D)
        block_d = max(16, triton.next_power_of_2(D))
        if block_d > 256:
            raise NotApplicable(f"a head size of {D} does not fit the Triton attention kernel")
        block_m, block_n = 128, 64
        grid = (triton.cdiv(M, block_m), q3.shape[0])

        def attention_scores():
            p = torch.empty((q3.shape[0], M, N), dtype=out_dtype, device=q.device)
            _attention_scores_kernel[grid](q3, k3, p, M, N, D, problem.scale, *q3.stride(), *k3.stride(), *p.stride(),
                                           BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                                           num_warps=8, num_stages=2)
            return p.view(*q.shape[:-2], M, N)

        return attention_scores
    if kind in ("attention", "attention_causal"):
        causal = kind == "attention_causal"
        if causal and not all(counts_up(p) for p in problem.inputs[3:]):
            raise NotApplicable("the Triton causal attention takes positions 0, 1, 2, ... (a causal mask)")
        q, k, v = tensors[:3]
        if (q.dim() < 2 or not q.shape[:-2] == k.shape[:-2] == v.shape[:-2] or q.shape[-1] != k.shape[-1]
                or k.shape[-2] != v.shape[-2]):
            raise NotApplicable("the Triton attention takes q [..., M, D], k [..., N, D], v [..., N, Dv] of one batch shape")
        M, D, N, DV = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
        q3, k3, v3 = q.reshape(-1, M, D), k.reshape(-1, N, D), v.reshape(-1, N, DV)
        block_d, block_dv = max(16, triton.next_power_of_2(D)), max(16, triton.next_power_of_2(DV))
        if max(block_d, block_dv) > 256:
            raise NotApplicable(f"head sizes of {D} and {DV} do not fit the Triton attention kernel")
        block_m, block_n = 128, 64
        grid = (triton.cdiv(M, block_m), q3.shape[0])

        def attention():
            o = torch.empty((q3.shape[0], M, DV), dtype=out_dtype, device=q.device)
            _attention_kernel[grid](q3, k3, v3, o, M, N, D, DV, problem.scale, *q3.stride(), *k3.stride(),
                                    *v3.stride(), *o.stride(), BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                                    BLOCK_DV=block_dv, CAUSAL=causal, num_warps=4, num_stages=3)
            return o.view(*q.shape[:-2], M, DV)

        return attention
    raise NotApplicable(f"no Triton baseline for `{kind}`")


def build(problem: Problem) -> Contender:
    from cuvil_dsl.runtime.interop import caller_stream

    if problem.result_dtype not in _TORCH:
        raise NotApplicable(f"the Triton kernels compute f16, bf16 and f32 results, not {problem.result_dtype.value}")
    tensors = [to_torch(a).contiguous() for a in problem.inputs]
    launch = _launcher(problem, tensors)
    torch.cuda.synchronize()

    def close() -> None:
        tensors.clear()
        torch.cuda.empty_cache()

    return Contender("triton", "Triton", "gpu", launch, fetch=to_host, stream=caller_stream("torch-cuda"), close=close)
