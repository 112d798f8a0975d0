"""The grid of a persistent cluster kernel, fitted to the device it runs on.

A persistent cluster kernel (``RenderedKernel.persistent_cluster`` > 0: the lagged attention band of
``codegen/cuda_band_cluster.py``) walks its work by ``gridDim``, so any number of clusters gives the
same results. Its rendered grid assumes the arch's multiprocessor count (``codegen.cuda.SM_COUNT``);
on a part with fewer multiprocessors that grid would not run at once, and the clusters left over
would run as a second wave (on the H200 two clusters too many cost 47%, benchmarks/NOTES.md). The
loader asks the driver how many clusters of the kernel the device runs at once
(``cuOccupancyMaxActiveClusters``) and launches no more.

The driver call is bound with ctypes from ``libcuda.so.1`` (the library CuPy already loaded); its
``CUlaunchConfig`` layout is checked against the NVIDIA wheel's ``cuda.h`` (tests/runtime).
"""

from __future__ import annotations

import ctypes
import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cuvil_dsl.codegen.artifact import RenderedKernel


class LaunchConfig(ctypes.Structure):
    """``CUlaunchConfig`` (cuda.h): a launch's shape; no attributes (the cluster size is compiled in)."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("numAttrs", ctypes.c_uint),
    ]


@functools.cache
def _occupancy():
    """``cuOccupancyMaxActiveClusters``, or None where the driver lacks it (older than CUDA 12.0)."""
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.POINTER(LaunchConfig)]
    fn.restype = ctypes.c_int
    return fn


def max_active_clusters(kernel: "RenderedKernel", function: int) -> int | None:
    """How many clusters of ``kernel`` (loaded as CUfunction ``function``) the device runs at once,
    or None when the driver cannot say."""
    fn = _occupancy()
    if fn is None:
        return None
    config = LaunchConfig(*kernel.grid, *kernel.block, kernel.shared_bytes, None, None, 0)
    count = ctypes.c_int(0)
    if fn(ctypes.byref(count), function, ctypes.byref(config)) != 0 or count.value <= 0:
        return None
    return count.value


def fitted_grid(kernel: "RenderedKernel", function: int) -> tuple[int, int, int]:
    """``kernel.grid``; for a persistent cluster kernel, at most the clusters the device runs at once."""
    size = kernel.persistent_cluster
    if not size:
        return kernel.grid
    fit = max_active_clusters(kernel, function)
    if fit is None or fit * size >= kernel.grid[0]:
        return kernel.grid
    return (fit * size, kernel.grid[1], kernel.grid[2])
