"""The row template at the benchmarks' other shapes (benchmarks/shapes/): each row is read from memory
once (cached in registers, never streamed pass after pass), norms load their weight and bias as they
store instead of holding them with the row, and a block of 512 threads asks for a second one a
multiprocessor. ``benchmarks/ab_rows.py`` measured each on the H200 (session 13); these keep the
choices, and compile them without spills."""

from __future__ import annotations

import re

import pytest
from codegen_cases import ROOT, compile_kernel, load_case

from cuvil_dsl.codegen import render_cuda

SHAPES = ROOT / "benchmarks" / "shapes"


def _render(spec, **sizes):
    case = load_case(spec)
    (k,) = render_cuda(case.plan("sm_90"), {**case.binding.sizes, **sizes}, "sm_90")
    note = next(line for line in k.source.splitlines() if line.startswith("// row template"))
    return k, note


def _min_blocks(k) -> int:
    return int(re.search(r"__launch_bounds__\((\d+), (\d+)\)", k.source).group(2))


def test_long_rows_are_cached_at_more_threads():
    """f16 rows of 32768 at 256 threads would need 16 vectors a thread, past the register cache (8):
    512 threads hold them, so each row is read once instead of once per pass."""
    k, note = _render(SHAPES / "softmax_f16-long-rows.yaml")
    assert k.block == (512, 1, 1) and "8 per thread, cached" in note


@pytest.mark.parametrize("n, threads, how", [
    (1 << 17, 256, "64 per thread, streamed"),  # 1024 threads cannot cache it either: streamed, as before
    (1536, 128, "2 per thread, cached"),  # a short row keeps its default
])
def test_rows_the_threads_do_not_help_keep_their_default(n, threads, how):
    k, note = _render(SHAPES / "softmax_f16-long-rows.yaml", M=4096, N=n)
    assert k.block == (threads, 1, 1) and how in note, note


def test_the_benchmark_softmax_keeps_its_shape():
    k, note = _render(ROOT / "benchmarks" / "softmax_f16.yaml")
    assert k.block == (256, 1, 1) and "2 per thread, cached" in note and _min_blocks(k) == 4


@pytest.mark.parametrize("spec, threads, blocks", [
    (ROOT / "benchmarks" / "layernorm_f16.yaml", 128, 6),  # rows of 4096: as before, 6 blocks of 128
    (SHAPES / "layernorm_f16-wide.yaml", 512, 2),  # rows of 16384: two blocks of 512, not one
    (SHAPES / "layernorm_f16-narrow.yaml", 256, 1),  # rows of 1024: a warp a row, ptxas free
])
def test_norms_load_weight_and_bias_as_they_store(spec, threads, blocks):
    k, note = _render(spec)
    assert "prefetched 0" in note and "cached" in note
    assert k.block == (threads, 1, 1) and _min_blocks(k) == blocks
    assert not re.search(r"\bpre\d+\[", k.source)  # no weight or bias array held with the row


@pytest.mark.parametrize("name", ["softmax_f16-long-rows", "layernorm_f16-wide", "layernorm_f16-narrow"])
def test_they_compile_without_spills(name, monkeypatch, tmp_path):
    k, _ = _render(SHAPES / f"{name}.yaml")
    assert compile_kernel(k, monkeypatch, tmp_path).resources[k.entry].spill_bytes == 0


NORMS = """pipeline ln32(x: f32[M, N], w: f32[N], b: f32[N]) -> y: f32[M, N] {
    graph forward { y = layernorm(x, w, b, eps=1e-5) }
}
pipeline rms16(x: f16[M, N], w: f16[N]) -> y: f16[M, N] {
    graph forward { y = rmsnorm(x, w, eps=1e-5) }
}
"""


@pytest.mark.parametrize("entry, n, threads, blocks", [
    ("ln32", 16384, 1024, 1),  # two blocks of 1024 would leave 32 registers a thread: it would spill
    ("ln32", 8192, 512, 2),
    ("rms16", 16384, 512, 2),
])
def test_a_second_block_only_where_its_registers_suffice(entry, n, threads, blocks, monkeypatch, tmp_path):
    (tmp_path / "norms.cuvil").write_text(NORMS)
    spec = tmp_path / f"{entry}.yaml"
    spec.write_text(f"pipeline: norms.cuvil\nentry: {entry}\nshapes: {{M: 4096, N: {n}}}\n")
    k, note = _render(spec)
    assert k.block == (threads, 1, 1) and _min_blocks(k) == blocks and "cached" in note, note
    assert compile_kernel(k, monkeypatch, tmp_path / "cache").resources[k.entry].spill_bytes == 0


def test_short_16_bit_rows_go_two_to_a_warp_held_as_halves(monkeypatch, tmp_path):
    """Rows of 512 halves (two vectors a thread): each warp takes two rows, the second row's loads issued
    before the first row's reductions, the cache held as halves (47 registers); the grid halves."""
    k, note = _render(SHAPES / "softmax_f16-short-rows.yaml")
    assert "2 rows a warp" in note and "cached raw" in note, note
    assert k.grid == (262144 // 16, 1, 1) and k.block == (256, 1, 1)
    loop = k.source[k.source.index("for (int rr = 0; rr < 2; ++rr)"):]
    # the next row's loads come before this row's first reduction
    assert loop.index("the next row's loads") < loop.index("cvl_warp_max")
    assert re.search(r"__align__\(16\) __half c\d+\[2\]\[8\];", k.source)  # halves, not floats
    assert compile_kernel(k, monkeypatch, tmp_path).resources[k.entry].spill_bytes == 0


@pytest.mark.parametrize("name", ["layernorm_f16-narrow", "softmax_f32-odd-rows"])
def test_longer_or_32_bit_rows_keep_a_row_a_warp(name):
    """Rows of four vectors a thread (2 rows a warp: 128 registers, 17% slower) and f32 rows (nothing to
    halve) stay one a warp, their cache in f32."""
    k, note = _render(SHAPES / f"{name}.yaml")
    assert "rows a warp" not in note and "cached raw" not in note and "cached" in note, note


@pytest.mark.parametrize("rows", [45, 46, 47, 48, 49])
def test_two_rows_a_warp_guard_a_short_last_warp(rows):
    """Row counts that leave the last warp one row or none: every row loop and look-ahead is guarded, the
    grid covers every row once."""
    k, note = _render(SHAPES / "softmax_f16-short-rows.yaml", M=rows)
    assert "2 rows a warp" in note
    assert k.grid == (-(-rows // 16), 1, 1)
    if rows % 16:
        assert f"if (first < {rows})" in k.source and f"if (row >= {rows}) break;" in k.source
        assert f"row + 1 < {rows}" in k.source
    else:
        assert "break;" not in k.source


def test_16_lanes_a_row_only_where_the_rows_pair_up():
    """row_lanes 16 puts two rows in a warp's shuffles; an odd row count would split a warp's rows across
    the end, so it stays at 32 lanes."""
    from cuvil_dsl.codegen import cuda_rows

    cuda_rows.TUNING.update({"row_lanes": 16})
    try:
        k_even, note_even = _render(SHAPES / "softmax_f16-short-rows.yaml", M=64)
        k_odd, note_odd = _render(SHAPES / "softmax_f16-short-rows.yaml", M=63)
    finally:
        cuda_rows.TUNING.clear()
    assert "16 per row" in note_even and "cvl_warp_max(acc_0, 16)" in k_even.source
    assert "32 per row" in note_odd and "cvl_warp_max(acc_0, 32)" in k_odd.source
