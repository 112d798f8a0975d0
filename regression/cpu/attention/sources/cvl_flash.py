# cuvil-dsl kernel flash (attention) of pipeline attention, domain [4, 64, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], uint16[::1], boolean[::1], uint16[::1], uint16[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_flash_softmax(
    b0,  # k: f16[B, N, D] input
    b1,  # q: f16[B, M, D] input
    b2,  # causal: bool[M, N] input
    b3,  # v: f16[B, N, D] input
    b4,  # o: f16[B, M, D] output
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
            t2 = w3[c0 * 8192 + c1 * 128 + c2]
            t3 = (t2 * u0)
            t4 = (t3 if b2[c1 * 128 + c2] else u1)
            row1[c2] = t4
        part5 = np.full(8, np.float32(-np.inf))
        for c2_ in range(0, 128, 8):
            for e in range(8):
                part5[e] = cvl.fmaximum(part5[e], row1[c2_ + e])
        r6 = part5[0]
        for e in range(1, 8):
            r6 = cvl.fmaximum(r6, part5[e])
        row7 = np.empty(128, np.float32)
        for c2 in range(128):
            t8 = (row1[c2] - r6)
            t9 = cvl.exp_f32(t8)
            row7[c2] = t9
        part10 = np.full(8, np.float32(0.0))
        for c2_ in range(0, 128, 8):
            for e in range(8):
                part10[e] = (part10[e] + row7[c2_ + e])
        r11 = part10[0]
        for e in range(1, 8):
            r11 = (r11 + part10[e])
        for c2 in range(128):
            t12 = (row7[c2] / r11)
            w4[c0 * 8192 + c1 * 128 + c2] = t12


@numba.njit("void(uint16[::1], uint16[::1], boolean[::1], uint16[::1], uint16[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32[::1], float32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_flash_store(
    b0,  # k: f16[B, N, D] input
    b1,  # q: f16[B, M, D] input
    b2,  # causal: bool[M, N] input
    b3,  # v: f16[B, N, D] input
    b4,  # o: f16[B, M, D] output
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
        b4[i] = cvl.f32_to_f16(w5[i])


def cvl_flash(
    b0,  # k: f16[B, N, D] input
    b1,  # q: f16[B, M, D] input
    b2,  # causal: bool[M, N] input
    b3,  # v: f16[B, N, D] input
    b4,  # o: f16[B, M, D] output
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
    np.copyto(w2.reshape((4, 128, 64)), b3.view(np.float16).reshape((4, 128, 64)))
    vv = w2.reshape((4, 128, 64))
    np.matmul(lhs, rhs, out=w3.reshape((4, 64, 128)))
    cvl_flash_softmax(b0, b1, b2, b3, b4, w0, w1, w2, w3, w4, w5, u0, u1)
    np.matmul(w4.reshape((4, 64, 128)), vv, out=w5.reshape((4, 64, 64)))
    cvl_flash_store(b0, b1, b2, b3, b4, w0, w1, w2, w3, w4, w5, u0, u1)
