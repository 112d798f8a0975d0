"""Where every buffer of a pipeline instance lives in its arena, and what its guard bands hold.

One arena holds all buffers (inputs, intermediates, results) of one shape signature, on the
device (:mod:`cuvil_dsl.runtime.arena`) or the host (:mod:`cuvil_dsl.runtime.host_arena`). Both
use this layout, so a snapshot means the same thing on every backend:

``[guard][buffer][pad to alignment + guard][guard][buffer][...]``

Each buffer starts on an ``alignment`` boundary (vector loads and TMA-friendly addresses) and has
two guard bands of its own: ``guard_bytes`` before it, and after it everything up to the next
alignment boundary plus ``guard_bytes``. Bands are never shared, so a write one element past a
buffer damages that buffer's band only and the report names the right buffer. The whole arena is
first filled with a fixed two-byte canary repeated by absolute position; a band is intact while it
still holds exactly the canary bytes of its positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Iterable

import numpy as np

from cuvil_dsl.passes.plan import FusionPlan
from cuvil_dsl.runtime.base import BufferRecord, Snapshot, digest
from cuvil_dsl.types import DType, concrete_shape

ALIGNMENT = 256
GUARD_BYTES = 256
# Non-trivial on purpose: neither zero nor 0xFF, not a small float or int, different in each byte,
# so neither a zero fill nor a stray store of a common value can look like an intact band.
CANARY = np.array([0xC3, 0x5A], dtype=np.uint8)
CANARY_WORD = int(CANARY.view("<u2")[0])  # the same two bytes as one little-endian uint16: fills run as 16-bit stores


def storage_dtype(dtype: DType) -> np.dtype:
    """The element type of a device view: bf16 as uint16 bit patterns (CuPy has no bfloat16)."""
    return np.dtype(np.uint16) if dtype is DType.BF16 else dtype.numpy


def _align_up(value: int, alignment: int) -> int:
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class Slot:
    """One buffer's place in the arena; ranges are ``[start, end)`` byte offsets."""

    name: str
    role: str  # input | result | intermediate
    dtype: DType
    shape: tuple[int, ...]
    offset: int
    nbytes: int
    guard_before: tuple[int, int]
    guard_after: tuple[int, int]

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


@dataclass(frozen=True)
class BufferSpec:
    """What the layout needs to know about one buffer."""

    name: str
    role: str
    dtype: DType
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ArenaLayout:
    slots: tuple[Slot, ...]
    total_bytes: int
    alignment: int = ALIGNMENT
    guard_bytes: int = GUARD_BYTES

    @staticmethod
    def build(buffers: Iterable[BufferSpec], alignment: int = ALIGNMENT, guard_bytes: int = GUARD_BYTES) -> "ArenaLayout":
        if alignment <= 0 or guard_bytes % alignment:
            raise ValueError("guard_bytes must be a multiple of a positive alignment")
        slots = []
        cursor = 0
        for spec in buffers:
            nbytes = math.prod(spec.shape) * spec.dtype.itemsize
            offset = cursor + guard_bytes
            after_end = _align_up(offset + nbytes, alignment) + guard_bytes
            slots.append(Slot(spec.name, spec.role, spec.dtype, tuple(spec.shape), offset, nbytes,
                              (cursor, offset), (offset + nbytes, after_end)))
            cursor = after_end
        if len({s.name for s in slots}) != len(slots):
            raise ValueError("buffer names must be unique")
        return ArenaLayout(tuple(slots), max(cursor, alignment), alignment, guard_bytes)

    @staticmethod
    def for_plan(plan: FusionPlan, sizes: dict[str, int]) -> "ArenaLayout":
        """The layout of every buffer of ``plan`` at the shape signature ``sizes``, in plan order."""
        return ArenaLayout.build(
            BufferSpec(b.name, b.role, b.type.dtype, concrete_shape(b.type.shape, sizes)) for b in plan.buffers
        )

    @cached_property
    def _by_name(self) -> dict[str, Slot]:
        return {s.name: s for s in self.slots}

    def slot(self, name: str) -> Slot:
        return self._by_name[name]

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def canary_image(self) -> np.ndarray:
        """A fresh host image of the whole arena as it starts: canary bytes everywhere."""
        return np.full(self.total_bytes // 2, CANARY_WORD, dtype="<u2").view(np.uint8)

    @cached_property
    def guard_positions(self) -> np.ndarray:
        """Byte offsets of every guard band, slot by slot (before, then after): one gather reads them all."""
        ranges = [np.arange(*band, dtype=np.int64) for s in self.slots for band in (s.guard_before, s.guard_after)]
        return np.concatenate(ranges) if ranges else np.zeros(0, dtype=np.int64)

    @cached_property
    def _guard_expected(self) -> np.ndarray:
        return CANARY[self.guard_positions % len(CANARY)]

    @cached_property
    def _guard_owner(self) -> np.ndarray:
        counts = [(s.guard_before[1] - s.guard_before[0]) + (s.guard_after[1] - s.guard_after[0]) for s in self.slots]
        return np.repeat(np.arange(len(self.slots)), counts)

    def damaged(self, guard_bytes: np.ndarray) -> list[str]:
        """Names of the buffers whose bands differ from the canary; ``guard_bytes`` is the arena
        read at :attr:`guard_positions`."""
        bad = np.asarray(guard_bytes, dtype=np.uint8) != self._guard_expected
        if not bad.any():  # the usual answer; np.unique would import numpy.ma on a process's first check
            return []
        return [self.slots[i].name for i in np.unique(self._guard_owner[bad])]

    def snapshot(self, backend: str, image: np.ndarray) -> Snapshot:
        """The snapshot of an arena whose bytes are ``image`` (uint8, :attr:`total_bytes` long)."""
        image = np.asarray(image, dtype=np.uint8)
        damaged = set(self.damaged(image[self.guard_positions]))
        records = tuple(
            BufferRecord(s.name, s.role, s.dtype.value, s.shape, s.offset, s.nbytes,
                         digest(image[s.offset:s.end]), s.name not in damaged)
            for s in self.slots
        )
        return Snapshot(backend, self.alignment, self.guard_bytes, records)
