"""The arena on the GPU: every buffer of a pipeline instance in one device allocation.

It is allocated once, before any capture, with its own ``cudaMalloc`` (not CuPy's pool), so a
captured graph's pointers stay valid for the arena's life, nothing is allocated while capturing
or replaying, and compute-sanitizer's ``--padding`` surrounds exactly this allocation. The layout
and the guard-band semantics are :mod:`cuvil_dsl.runtime.layout`'s, shared with the host arena.
"""

from __future__ import annotations

import numpy as np

from cuvil_dsl.diagnostics import Span, UserError, error
from cuvil_dsl.runtime.base import Snapshot
from cuvil_dsl.runtime.host_arena import checked_host_array
from cuvil_dsl.runtime.layout import CANARY_WORD, ArenaLayout, storage_dtype
from cuvil_dsl.types import DType


class DeviceArena:
    """All buffers of one pipeline instance, 256-byte aligned, between canary guard bands.

    Must be created and used with its device current. Views are CuPy arrays of each buffer's
    storage dtype (:func:`~cuvil_dsl.runtime.layout.storage_dtype`) and concrete shape.
    """

    def __init__(self, layout: ArenaLayout, span: Span, what: str):
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
        self._bytes.view(cupy.uint16).fill(CANARY_WORD)  # on the device: no arena-sized host image
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
