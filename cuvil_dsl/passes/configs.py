"""Launch configurations: defaults per arch and kernel kind, and the spec's overrides checked.

The planner records a :class:`KernelConfig` on every kernel; the CUDA renderer resolves it
against the template that will run it (tensor cores or SIMT, which depends on the dtype, the
arch and ``tf32``). An override that a template cannot honour is an E503 naming the kernel
and the values that template supports, so a typo in a spec never becomes a silent fallback.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Callable

from cuvil_dsl.diagnostics import Diagnostic, Span, error
from cuvil_dsl.passes.plan import KernelConfig
from cuvil_dsl.types import DType

SMEM_LIMIT = 48 * 1024  # dynamic shared memory a launch gets without an opt-in attribute
# what a block may opt in to (the runtime sets the attribute beyond 48 KiB)
SMEM_OPT_IN = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}

MMA_MN = (32, 64, 128, 256)
MMA_K = (16, 32, 64)
F32_MN = (32, 64, 128)  # f32 runs on FFMA or, with tf32, on tensor cores: both must accept it
F32_K = (8, 16, 32)
SIMT_MN = (16, 32, 64, 128)
SIMT_K = (8, 16, 32)
THREAD_COUNTS = (32, 64, 128, 256, 512)
MAX_WARP_TILE = 64 * 64  # accumulator elements per warp (64 registers a thread)


def arch_number(arch: str) -> int:
    """``sm_90a`` -> 90; unknown spellings count as the oldest target we build for."""
    m = re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", arch)
    return int(m.group(1)) if m else 75


def uses_tensor_cores(dtype: DType, arch: str, tf32: bool) -> bool:
    """f16/bf16 always (sm_80+: mma.m16n8k16, cp.async); f32 only when the user allows TF32."""
    if arch_number(arch) < 80:
        return False
    return dtype in (DType.F16, DType.BF16) or (dtype is DType.F32 and tf32)


@dataclass(frozen=True)
class WarpLayout:
    """How the warps of a tensor-core block tile its BM x BN output."""

    warps_m: int
    warps_n: int
    warp_m: int  # rows per warp (multiple of 16)
    warp_n: int  # columns per warp (multiple of 16)


def warp_layout(bm: int, bn: int, threads: int) -> WarpLayout | None:
    """The squarest warp tiling of the block tile (warp tiles are multiples of 16 x 16)."""
    warps = threads // 32
    best: tuple[float, WarpLayout] | None = None
    for wm in (d for d in range(1, warps + 1) if warps % d == 0):
        wn = warps // wm
        if bm % (wm * 16) or bn % (wn * 16):
            continue
        tile_m, tile_n = bm // wm, bn // wn
        if tile_m * tile_n > MAX_WARP_TILE:
            continue
        score = abs(math.log(tile_m / tile_n)) + (0.01 if tile_m < tile_n else 0.0)
        if best is None or score < best[0]:
            best = (score, WarpLayout(wm, wn, tile_m, tile_n))
    return best[1] if best else None


@dataclass(frozen=True)
class ThreadLayout:
    """How the threads of a SIMT GEMM block tile its BM x BN output: TM x TN each, strided."""

    tm: int
    tn: int
    ty: int  # BM // tm threads down the rows
    tx: int  # BN // tn threads along a row (a power of two, at most 32: rows stay in one warp)


def thread_layout(bm: int, bn: int, threads: int) -> ThreadLayout | None:
    per = bm * bn // threads
    if per * threads != bm * bn:
        return None
    best: tuple[float, ThreadLayout] | None = None
    for tm in (1, 2, 4, 8):
        tn = per // tm
        if tm * tn != per or tn not in (1, 2, 4, 8) or bm % tm or bn % tn:
            continue
        tx = bn // tn
        if tx > 32 or 32 % tx:
            continue
        score = abs(math.log(tm / tn))
        if best is None or score < best[0]:
            best = (score, ThreadLayout(tm, tn, bm // tm, tx))
    return best[1] if best else None


def smem_limit(arch: str) -> int:
    return SMEM_OPT_IN.get(arch_number(arch), SMEM_LIMIT)


def operand_tile_elems(rows: int, bk: int, itemsize: int, k_major: bool) -> int:
    """Shared-memory elements of one operand tile: [rows][BK + 16 bytes] when K is contiguous,
    else [BK][rows + 8] (padding that keeps ldmatrix and fragment reads free of bank conflicts)."""
    return rows * (bk + 16 // itemsize) if k_major else bk * (rows + 8)


def mma_smem_bytes(bm: int, bn: int, bk: int, itemsize: int, stages: int) -> int:
    """Worst case over operand layouts."""
    def tile(rows: int) -> int:
        return max(operand_tile_elems(rows, bk, itemsize, True), operand_tile_elems(rows, bk, itemsize, False))

    return stages * (tile(bm) + tile(bn)) * itemsize


def mma_stages(bm: int, bn: int, bk: int, itemsize: int, arch: str) -> int:
    """The deepest cp.async pipeline (4, 3 or 2 stages) that fits; 0 when none does."""
    for stages in (4, 3, 2):
        if mma_smem_bytes(bm, bn, bk, itemsize, stages) <= smem_limit(arch):
            return stages
    return 0


# The fused attention kernel (codegen/cuda_attention.py) holds a block's Q rows and two stages of K
# in shared memory: head dimensions up to this many elements (the planner fuses nothing deeper).
ATTENTION_MAX_DEPTH = 256
ATTENTION_THREADS = (64, 128, 256)  # 16 query rows a warp


def default_config(kind: str, dtype: DType, arch: str, tf32: bool = False) -> KernelConfig:
    """Defaults chosen for the H100/H200 class and kept for sm_80 (same cp.async/mma path)."""
    if kind == "matmul":
        if uses_tensor_cores(dtype, arch, tf32):
            return KernelConfig(block=256, tile_m=128, tile_n=128, tile_k=32 if dtype.itemsize == 2 else 16)
        return KernelConfig(block=256, tile_m=64, tile_n=64, tile_k=16)
    if kind == "matmul_softmax":
        if uses_tensor_cores(dtype, arch, tf32):
            return KernelConfig(block=128, tile_m=64, tile_n=64, tile_k=32 if dtype.itemsize == 2 else 16)
        return KernelConfig(block=256, tile_m=64, tile_n=64, tile_k=16)
    if kind == "attention":  # warps of 16 query rows (on sm_90 two wgmma warpgroups); the template sizes key tiles
        return KernelConfig(block=256 if arch_number(arch) >= 90 else 128, tile_m=0, tile_n=0, tile_k=0)
    return KernelConfig(block=256, tile_m=0, tile_n=0, tile_k=0)


# Default tiles from largest to smallest (tile_m, tile_n, threads): the renderer takes the first
# that gives at least one block per multiprocessor, else the last (small problems need blocks
# more than they need tile reuse).
TILE_LADDER = {
    ("matmul", True): ((128, 128, 256), (128, 64, 256), (64, 64, 128), (64, 32, 128)),
    ("matmul", False): ((64, 64, 256), (32, 64, 256), (32, 32, 256), (32, 32, 128)),
    ("matmul_softmax", True): ((64, 64, 128), (32, 64, 128), (16, 64, 128)),
    ("matmul_softmax", False): ((64, 64, 256), (32, 64, 256), (32, 32, 128)),
}


def sized_tiles(config: KernelConfig, kind: str, tensor_cores: bool, blocks: Callable[[int, int], int],
                sm_count: int, depth: int) -> KernelConfig:
    """Shrink the default tile until the launch fills the machine (unless the spec set it). A
    fused softmax whose K is a multiple of 64 (a head dimension) takes it in one k step per
    column tile when the operands are 16-bit."""
    if "tile" in config.overridden or "block" in config.overridden:
        return config
    ladder = TILE_LADDER[(kind, tensor_cores)]
    bm, bn, threads = next((t for t in ladder if blocks(t[0], t[1]) >= sm_count), ladder[-1])
    bk = 64 if kind == "matmul_softmax" and config.tile_k == 32 and depth % 64 == 0 else config.tile_k
    return replace(config, tile_m=bm, tile_n=bn, tile_k=bk, block=threads)


# The row-band GEMM + softmax kernel (16-bit operands, K of at most ROW_BAND_MAX_DEPTH): one warp
# per 16 rows and all columns, the A band held in registers, B streamed in one k step per column
# tile. Tiles from largest to smallest (rows per block, threads), chosen like TILE_LADDER. The
# first has 32-row warps, 4 blocks per SM: 148.6 us on attention_f16 against 171.0 us for
# 16-row warps in blocks of 256 (H200, 2026-11-29, benchmarks/ab_attention.py).
ROW_BAND_LADDER = ((128, 128), (64, 128), (32, 64), (16, 32))
ROW_BAND_N = 64  # columns per tile
ROW_BAND_MAX_DEPTH = 128
ROW_BAND_MAX_ACC = 2048  # accumulators per warp (64 a thread: the A band and statistics need the rest)
ROW_BAND_THREADS_PER_SM = 512  # launch bounds ask for this many resident threads (<= 128 registers)


def row_band_smem(bm: int, bn: int, depth: int, stages: int, a_k_major: bool, b_k_major: bool) -> int:
    """Bytes: the A band (later reused to stage output tiles) and ``stages`` B tiles."""
    band = max(operand_tile_elems(bm, depth, 2, a_k_major), bm * (bn + 8))
    return 2 * (band + stages * operand_tile_elems(bn, depth, 2, b_k_major))


def row_band_config(config: KernelConfig, depth: int, a_k_major: bool, b_k_major: bool, arch: str,
                    blocks: Callable[[int], int], sm_count: int,
                    warp_rows: tuple[int, ...] = (16, 32)) -> tuple[KernelConfig, int] | None:
    """The row-band tile and pipeline depth for a 16-bit GEMM + softmax of this K, or None when
    the generic template must run it (K too deep, or a spec tile whose warps split columns).
    ``tile_k`` becomes K rounded up to 16 (one k step per column tile); an overridden ``tile.k``
    is not used by this template. ``warp_rows``: the rows a warp may own with an overridden tile (64
    only for cuda_matmul.ROW_BAND_TUNING's tiles, which set their launch bounds: a 64-row warp needs
    about 200 registers)."""
    dp = -(-depth // 16) * 16
    if dp > ROW_BAND_MAX_DEPTH:
        return None
    if "tile" in config.overridden or "block" in config.overridden:
        bm, bn, threads = config.tile_m, config.tile_n, config.block
        warps = threads // 32
        if bm % warps or bm // warps not in warp_rows or bn % 16 or bm // warps * bn > ROW_BAND_MAX_ACC:
            return None
    else:
        bm, threads = next((t for t in ROW_BAND_LADDER if blocks(t[0]) >= sm_count), ROW_BAND_LADDER[-1])
        bn = ROW_BAND_N
    per_sm = max(1, ROW_BAND_THREADS_PER_SM // threads)
    fits = [s for s in (4, 3, 2) if row_band_smem(bm, bn, dp, s, a_k_major, b_k_major) <= SMEM_LIMIT]
    for resident in range(per_sm, 0, -1):  # fewer resident blocks before no band (a deep K's B tiles are large)
        fits = fits or [s for s in (4, 3, 2)
                        if resident * row_band_smem(bm, bn, dp, s, a_k_major, b_k_major) <= smem_limit(arch)]
    if not fits:
        return None
    # resident blocks the launch bounds ask for: ROW_BAND_THREADS_PER_SM threads, as shared memory allows
    per_sm = max(1, min(per_sm, smem_limit(arch) // row_band_smem(bm, bn, dp, fits[0], a_k_major, b_k_major)))
    min_blocks = config.min_blocks if "launch_bounds" in config.overridden else per_sm
    return replace(config, tile_m=bm, tile_n=bn, tile_k=dp, block=threads, min_blocks=min_blocks), fits[0]


def resolve(config: KernelConfig, kind: str, dtype: DType, arch: str, tf32: bool) -> KernelConfig:
    """The defaults of the template that will run, with the spec's overrides on top."""
    base = default_config(kind, dtype, arch, tf32)
    kept = {f.name: getattr(config, f.name) for f in fields(KernelConfig) if _overridden(config, f.name)}
    return replace(base, **kept, overridden=config.overridden)


def _overridden(config: KernelConfig, field: str) -> bool:
    key = {"tile_m": "tile", "tile_n": "tile", "tile_k": "tile", "max_threads": "launch_bounds",
           "min_blocks": "launch_bounds"}.get(field, field)
    return key in config.overridden


def _gemm_problem(c: KernelConfig, kind: str, dtype: DType, arch: str) -> str | None:
    """Why the tile cannot run on the template(s) for ``dtype``, or None."""
    bm, bn, bk, threads = c.tile_m, c.tile_n, c.tile_k, c.block
    if dtype in (DType.F16, DType.BF16):
        if bm not in MMA_MN or bn not in MMA_MN or bk not in MMA_K:
            return f"m and n must be one of {_list(MMA_MN)} and k one of {_list(MMA_K)}"
        if warp_layout(bm, bn, threads) is None:
            return _WARP_RULE
        if not mma_stages(bm, bn, bk, 2, arch):
            return f"the tile needs more than {smem_limit(arch) // 1024} KiB of shared memory for two stages"
        return None
    allowed_mn, allowed_k = (F32_MN, F32_K) if dtype is DType.F32 else (SIMT_MN, SIMT_K)
    if bm not in allowed_mn or bn not in allowed_mn or bk not in allowed_k:
        return f"m and n must be one of {_list(allowed_mn)} and k one of {_list(allowed_k)}"
    if thread_layout(bm, bn, threads) is None:
        return ("block threads must split m x n into 1, 2, 4 or 8 rows and columns each, "
                "with at most 32 threads along a row")
    if 2 * bk * (bm + bn + 8) * dtype.itemsize > SMEM_LIMIT:
        return f"the tile needs more than {SMEM_LIMIT // 1024} KiB of shared memory"
    if dtype is DType.F32 and warp_layout(bm, bn, threads) is None:
        return "with tf32 it must also run on tensor cores: " + _WARP_RULE
    return None


_WARP_RULE = ("block/32 warps must tile m and n in multiples of 16, "
              f"each warp at most {MAX_WARP_TILE} outputs (e.g. 128x128 with 256 threads)")


def _list(values: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in values)


def _get(settings, key: str):
    if isinstance(settings, dict):
        return settings.get(key)
    return getattr(settings, key, None)


def apply_overrides(config: KernelConfig, settings, kind: str, dtype: DType, name: str, span: Span,
                    arch: str = "sm_90") -> tuple[KernelConfig, list[Diagnostic]]:
    """``settings`` is a dict (or the spec's KernelSettings model) with the keys of a spec's
    ``kernels:`` entry: block, tile {m, n, k}, launch_bounds {max_threads, min_blocks},
    max_registers."""
    diags: list[Diagnostic] = []
    changes: dict = {}
    overridden: list[str] = []
    block = _get(settings, "block")
    if block is not None:
        changes["block"] = int(block)
        overridden.append("block")
    tile = _get(settings, "tile")
    if tile is not None:
        for axis in ("m", "n", "k"):
            value = _get(tile, axis)
            if value is not None:
                changes[f"tile_{axis}"] = int(value)
        overridden.append("tile")
    bounds = _get(settings, "launch_bounds")
    if bounds is not None:
        changes["max_threads"] = int(_get(bounds, "max_threads"))
        min_blocks = _get(bounds, "min_blocks")
        changes["min_blocks"] = None if min_blocks is None else int(min_blocks)
        overridden.append("launch_bounds")
    regs = _get(settings, "max_registers")
    if regs is not None:
        changes["max_registers"] = int(regs)
        overridden.append("max_registers")
    new = replace(config, **changes, overridden=tuple(overridden))

    def bad(message: str) -> None:
        diags.append(error("E503", f"kernel `{name}`: {message}", span))

    if new.block % 32 or not 32 <= new.block <= 1024:
        bad(f"block {new.block} must be a multiple of 32 from 32 to 1024")
    if new.max_registers is not None and not 16 <= new.max_registers <= 255:
        bad(f"max_registers {new.max_registers} must be from 16 to 255")
    if new.max_threads is not None and new.block > new.max_threads:
        bad(f"block {new.block} exceeds launch_bounds.max_threads {new.max_threads}")
    if kind == "attention":
        if "block" in overridden and new.block not in ATTENTION_THREADS:
            bad(f"an attention kernel runs with one of {_list(ATTENTION_THREADS)} threads (16 query rows a warp), "
                f"not {new.block}")
        if tile is not None:
            bad(f"`tile` does not apply to attention kernel `{name}`: its rows follow `block` (16 a warp) and its "
                "key tiles the shared memory")
    elif kind in ("matmul", "matmul_softmax") and ("block" in overridden or "tile" in overridden):
        if new.block not in THREAD_COUNTS:
            bad(f"a {kind} kernel runs with one of {_list(THREAD_COUNTS)} threads, not {new.block}")
        else:
            problem = _gemm_problem(new, kind, dtype, arch)
            if problem:
                bad(f"tile {{m: {new.tile_m}, n: {new.tile_n}, k: {new.tile_k}}} with {new.block} threads is not "
                    f"supported by the {dtype.value} {kind} template: {problem}")
    elif kind not in ("matmul", "matmul_softmax") and tile is not None:
        bad(f"`tile` applies to matmul kernels only; `{name}` is a {kind} kernel (set `block` instead)")
    return new, diags
