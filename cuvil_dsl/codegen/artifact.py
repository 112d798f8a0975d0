"""What a renderer hands to the compiler and the runtime for one fused kernel.

Kernels are specialised on the bound sizes (the shape signature): sizes become compile-time
constants, so row loops unroll and tiles are exact. Scalar parameters stay run-time arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuvil_dsl.diagnostics import Span
from cuvil_dsl.types import DType


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter, in order.

    ``buffer``: the device pointer of the buffer named ``name`` (a plan Buffer).
    ``scalar``: the host-evaluated uniform value ``name``, passed as ``dtype``'s C type
    (f16/bf16 uniforms are passed as float: the value is already rounded to the dtype).
    """

    kind: str  # "buffer" | "scalar"
    name: str
    dtype: DType
    ctype: str  # the C parameter type, e.g. "const __half* __restrict__" or "float"


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
