# cuvil-dsl kernel main_k1 (matmul) of pipeline batched_matmul_broadcast, domain [8, 32, 64]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1], float32[::1], float32[::1], float32[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1_epilogue(
    b0,  # w: f32[1, N, K] input
    b1,  # x: f32[G, M, K] input
    b2,  # bias: f32[G, 1, N] input
    b3,  # y: f32[G, M, N] output
    w0,  # workspace: f32[16384]
):
    for q in numba.prange(256):
        c0 = (q // 32)
        c1 = q % 32
        for c2 in range(64):
            t2 = w0[c0 * 2048 + c1 * 64 + c2]
            t3 = (t2 + b2[c0 * 64 + c2])
            b3[c0 * 2048 + c1 * 64 + c2] = t3


def cvl_main_k1(
    b0,  # w: f32[1, N, K] input
    b1,  # x: f32[G, M, K] input
    b2,  # bias: f32[G, 1, N] input
    b3,  # y: f32[G, M, N] output
    w0,  # workspace: f32[16384]
):
    """The GEMM through NumPy's BLAS, then the fused epilogue."""
    lhs = b1.reshape((8, 32, 64))
    rhs = b0.reshape((1, 64, 64)).swapaxes(-1, -2)
    np.matmul(lhs, rhs, out=w0.reshape((8, 32, 64)))
    cvl_main_k1_epilogue(b0, b1, b2, b3, w0)
