# cuvil-dsl kernel main_k2 (reduce) of pipeline reductions, domain [128, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(float32[::1], float32[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_main_k2(
    b0,  # x: f32[R, C] input
    b1,  # col_mean: f32[1, C] output
):
    for q in numba.prange(128):
        c1 = q
        part1 = np.full(8, np.float32(0.0))
        for c0_ in range(0, 128, 8):
            for e in range(8):
                part1[e] = (part1[e] + b0[(c0_ + e) * 128 + c1])
        r2 = part1[0]
        for e in range(1, 8):
            r2 = (r2 + part1[e])
        t3 = (r2 / np.float32(128.0))
        b1[c1] = t3
