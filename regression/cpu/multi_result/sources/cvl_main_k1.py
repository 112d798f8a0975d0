# cuvil-dsl kernel main_k1 (reduce) of pipeline multi_result, domain [128, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1], float32[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: f32[R, C] input
    b1,  # p: f32[R, C] output
    b2,  # lse: f32[R, 1] output
):
    for q in numba.prange(128):
        c0 = q
        part1 = np.full(8, np.float32(-np.inf))
        for c1_ in range(0, 128, 8):
            for e in range(8):
                part1[e] = cvl.fmaximum(part1[e], b0[c0 * 128 + (c1_ + e)])
        r2 = part1[0]
        for e in range(1, 8):
            r2 = cvl.fmaximum(r2, part1[e])
        r2 = r2
        row3 = np.empty(128, np.float32)
        for c1 in range(128):
            t4 = (b0[c0 * 128 + c1] - r2)
            t5 = cvl.exp_f32(t4)
            row3[c1] = t5
        part6 = np.full(8, np.float32(0.0))
        for c1_ in range(0, 128, 8):
            for e in range(8):
                part6[e] = (part6[e] + row3[c1_ + e])
        r7 = part6[0]
        for e in range(1, 8):
            r7 = (r7 + part6[e])
        r7 = r7
        for c1 in range(128):
            t8 = (row3[c1] / r7)
            b1[c0 * 128 + c1] = t8
        t9 = cvl.log_f32(r7)
        t10 = (r2 + t9)
        b2[c0] = t10
