# cuvil-dsl kernel flash (attention) of pipeline attention, domain [4, 64, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], uint16[::1], int32[::1], int32[::1], uint16[::1], uint16[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_flash_softmax(
    b0,  # k: f16[B, N, D] input
    b1,  # q: f16[B, M, D] input
    b2,  # kpos: i32[1, N] input
    b3,  # qpos: i32[M, 1] input
    b4,  # v: f16[B, N, D] input
    b5,  # o: f16[B, M, D] output
    w0,  # workspace: f32[16384]
    w1,  # workspace: f32[32768]
    w2,  # workspace: f32[32768]
    w3,  # workspace: f32[32768]
    w4,  # workspace: f32[32768]
    w5,  # workspace: f32[16384]
    u0,  # %3: f16[] scalar
    u1,  # %7: f16[] scalar
):
    for q in numba.prange(256):
        c0 = (q // 64)
        c1 = q % 64
        row1 = np.empty(128, np.float32)
        for c2 in range(128):
            t2 = (b2[c2] <= b3[c1])
            t3 = w3[c0 * 8192 + c1 * 128 + c2]
            t4 = (t3 * u0)
            t5 = (t4 if t2 else u1)
            row1[c2] = t5
        part6 = np.full(8, np.float32(-np.inf))
        for c2_ in range(0, 128, 8):
            for e in range(8):
                part6[e] = cvl.fmaximum(part6[e], row1[c2_ + e])
        r7 = part6[0]
        for e in range(1, 8):
            r7 = cvl.fmaximum(r7, part6[e])
        row8 = np.empty(128, np.float32)
        for c2 in range(128):
            t9 = (row1[c2] - r7)
            t10 = cvl.exp_f32(t9)
            row8[c2] = t10
        part11 = np.full(8, np.float32(0.0))
        for c2_ in range(0, 128, 8):
            for e in range(8):
                part11[e] = (part11[e] + row8[c2_ + e])
        r12 = part11[0]
        for e in range(1, 8):
            r12 = (r12 + part11[e])
        for c2 in range(128):
            t13 = (row8[c2] / r12)
            w4[c0 * 8192 + c1 * 128 + c2] = t13


@numba.njit("void(uint16[::1], uint16[::1], int32[::1], int32[::1], uint16[::1], uint16[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_flash_store(
    b0,  # k: f16[B, N, D] input
    b1,  # q: f16[B, M, D] input
    b2,  # kpos: i32[1, N] input
    b3,  # qpos: i32[M, 1] input
    b4,  # v: f16[B, N, D] input
    b5,  # o: f16[B, M, D] output
    w0,  # workspace: f32[16384]
    w1,  # workspace: f32[32768]
    w2,  # workspace: f32[32768]
    w3,  # workspace: f32[32768]
    w4,  # workspace: f32[32768]
    w5,  # workspace: f32[16384]
    u0,  # %3: f16[] scalar
    u1,  # %7: f16[] scalar
):
    for i in numba.prange(16384):
        b5[i] = cvl.f32_to_f16(w5[i])


def cvl_flash(
    b0,  # k: f16[B, N, D] input
    b1,  # q: f16[B, M, D] input
    b2,  # kpos: i32[1, N] input
    b3,  # qpos: i32[M, 1] input
    b4,  # v: f16[B, N, D] input
    b5,  # o: f16[B, M, D] output
    w0,  # workspace: f32[16384]
    w1,  # workspace: f32[32768]
    w2,  # workspace: f32[32768]
    w3,  # workspace: f32[32768]
    w4,  # workspace: f32[32768]
    w5,  # workspace: f32[16384]
    u0,  # %3: f16[] scalar
    u1,  # %7: f16[] scalar
):
    """Scores through NumPy's BLAS, the softmax in numba, the product through BLAS, the store."""
    np.copyto(w0.reshape((4, 64, 64)), b1.view(np.float16).reshape((4, 64, 64)))
    lhs = w0.reshape((4, 64, 64))
    np.copyto(w1.reshape((4, 128, 64)), b0.view(np.float16).reshape((4, 128, 64)))
    rhs = w1.reshape((4, 128, 64)).swapaxes(-1, -2)
    np.copyto(w2.reshape((4, 128, 64)), b4.view(np.float16).reshape((4, 128, 64)))
    vv = w2.reshape((4, 128, 64))
    np.matmul(lhs, rhs, out=w3.reshape((4, 64, 128)))
    cvl_flash_softmax(b0, b1, b2, b3, b4, b5, w0, w1, w2, w3, w4, w5, u0, u1)
    np.matmul(w4.reshape((4, 64, 128)), vv, out=w5.reshape((4, 64, 64)))
    cvl_flash_store(b0, b1, b2, b3, b4, b5, w0, w1, w2, w3, w4, w5, u0, u1)
