"""The arena on the GPU: every buffer of a pipeline instance in one device allocation.

It is allocated once, before any capture, with its own ``cudaMalloc`` (not CuPy's pool), so a
captured graph's pointers stay valid for the arena's life, nothing is allocated while capturing
or replaying, and compute-sanitizer's ``--padding`` surrounds exactly this allocation. The layout
and the guard-band semantics are :mod:`cuvil_dsl.runtime.layout`'s, shared with the host arena.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from cuvil_dsl.diagnostics import InternalError, Span, UserError, error
from cuvil_dsl.runtime.base import Snapshot
from cuvil_dsl.runtime.host_arena import checked_host_array
from cuvil_dsl.runtime.layout import CANARY_WORD, ArenaLayout, storage_dtype
from cuvil_dsl.types import DType


@functools.cache
def _memset_d16_async():
    """``cuMemsetD16Async`` bound with ctypes from ``libcuda.so.1`` (the library CuPy already loaded), or None where it
    cannot be. The arena's canary fill goes through it rather than CuPy's ``fill``: that is an elementwise kernel,
    and the first one a process launches costs CuPy an NVRTC compile to key its kernel cache (about 26 ms of a
    warm start's 145 on the H200, 2026-12-01)."""
    try:
        fn = ctypes.CDLL("libcuda.so.1").cuMemsetD16Async
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_uint64, ctypes.c_ushort, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


class DeviceArena:
    """All buffers of one pipeline instance, 256-byte aligned, between canary guard bands.

    Must be created and used with its device current. Views are CuPy arrays of each buffer's
    storage dtype (:func:`~cuvil_dsl.runtime.layout.storage_dtype`) and concrete shape.
    """

    def __init__(self, layout: ArenaLayout, span: Span, what: str, stream=None):
        """``stream``: the CuPy stream the canary fill runs on, ahead of everything the executor then queues there
        (default: CuPy's current stream)."""
        import cupy

        free, total = cupy.cuda.runtime.memGetInfo()
        if layout.total_bytes > free:
            gib = 2.0**30
            message = (
                f"{what} needs {layout.total_bytes / gib:.2f} GiB of device memory ({len(layout.slots)} buffers "
                f"with guard bands); the GPU has {free / gib:.2f} GiB free of {total / gib:.2f} GiB"
            )
            raise UserError([error("E509", message, span, hint="use smaller shapes")])
        self.layout = layout
        self._memory = cupy.cuda.Memory(layout.total_bytes)
        self._bytes = cupy.ndarray((layout.total_bytes,), cupy.uint8, cupy.cuda.MemoryPointer(self._memory, 0))
        stream = stream if stream is not None else cupy.cuda.get_current_stream()
        memset = _memset_d16_async()
        if memset is None or layout.total_bytes % 2:
            with stream:
                self._bytes.view(cupy.uint16).fill(CANARY_WORD)  # on the device: no arena-sized host image
        else:
            status = memset(self._memory.ptr, CANARY_WORD, layout.total_bytes // 2, stream.ptr)
            if status != 0:
                raise InternalError(f"cuMemsetD16Async failed (CUresult {status}) filling the arena of {what} "
                                    f"({layout.total_bytes} bytes)")
        self._views = {
            s.name: self._bytes[s.offset:s.end].view(storage_dtype(s.dtype)).reshape(s.shape) for s in layout.slots
        }
        self._guard_positions = cupy.asarray(layout.guard_positions)

    def view(self, name: str):
        """The live buffer as a CuPy array (bf16 as uint16 bit patterns)."""
        return self._views[name]

    def pointer(self, name: str) -> int:
        return self._views[name].data.ptr

    def upload(self, name: str, array: np.ndarray, stream) -> None:
        """Copy a host array of the buffer's declared dtype into the buffer, in ``stream`` order."""
        slot = self.layout.slot(name)
        data = checked_host_array(slot, array)
        self._views[name].set(data.view(np.uint16) if slot.dtype is DType.BF16 else data, stream=stream)

    def copy_from_device(self, name: str, array, stream) -> None:
        """Copy a CuPy array (storage dtype, buffer's shape, any strides) device to device, in ``stream`` order."""
        import cupy

        dst = self._views[name]
        if array.flags.c_contiguous:
            dst.data.copy_from_device_async(array.data, dst.nbytes, stream)
        else:
            with stream:
                cupy.copyto(dst, array)

    def download(self, name: str, stream) -> np.ndarray:
        """The buffer as a host array of its declared dtype (waits for ``stream``)."""
        slot = self.layout.slot(name)
        host = self._views[name].get(stream=stream)
        return host.view(slot.dtype.numpy) if slot.dtype is DType.BF16 else host

    def snapshot(self, backend: str, stream) -> Snapshot:
        return self.layout.snapshot(backend, self._bytes.get(stream=stream))

    def check_guards(self, stream) -> list[str]:
        """Names of the buffers whose guard bands no longer hold the canary (one gather, one small copy)."""
        with stream:
            bands = self._bytes[self._guard_positions]
        return self.layout.damaged(bands.get(stream=stream))

    def release(self) -> None:
        self._views.clear()
        self._bytes = None
        self._guard_positions = None
        self._memory = None
