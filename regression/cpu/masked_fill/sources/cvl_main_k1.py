# cuvil-dsl kernel main_k1 (reduce) of pipeline masked_fill, domain [128, 256]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], boolean[::1], uint16[::1], int32[::1], float32, float32)", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: f16[R, C] input
    b1,  # keep: bool[R, C] input
    b2,  # y: f16[R, C] output
    b3,  # kept: i32[R, 1] output
    u0,  # %0: f16[] scalar
    u1,  # %3: f16[] scalar
):
    for q in numba.prange(128):
        c0 = q
        row1 = np.empty(256, np.int32)
        for c1 in range(256):
            t2 = (np.int32(1) if b1[c0 * 256 + c1] else np.int32(0))
            row1[c1] = t2
        part3 = np.full(8, np.int32(0))
        for c1_ in range(0, 256, 8):
            for e in range(8):
                part3[e] = np.int32(part3[e] + row1[c1_ + e])
        r4 = part3[0]
        for e in range(1, 8):
            r4 = np.int32(r4 + part3[e])
        r4 = r4
        for c1 in range(256):
            t5 = (cvl.f16_to_f32(b0[c0 * 256 + c1]) * u0)
            t6 = cvl.round_f16((t5 if b1[c0 * 256 + c1] else u1))
            b2[c0 * 256 + c1] = cvl.f32_to_f16((t5 if b1[c0 * 256 + c1] else u1))
        b3[c0] = r4
