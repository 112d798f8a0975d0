"""The elementwise template's A/B switches (``cuda_elementwise.TUNING``): each renders a kernel
that covers every element once and compiles without spills (benchmarks/ab_rows.py times them)."""

from __future__ import annotations

import re

import pytest
from codegen_cases import ROOT, compile_kernel, load_case

from cuvil_dsl.codegen import cuda_elementwise, render_cuda

BENCH = ROOT / "benchmarks" / "elementwise_f32.yaml"


def _render(sizes: dict | None = None):
    case = load_case(BENCH)
    (k,) = render_cuda(case.plan("sm_90"), sizes or case.binding.sizes, "sm_90")
    return k


def test_default_is_torch_compiles_block_shape():
    k = _render()
    body = k.source.split('extern "C"')[1]
    assert k.block == (128, 1, 1) and k.grid[0] == 2**24 // (128 * 2)  # 1024 f32 a block
    assert re.findall(r"\(c \+ (\d+)\)", body) == ["128"]  # two vectors a thread, a block apart
    assert "chunked" in k.source


def test_chunked_blocks_read_one_contiguous_span(monkeypatch):
    monkeypatch.setattr(cuda_elementwise, "TUNING", {"chunked": True, "unroll": 4, "threads": 256})
    k = _render()
    body = k.source.split('extern "C"')[1]
    assert "chunked" in k.source
    # 2^26 f32 = 2^24 vectors of 4; 4 vectors per thread, one block per chunk of threads x 4 vectors
    threads = k.block[0]
    assert k.grid[0] == 2**24 // (threads * 4)
    offsets = re.findall(r"\(c \+ (\d+)\)", body)
    assert offsets == [str(u * threads) for u in (1, 2, 3)]  # a block apart, inside the chunk
    assert "v += stride" not in body.split("} else {")[0]  # no grid-stride walk in the chunk


def test_chunked_tail_covers_a_partial_chunk(monkeypatch):
    monkeypatch.setattr(cuda_elementwise, "TUNING", {"chunked": True})
    k = _render({"N": 1000 * 4 + 3})  # a partial last chunk and 3 elements past the last vector
    body = k.source.split('extern "C"')[1]
    assert f"v < 1000; v += {k.block[0]}" in body  # the last chunk, vector by vector
    assert "i < 4003" in body  # the scalar tail


@pytest.mark.parametrize("tuning", [{}, {"chunked": False, "unroll": 4, "threads": 256}, {"unroll": 4}])
def test_variants_compile_without_spills(monkeypatch, tmp_path, tuning):
    monkeypatch.setattr(cuda_elementwise, "TUNING", tuning)
    k = _render()
    r = compile_kernel(k, monkeypatch, tmp_path).resources[k.entry]
    assert r.spill_bytes == 0 and r.stack_bytes == 0
