# cuvil-dsl kernel mlp_k1 (matmul) of pipeline two_graphs, domain [128, 256]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], uint16[::1], uint16[::1], uint16[::1], float32[::1], float32[::1], float32[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_mlp_k1_epilogue(
    b0,  # x: f16[T, D] input
    b1,  # w: f16[D, F] input
    b2,  # b: f16[F] input
    b3,  # h: f16[T, F] output
    w0,  # workspace: f32[16384]
    w1,  # workspace: f32[32768]
    w2,  # workspace: f32[32768]
):
    for q in numba.prange(128):
        c0 = q
        for c1 in range(256):
            t3 = w2[c0 * 256 + c1]
            t4 = (t3 + cvl.f16_to_f32(b2[c1]))
            t5 = cvl.round_f16(cvl.gelu_f32(t4))
            b3[c0 * 256 + c1] = cvl.f32_to_f16(cvl.gelu_f32(t4))


def cvl_mlp_k1(
    b0,  # x: f16[T, D] input
    b1,  # w: f16[D, F] input
    b2,  # b: f16[F] input
    b3,  # h: f16[T, F] output
    w0,  # workspace: f32[16384]
    w1,  # workspace: f32[32768]
    w2,  # workspace: f32[32768]
):
    """The GEMM through NumPy's BLAS, then the fused epilogue."""
    np.copyto(w0.reshape((128, 128)), b0.view(np.float16).reshape((128, 128)))
    lhs = w0.reshape((128, 128))
    np.copyto(w1.reshape((128, 256)), b1.view(np.float16).reshape((128, 256)))
    rhs = w1.reshape((128, 256))
    np.matmul(lhs, rhs, out=w2.reshape((128, 256)))
    cvl_mlp_k1_epilogue(b0, b1, b2, b3, w0, w1, w2)
