"""CUDA errors turned into :class:`RunFailure` s that name the kernel, its graph and its pipeline line.

Kernel faults are asynchronous: they surface at the next synchronising call, not at the launch.
The executor therefore remembers the last kernel it launched (and, on a checked execution, waits
after every launch, so the kernel named is exactly the one that faulted). A fault such as an
illegal address is *sticky*: the CUDA context is unusable afterwards, and the message says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cuvil_dsl.diagnostics import RunFailure

if TYPE_CHECKING:
    from cuvil_dsl.codegen.artifact import RenderedKernel

# cudaError_t values (the same numbers in CUresult) after which the context is lost for good.
STICKY_ERRORS = {
    710: "a device-side assert failed",
    714: "hardware stack error",
    715: "illegal instruction",
    716: "misaligned address",
    717: "invalid address space",
    718: "invalid program counter",
    719: "launch failure",
    700: "illegal memory access",
}
CAPTURE_INVALIDATED = 901


def cuda_error_types() -> tuple[type[BaseException], ...]:
    """CuPy's runtime and driver error classes (imported only when a GPU path runs)."""
    from cupy_backends.cuda.api.driver import CUDADriverError
    from cupy_backends.cuda.api.runtime import CUDARuntimeError

    return (CUDARuntimeError, CUDADriverError)


def status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return int(status) if status is not None else None


def is_sticky(exc: BaseException) -> bool:
    return status_of(exc) in STICKY_ERRORS


def kernel_failure(exc: BaseException, kernel: RenderedKernel, graph: str | None, note: str | None = None) -> RunFailure:
    """``FILE:LINE:COL: kernel `k` (graph `g`) failed: <CUDA error> (<note>)`` plus what it means."""
    where = f"kernel `{kernel.name}`" + (f" in graph `{graph}`" if graph else "")
    text = f"{kernel.span}: {where} failed: {exc}" + (f" ({note})" if note else "")
    if is_sticky(exc):
        text += ("; the CUDA context is lost (a sticky error): this process can no longer use the GPU. "
                 "Rerun with --sanitize memcheck to find the faulting access")
    elif status_of(exc) == CAPTURE_INVALIDATED:
        text += "; something forbidden during capture (an allocation, a synchronisation) ran while it was captured"
    return RunFailure(text)
