"""The arena in host memory: the CPU and reference backends' buffers, with the GPU arena's guards.

Same layout and the same API as :class:`cuvil_dsl.runtime.arena.DeviceArena` (minus streams), so
snapshots, guard checks and replays compare across backends. Views are NumPy arrays of each
buffer's declared dtype (bf16 as ``ml_dtypes.bfloat16``) straight over the arena's bytes, so a
numba kernel writing past a view's end lands in that buffer's guard band, as on the GPU.
"""

from __future__ import annotations

import numpy as np

from cuvil_dsl.diagnostics import InternalError
from cuvil_dsl.runtime.base import Snapshot
from cuvil_dsl.runtime.layout import CANARY_WORD, ArenaLayout, Slot
from cuvil_dsl.types import DType


def checked_host_array(slot: Slot, array: np.ndarray) -> np.ndarray:
    """``array`` as C-contiguous data of ``slot``'s dtype and shape.

    Callers validate user data first (with spans, E506); a mismatch here is a bug in a caller.
    bf16 may come as ``ml_dtypes.bfloat16`` or as uint16 bit patterns.
    """
    array = np.asarray(array)
    want = slot.dtype.numpy
    if slot.dtype is DType.BF16 and array.dtype == np.uint16:
        array = array.view(want)
    if array.dtype != want or array.shape != slot.shape:
        raise InternalError(
            f"buffer `{slot.name}` takes {slot.dtype.value}{list(slot.shape)}, was given {array.dtype}{list(array.shape)}"
        )
    return np.ascontiguousarray(array)


class HostArena:
    """All buffers of one pipeline instance in one aligned host allocation between guard bands."""

    def __init__(self, layout: ArenaLayout):
        self.layout = layout
        # Over-allocate so the arena's first byte sits on an alignment boundary, as on the GPU.
        raw = np.empty(layout.total_bytes + layout.alignment, dtype=np.uint8)
        start = -raw.ctypes.data % layout.alignment
        self._bytes = raw[start:start + layout.total_bytes]
        self._bytes.view("<u2")[:] = CANARY_WORD  # the total is a multiple of the alignment: even
        self._views = {
            s.name: self._bytes[s.offset:s.end].view(s.dtype.numpy).reshape(s.shape) for s in layout.slots
        }

    def view(self, name: str) -> np.ndarray:
        """The live buffer (writes go straight into the arena)."""
        return self._views[name]

    def upload(self, name: str, array: np.ndarray) -> None:
        self._views[name][...] = checked_host_array(self.layout.slot(name), array)

    def download(self, name: str) -> np.ndarray:
        """A copy of the buffer, of its declared dtype."""
        return self._views[name].copy()

    def snapshot(self, backend: str) -> Snapshot:
        return self.layout.snapshot(backend, self._bytes)

    def check_guards(self) -> list[str]:
        """Names of the buffers whose guard bands no longer hold the canary."""
        return self.layout.damaged(self._bytes[self.layout.guard_positions])
