"""What a renderer hands to the compiler and the runtime for one fused kernel.

Kernels are specialised on the bound sizes (the shape signature): sizes become compile-time
constants, so row loops unroll and tiles are exact. Scalar parameters stay run-time arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvil_dsl.diagnostics import Span
from cuvil_dsl.types import DType


@dataclass(frozen=True)
class TensorMap:
    """A TMA descriptor (``CUtensorMap``, 128 bytes) of a 2-D view of buffer ``buffer``, tiled, or a 3-D one whose
    third dimension is a batch.

    The runtime encodes it with ``cuTensorMapEncodeTiled`` from the buffer's current device
    pointer (again whenever that pointer changes): ``dims`` and ``box`` in elements, innermost
    first; ``stride`` the byte stride of the outer dimension (and ``batch_stride`` that of the batch, with three
    ``dims``); 128-byte swizzle, zero fill out of bounds, no interleave, element strides 1.
    """

    buffer: str  # the plan buffer's value id
    dims: tuple[int, ...]  # (inner, outer) or (inner, outer, batch) extents in elements
    stride: int  # bytes from one outer index to the next (a multiple of 16)
    box: tuple[int, ...]  # (inner, outer[, 1]) elements one copy moves; inner * itemsize == 128
    batch_stride: int = 0  # bytes from one batch index to the next (a multiple of 16), three dims only


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter, in order.

    ``buffer``: the device pointer of the buffer named ``name`` (a plan Buffer).
    ``scalar``: the host-evaluated uniform value ``name``, passed as ``dtype``'s C type
    (f16/bf16 uniforms are passed as float: the value is already rounded to the dtype).
    ``tensormap``: a ``__grid_constant__`` TMA descriptor (``tensor_map``) of a buffer, passed by
    value; ``name`` is unique in the kernel, ``dtype`` the buffer's.
    ``workspace``: the device pointer of the kernel's own scratch memory, ``workspace`` bytes that
    the runtime allocates once per loaded kernel, outside the arena (so outside snapshots and guard
    bands), zeroed before the first launch; the kernel must leave it as it found what it relies on
    (split-K's tile counters go back to 0 at the end of every launch). ``dtype`` is unused (f32).
    """

    kind: str  # "buffer" | "scalar" | "tensormap" | "workspace"
    name: str
    dtype: DType
    ctype: str  # the C parameter type, e.g. "const __half* __restrict__" or "float"
    tensor_map: TensorMap | None = None
    workspace: int = 0  # bytes, for kind "workspace"


@dataclass(frozen=True)
class RenderedKernel:
    name: str  # the fused kernel's name, e.g. "forward_k1"
    entry: str  # the extern "C" symbol in ``source``
    source: str  # one CUDA C translation unit
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int  # dynamic shared memory per block
    args: tuple[KernelArg, ...]
    options: tuple[str, ...]  # extra compiler options (e.g. -maxrregcount=128)
    graph: str | None
    span: Span
    # > 0: a persistent kernel of clusters of this many CTAs that walks its work by gridDim.x, so
    # fewer clusters give the same results; the runtime launches at most as many as the device runs
    # at once (runtime/clusters.py). 0: the grid is fixed.
    persistent_cluster: int = 0
