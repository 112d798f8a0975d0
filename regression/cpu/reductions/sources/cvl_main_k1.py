# cuvil-dsl kernel main_k1 (reduce) of pipeline reductions, domain [128, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1], float32[::1], float32[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k1(
    b0,  # x: f32[R, C] input
    b1,  # row_sum: f32[R] output
    b2,  # row_range: f32[R, 1] output
    b3,  # shifted: f32[R, C] output
):
    for q in numba.prange(128):
        c0 = q
        part1 = np.full(8, np.float32(0.0))
        part2 = np.full(8, np.float32(-np.inf))
        part3 = np.full(8, np.float32(np.inf))
        for c1_ in range(0, 128, 8):
            for e in range(8):
                part1[e] = (part1[e] + b0[c0 * 128 + (c1_ + e)])
                part2[e] = cvl.fmaximum(part2[e], b0[c0 * 128 + (c1_ + e)])
                part3[e] = cvl.fminimum(part3[e], b0[c0 * 128 + (c1_ + e)])
        r4 = part1[0]
        for e in range(1, 8):
            r4 = (r4 + part1[e])
        r4 = r4
        r5 = part2[0]
        for e in range(1, 8):
            r5 = cvl.fmaximum(r5, part2[e])
        r5 = r5
        r6 = part3[0]
        for e in range(1, 8):
            r6 = cvl.fminimum(r6, part3[e])
        for c1 in range(128):
            t7 = (b0[c0 * 128 + c1] - r5)
            b3[c0 * 128 + c1] = t7
        b1[c0] = r4
        t8 = (r5 - r6)
        b2[c0] = t8
