#!/usr/bin/env python3
"""What writing attention_f16's output alone costs on this GPU: the floor under the one-pass band.

The issue's floor for attention_f16 is its bytes at the copy ceiling (read + write). The one-pass band
reads little (Q and K, 16 MB) and writes P (268 MB), so a write-only stream is its real ceiling. Timed
as ``cuvil-dsl bench`` times (``bench.timing.GpuTimer``: L2 flushed before every sample, median):

* ``memset``: ``cudaMemsetAsync`` of P's 268 MB (CuPy ``fill(0)``);
* ``copy``: 134 MB copied (268 MB moved, the copy ceiling's pattern);
* ``stream``: a kernel of 16-byte streaming stores, consecutive across the grid;
* ``bands``: the same stores in the one-pass band's pattern: each block (a cluster rank's share of a
  64-row band) writes its 64 rows x 512 bytes in four column tiles of 128 bytes a row, as the band's
  write pieces do;
* ``bands in 4 MB``: the same stores with their offsets masked into P's first 4 MB, so L2 absorbs them
  and DRAM sees no writes: what the stores cost on the chip alone.

    python3 benchmarks/write_ceiling.py   # writes $OUT/write_ceiling.md when OUT is set

Exit status 2 when there is no GPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from raw_gpu import open_gpu  # noqa: E402

B, M, N = 32, 2048, 2048  # attention_f16's P, f16
SOURCE = r"""
extern "C" __global__ void stream(uint4* __restrict__ y, long long chunks) {
    const uint4 v = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < chunks; i += (long long)gridDim.x * blockDim.x)
        __stcs(y + i, v);
}
// block = (band, rank): rows band * 64 .. + 63 of the [B * M, N] output, columns rank * 256 .. + 255;
// warp w writes its 16 rows tile by tile (16 rows x 8 chunks of 16 bytes a tile), 4 chunks a lane a tile
extern "C" __global__ void bands(uint4* __restrict__ y, int ranks, long long mask) {
    const uint4 v = make_uint4(0x3c003c00u, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u);
    const int band = blockIdx.x / ranks, rank = blockIdx.x % ranks;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const long long row_chunks = N_COLUMNS / 8;
    for (int t = 0; t < 4; ++t)
        for (int j = 0; j < 4; ++j) {
            const int c = j * 32 + lane;
            const long long row = band * 64LL + warp * 16 + c / 8;
            __stcs(y + ((row * row_chunks + rank * 32 + t * 8 + c % 8) & mask), v);
        }
}
""".replace("N_COLUMNS", str(N))


def main() -> int:
    gpu = open_gpu("write_ceiling")
    if gpu is None:
        return 2
    cp, name, sms, timer = gpu
    stream = cp.cuda.get_current_stream()
    nbytes = B * M * N * 2
    y = cp.empty(nbytes // 2, dtype=cp.float16)
    half = cp.empty(nbytes // 4, dtype=cp.float16)
    src = cp.ones(nbytes // 4, dtype=cp.float16)
    module = cp.RawModule(code=SOURCE, options=("-std=c++17",))
    k_stream, k_bands = module.get_function("stream"), module.get_function("bands")
    chunks = nbytes // 16
    runs = {
        "memset (cudaMemsetAsync)": (lambda: y.fill(0), nbytes),
        "copy (134 MB read, 134 MB written)": (lambda: cp.copyto(half, src), nbytes),
        "stream (16-byte streaming stores, consecutive)": (
            lambda: k_stream((sms * 16,), (256,), (y, cp.int64(chunks))), nbytes),
        "bands (the one-pass band's write pattern)": (
            lambda: k_bands((B * M // 64 * 8,), (128,), (y, cp.int32(8), cp.int64(-1))), nbytes),
        "bands in 4 MB (the same stores, offsets masked into 4 MB: L2 only)": (
            lambda: k_bands((B * M // 64 * 8,), (128,), (y, cp.int32(8), cp.int64((4 << 20) // 16 - 1))), nbytes),
    }
    rows = []
    for label, (fn, moved) in runs.items():
        fn()
        cp.cuda.runtime.deviceSynchronize()
        us = timer.measure(fn, stream).median_us
        rows.append(f"| {label} | {moved / 1e6:.0f} | {us:.1f} | {moved / us / 1e6:.2f} |")
    y.fill(0)
    runs["bands (the one-pass band's write pattern)"][0]()
    if not bool(cp.all(y == 1.0)):  # the pattern must cover P exactly once for its time to mean anything
        print("write_ceiling: the bands kernel left part of P unwritten", file=sys.stderr)
        return 1
    text = (f"# write_ceiling on {name}\n\nattention_f16's output P: [{B}, {M}, {N}] f16, {nbytes / 1e6:.0f} MB; "
            "GpuTimer (L2 flushed before each sample), median\n\n| what | MB moved | us | TB/s |\n|---|---|---|---|\n"
            + "\n".join(rows) + "\n")
    print(text)
    out = os.environ.get("OUT")
    if out:
        Path(out, "write_ceiling.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
