"""benchmarks/write_ceiling.py without a GPU: its kernels build for sm_90 (NVRTC needs no GPU), the
band-pattern kernel touches every chunk of P exactly once (its index math, emulated), and the script
says it has no GPU to run on with exit status 2."""

from __future__ import annotations

import re

import numpy as np
from bench_support import build_for_sm_90, exits_2_without_gpu, load_script


def _script():
    return load_script("write_ceiling")


def test_kernels_build_for_sm_90(tmp_path):
    build_for_sm_90(_script().SOURCE, ("stream", "bands"), tmp_path)


def test_band_pattern_covers_every_chunk_once():
    """The `bands` kernel's store index for every block, thread, tile and step (the expression in its
    source, evaluated with NumPy) is a permutation of P's 16-byte chunks, for a small P of the same
    shape rules (rows a multiple of 64, 8 ranks of 256 columns)."""
    w = _script()
    line = next(s for s in w.SOURCE.splitlines() if "__stcs(y + ((row * row_chunks" in s)
    assert "rank * 32 + t * 8 + c % 8) & mask)" in line  # the expressions emulated below (mask: all ones)
    assert "const long long row = band * 64LL + warp * 16 + c / 8;" in w.SOURCE
    rows, columns, ranks = 3 * 64, 2048, 8
    row_chunks = columns // 8
    block = np.arange(rows // 64 * ranks)[:, None, None, None]
    thread = np.arange(128)[None, :, None, None]
    t = np.arange(4)[None, None, :, None]
    j = np.arange(4)[None, None, None, :]
    band, rank = block // ranks, block % ranks
    lane, warp = thread % 32, thread // 32
    c = j * 32 + lane
    row = band * 64 + warp * 16 + c // 8
    index = (row * row_chunks + rank * 32 + t * 8 + c % 8).ravel()
    assert np.array_equal(np.sort(index), np.arange(rows * row_chunks))
    assert re.search(r"const long long row_chunks = 2048 / 8;", w.SOURCE)


def test_without_a_gpu_it_exits_2(capsys):
    exits_2_without_gpu(_script(), "write_ceiling", capsys)
