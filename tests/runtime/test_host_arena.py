"""The arena layout, guard bands and snapshots, on the host arena (no GPU needed)."""

from __future__ import annotations

import hashlib

import ml_dtypes
import numpy as np
import pytest

from cuvil_dsl.diagnostics import InternalError
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes.plan import Buffer, FusionPlan
from cuvil_dsl.runtime.base import Snapshot
from cuvil_dsl.runtime.host_arena import HostArena
from cuvil_dsl.runtime.layout import ALIGNMENT, CANARY, GUARD_BYTES, ArenaLayout, BufferSpec, storage_dtype
from cuvil_dsl.types import DType

SPECS = [
    BufferSpec("x", "input", DType.F32, (3, 5)),  # 60 bytes: not a multiple of the alignment
    BufferSpec("mask", "input", DType.BOOL, (7,)),  # odd size
    BufferSpec("h", "intermediate", DType.BF16, (4, 4)),
    BufferSpec("y", "result", DType.F16, (9,)),
    BufferSpec("n", "result", DType.I32, ()),  # rank 0
]


@pytest.fixture
def arena() -> HostArena:
    return HostArena(ArenaLayout.build(SPECS))


def test_layout_aligns_every_buffer_between_its_own_guard_bands():
    layout = ArenaLayout.build(SPECS)
    previous_end = 0
    for slot, spec in zip(layout.slots, SPECS):
        assert slot.offset % ALIGNMENT == 0
        assert slot.nbytes == int(np.prod(spec.shape)) * spec.dtype.itemsize
        assert slot.guard_before == (slot.offset - GUARD_BYTES, slot.offset)
        assert slot.guard_before[0] == previous_end  # bands are never shared between neighbours
        assert slot.guard_after[0] == slot.end
        assert slot.guard_after[1] - slot.end >= GUARD_BYTES
        assert slot.guard_after[1] % ALIGNMENT == 0
        previous_end = slot.guard_after[1]
    assert layout.total_bytes == previous_end


def test_layout_refuses_duplicate_names_and_misaligned_guards():
    with pytest.raises(ValueError):
        ArenaLayout.build([SPECS[0], SPECS[0]])
    with pytest.raises(ValueError):
        ArenaLayout.build(SPECS, alignment=256, guard_bytes=100)


def test_fresh_arena_holds_the_canary_by_absolute_position(arena):
    raw = arena._bytes
    assert raw.ctypes.data % ALIGNMENT == 0
    assert np.array_equal(raw[:4], [0xC3, 0x5A, 0xC3, 0x5A])
    assert np.array_equal(raw, np.resize(CANARY, arena.layout.total_bytes))
    assert arena.check_guards() == []


def test_views_have_declared_dtypes_and_shapes(arena):
    assert arena.view("x").dtype == np.float32 and arena.view("x").shape == (3, 5)
    assert arena.view("mask").dtype == np.bool_
    assert arena.view("h").dtype == ml_dtypes.bfloat16
    assert arena.view("n").shape == ()
    assert storage_dtype(DType.BF16) == np.uint16 and storage_dtype(DType.F16) == np.float16


@pytest.mark.parametrize("name", [s.name for s in SPECS])
def test_a_write_one_element_past_a_buffer_damages_only_its_band(arena, name):
    slot = arena.layout.slot(name)
    arena._bytes[slot.end:slot.end + slot.dtype.itemsize] = 0
    assert arena.check_guards() == [name]
    assert arena.snapshot("cpu").damaged_guards() == [name]


def test_a_write_before_a_buffer_is_caught_and_writes_inside_are_not(arena):
    arena.upload("x", np.full((3, 5), 7.0, np.float32))
    arena.view("y")[:] = 1.0
    assert arena.check_guards() == []
    slot = arena.layout.slot("y")
    arena._bytes[slot.offset - 1] ^= 0xFF
    assert arena.check_guards() == ["y"]


def test_upload_download_round_trip_and_bf16_bits(arena):
    values = np.arange(16, dtype=np.float32).reshape(4, 4).astype(ml_dtypes.bfloat16)
    arena.upload("h", values.view(np.uint16))  # bit patterns are accepted for bf16
    out = arena.download("h")
    assert out.dtype == ml_dtypes.bfloat16 and np.array_equal(out.view(np.uint16), values.view(np.uint16))
    out[0, 0] = 99  # a download is a copy
    assert arena.view("h")[0, 0] == 0


def test_upload_refuses_wrong_shape_or_dtype(arena):
    with pytest.raises(InternalError, match="`x` takes f32"):
        arena.upload("x", np.zeros((5, 3), np.float32))
    with pytest.raises(InternalError):
        arena.upload("x", np.zeros((3, 5), np.float64))


def test_snapshot_records_layout_digests_and_guards(arena):
    arena.upload("x", np.linspace(0, 1, 15, dtype=np.float32).reshape(3, 5))
    snap = arena.snapshot("cpu")
    assert (snap.backend, snap.alignment, snap.guard_bytes) == ("cpu", ALIGNMENT, GUARD_BYTES)
    record = next(b for b in snap.buffers if b.name == "x")
    assert record.digest == hashlib.sha256(arena.view("x").tobytes()).hexdigest()
    assert (record.role, record.dtype, record.shape, record.guard_ok) == ("input", "f32", (3, 5), True)
    assert Snapshot.from_json(snap.to_json()) == snap


def test_snapshots_differ_exactly_where_data_differs():
    first, second = HostArena(ArenaLayout.build(SPECS)), HostArena(ArenaLayout.build(SPECS))
    assert first.snapshot("cpu") == second.snapshot("cpu")
    second.view("y")[3] = 2.0
    changed = [a.name for a, b in zip(first.snapshot("cpu").buffers, second.snapshot("cpu").buffers)
               if a.digest != b.digest]
    assert changed == ["y"]


def test_layout_for_a_plan_resolves_symbols():
    checked = check_source("pipeline f(x: f32[N, 3]) -> y: f32[N, 3] {\n    y = x * 2.0\n}\n")
    pipeline = checked.module.pipelines[0]
    plan = FusionPlan(pipeline, (), (), (Buffer("x", pipeline.params[0].type, "input"),
                                        Buffer("y", pipeline.results[0].type, "result")))
    layout = ArenaLayout.for_plan(plan, {"N": 10})
    assert [(s.name, s.shape, s.nbytes) for s in layout.slots] == [("x", (10, 3), 120), ("y", (10, 3), 120)]
    assert "y" in layout and "z" not in layout
