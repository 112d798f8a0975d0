# cuvil-dsl kernel main_k2 (matmul) of pipeline batched_matmul_broadcast, domain [8, 32, 64]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1], float32[::1], float32[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k2_epilogue(
    b0,  # x: f32[G, M, K] input
    b1,  # u: f32[K, P] input
    b2,  # z: f32[G, P, M] output
    w0,  # workspace: f32[16384]
):
    for q in numba.prange(256):
        c0 = (q // 32)
        c1 = q % 32
        for c2 in range(64):
            t2 = w0[c0 * 2048 + c1 * 64 + c2]
            t3 = t2
            b2[c0 * 2048 + c2 * 32 + c1] = t3


def cvl_main_k2(
    b0,  # x: f32[G, M, K] input
    b1,  # u: f32[K, P] input
    b2,  # z: f32[G, P, M] output
    w0,  # workspace: f32[16384]
):
    """The GEMM through NumPy's BLAS, then the fused epilogue."""
    lhs = b0.reshape((8, 32, 64))
    rhs = b1.reshape((64, 64))
    np.matmul(lhs, rhs, out=w0.reshape((8, 32, 64)))
    cvl_main_k2_epilogue(b0, b1, b2, w0)
