"""benchmarks/ab_layout.py without a GPU: its kernels build for sm_90 (the replica with plain loads does
load without the read-only path), its placements keep x and y apart and 16-byte aligned, and the script
exits 2 without a GPU."""

from __future__ import annotations

from bench_support import build_for_sm_90, exits_2_without_gpu, load_script

from cuvil_dsl.runtime.layout import ArenaLayout, BufferSpec
from cuvil_dsl.types import DType


def test_kernels_build_for_sm_90_and_the_plain_loads_skip_the_read_only_path(tmp_path):
    s = load_script("ab_layout")
    unit = build_for_sm_90(s.PLAIN_SOURCE, ("vec2", "vec2_plain"), tmp_path)
    assert all(unit.resources[n].spill_bytes == 0 for n in ("vec2", "vec2_plain"))
    assert "ld.global.v4.f32" in s.PLAIN_SOURCE and "ld.global.nc" not in s.PLAIN_SOURCE


def test_the_placements_are_apart_aligned_and_the_arenas_own():
    s = load_script("ab_layout")
    for label, ox, oy in s.PLACED:
        assert oy >= ox + s.BYTES and ox % 16 == 0 and oy % 16 == 0, label
    layout = ArenaLayout.build([BufferSpec("x", "input", DType.F32, (s.N,)),
                                BufferSpec("y", "result", DType.F32, (s.N,))])
    assert (layout.slot("x").offset, layout.slot("y").offset) == (s.ARENA_X, s.ARENA_Y)  # the arena's, today


def test_without_a_gpu_it_exits_2(capsys):
    exits_2_without_gpu(load_script("ab_layout"), "ab_layout", capsys, argv=[])
