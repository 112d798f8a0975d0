# cuvil-dsl kernel forward_k1 (elementwise) of pipeline attention, domain [64, 128]
# helpers: cuvil_dsl/codegen/cpu_prelude.py sha256 e9d1903b89e4cfe7
import math

import numba
import numpy as np

from cuvil_dsl.codegen import cpu_prelude as cvl


@numba.njit("void(int32[::1], int32[::1], boolean[::1])", parallel=True, fastmath=False, error_model="numpy", cache=True)
def cvl_forward_k1(
    b0,  # kpos: i32[1, N] input
    b1,  # qpos: i32[M, 1] input
    b2,  # causal: bool[M, N] output
):
    for q in numba.prange(64):
        c0 = q
        for c1 in range(128):
            t2 = (b0[c1] <= b1[c0])
            b2[c0 * 128 + c1] = t2
