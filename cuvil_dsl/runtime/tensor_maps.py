"""TMA descriptors (``CUtensorMap``) for kernels that load tiles with ``cp.async.bulk.tensor``.

A kernel that asks for one (a ``tensormap`` :class:`~cuvil_dsl.codegen.artifact.KernelArg`) takes
it by value as a ``__grid_constant__`` parameter: 128 opaque bytes that the driver builds from
the buffer's device pointer, its extents and stride, the tile (box) one copy moves and the
shared-memory swizzle (``cuTensorMapEncodeTiled``). The pointer is part of the descriptor, so a
cell is encoded again whenever its buffer's pointer cell changes (a caller's array bound in
place of the arena's), which :class:`~cuvil_dsl.runtime.modules.ArgumentCells` does; graphs then
rewrite the nodes that take it like any other changed argument.

The driver call is bound with ctypes from ``libcuda.so.1``, as
:mod:`~cuvil_dsl.runtime.graph_nodes` binds its calls: CuPy exposes no tensor-map API, and the
entry point has kept its ABI since CUDA 12.0. Enum values are those of ``cuda.h`` (checked
against the header of the NVIDIA wheel in tests/runtime/test_tensor_maps.py).
"""

from __future__ import annotations

import ctypes
import functools

from cuvil_dsl.codegen.artifact import TensorMap
from cuvil_dsl.diagnostics import InternalError
from cuvil_dsl.types import DType

# cuda.h enums (CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle, ...)
DATA_TYPE = {DType.F16: 6, DType.BF16: 9, DType.F32: 7}  # FLOAT16, BFLOAT16, FLOAT32
INTERLEAVE_NONE = 0
SWIZZLE_128B = 3
L2_PROMOTION_256B = 3
OOB_FILL_ZERO = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: elements out of bounds read as zero
MAP_BYTES = 128  # sizeof(CUtensorMap), alignas(128)


class TensorMapCell:
    """128 bytes of descriptor at a 128-byte aligned host address (``cuda.h`` declares the
    struct ``alignas(128)``); the kernel's parameter array points at :attr:`address`."""

    def __init__(self) -> None:
        self._raw = (ctypes.c_ubyte * (2 * MAP_BYTES))()
        self.address = (ctypes.addressof(self._raw) + MAP_BYTES - 1) & ~(MAP_BYTES - 1)

    @property
    def value(self) -> bytes:
        """The descriptor's bytes (what a captured graph node holds)."""
        return ctypes.string_at(self.address, MAP_BYTES)


@functools.cache
def _encode_tiled():
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    except (OSError, AttributeError) as exc:
        raise InternalError(f"cuTensorMapEncodeTiled is unavailable (libcuda.so.1: {exc}); TMA kernels need "
                            "a CUDA 12.0+ driver") from None
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                   ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def encode(cell: TensorMapCell, spec: TensorMap, dtype: DType, pointer: int) -> None:
    """Fill ``cell`` with the descriptor of ``spec`` over the buffer at device address ``pointer``."""
    if dtype not in DATA_TYPE:
        raise InternalError(f"no TMA data type for {dtype.value}")
    rank = len(spec.dims)
    if rank not in (2, 3) or len(spec.box) != rank or (rank == 3) != (spec.batch_stride > 0):
        raise InternalError(f"tensor map of buffer `{spec.buffer}`: dims {spec.dims}, box {spec.box}, batch stride "
                            f"{spec.batch_stride} B (2 dims, or 3 with a batch stride)")
    dims = (ctypes.c_uint64 * rank)(*spec.dims)
    strides = (ctypes.c_uint64 * (rank - 1))(*((spec.stride, spec.batch_stride) if rank == 3 else (spec.stride,)))
    box = (ctypes.c_uint32 * rank)(*spec.box)
    ones = (ctypes.c_uint32 * rank)(*([1] * rank))
    status = _encode_tiled()(cell.address, DATA_TYPE[dtype], rank, pointer, dims, strides, box, ones,
                             INTERLEAVE_NONE, SWIZZLE_128B, L2_PROMOTION_256B, OOB_FILL_ZERO)
    if status != 0:
        raise InternalError(f"cuTensorMapEncodeTiled failed (CUresult {status}) for buffer `{spec.buffer}` at "
                            f"{pointer:#x}: dims {spec.dims}, stride {spec.stride} B, batch stride "
                            f"{spec.batch_stride} B, box {spec.box}")
