# cuvil-dsl kernel row_softmax (row) of pipeline softmax_rows, domain [256, 256]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(uint16[::1], uint16[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_row_softmax(
    b0,  # x: f16[R, C] input
    b1,  # y: f16[R, C] output
):
    for q in numba.prange(256):
        c0 = q
        row1 = np.empty(256, np.float32)
        for c1 in range(256):
            row1[c1] = cvl.f16_to_f32(b0[c0 * 256 + c1])
        part2 = np.full(8, np.float32(-np.inf))
        for c1_ in range(0, 256, 8):
            for e in range(8):
                part2[e] = cvl.fmaximum(part2[e], row1[c1_ + e])
        r3 = part2[0]
        for e in range(1, 8):
            r3 = cvl.fmaximum(r3, part2[e])
        row4 = np.empty(256, np.float32)
        for c1 in range(256):
            t5 = (row1[c1] - r3)
            t6 = cvl.exp_f32(t5)
            row4[c1] = t6
        part7 = np.full(8, np.float32(0.0))
        for c1_ in range(0, 256, 8):
            for e in range(8):
                part7[e] = (part7[e] + row4[c1_ + e])
        r8 = part7[0]
        for e in range(1, 8):
            r8 = (r8 + part7[e])
        for c1 in range(256):
            t9 = cvl.round_f16((row4[c1] / r8))
            b1[c0 * 256 + c1] = cvl.f32_to_f16((row4[c1] / r8))
