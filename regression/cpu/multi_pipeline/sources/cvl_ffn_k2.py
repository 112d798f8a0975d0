# cuvil-dsl kernel ffn_k2 (matmul) of pipeline swiglu, domain [128, 256]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], uint16[::1], uint16[::1], uint16[::1], float32[::1], float32[::1], float32[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_ffn_k2_epilogue(
    b0,  # x: bf16[T, D] input
    b1,  # w_up: bf16[D, F] input
    b2,  # gate: bf16[T, F] input
    b3,  # y: bf16[T, F] output
    w0,  # workspace: f32[16384]
    w1,  # workspace: f32[32768]
    w2,  # workspace: f32[32768]
):
    for i in numba.prange(32768):
        t3 = cvl.silu_f32(cvl.bf16_to_f32(b2[i]))
        t4 = cvl.round_bf16(w2[i])
        t5 = cvl.round_bf16((t3 * t4))
        b3[i] = cvl.f32_to_bf16((t3 * t4))


def cvl_ffn_k2(
    b0,  # x: bf16[T, D] input
    b1,  # w_up: bf16[D, F] input
    b2,  # gate: bf16[T, F] input
    b3,  # y: bf16[T, F] output
    w0,  # workspace: f32[16384]
    w1,  # workspace: f32[32768]
    w2,  # workspace: f32[32768]
):
    """The GEMM through NumPy's BLAS, then the fused epilogue."""
    np.left_shift(b0.reshape((128, 128)), 16, out=w0.view(np.uint32).reshape((128, 128)), dtype=np.uint32)
    lhs = w0.reshape((128, 128))
    np.left_shift(b1.reshape((128, 256)), 16, out=w1.view(np.uint32).reshape((128, 256)), dtype=np.uint32)
    rhs = w1.reshape((128, 256))
    np.matmul(lhs, rhs, out=w2.reshape((128, 256)))
    cvl_ffn_k2_epilogue(b0, b1, b2, b3, w0, w1, w2)
