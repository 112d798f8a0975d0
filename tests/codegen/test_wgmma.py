"""The sm_90a wgmma GEMM engine: it compiles (NVRTC), keeps its accumulators in registers, runs
HGMMA, and its shared-memory writes agree with the descriptors' canonical layouts (CPU only)."""

from __future__ import annotations

import itertools

import pytest

from cuvil_dsl.codegen.cuda_wgmma import WgmmaEngine, WgmmaOperand, gemm_bias_gelu_source, supported
from cuvil_dsl.types import DType

CONFIGS = [dict(bm=128, bn=256, stages=4, pending=1), dict(bm=128, bn=128, stages=3, pending=0),
           dict(bm=64, bn=128, stages=4, pending=1)]


def _nvrtc_or_skip() -> None:
    from cuvil_dsl.compile import nvrtc

    try:
        nvrtc.library()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    if 90 not in nvrtc.supported_archs():
        pytest.skip("this NVRTC does not build sm_90")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """{(sizes, config index, b_k_major): (kernel, CompiledUnit)}, one parallel batch."""
    _nvrtc_or_skip()
    from cuvil_dsl.compile import CompileUnit, compile_units

    mp = pytest.MonkeyPatch()
    mp.setenv("CUVIL_CACHE_DIR", str(tmp_path_factory.mktemp("wgmma-cache")))
    jobs = [((4096, 4096, 4096), i, False) for i in range(len(CONFIGS))]
    jobs += [((1000, 1000, 520), 0, False), ((1024, 2048, 512), 0, True)]
    kernels = [gemm_bias_gelu_source(*sizes, b_k_major=kmaj, **CONFIGS[i]) for sizes, i, kmaj in jobs]
    units = [CompileUnit(f"wgmma_{n}", k.source, (k.entry,)) for n, k in enumerate(kernels)]
    try:
        built = compile_units(units, "sm_90a", fallback="none")
    finally:
        mp.undo()
    return {job: (k, u) for job, k, u in zip(jobs, kernels, built)}


def test_compiles_for_sm_90a_without_spills(compiled):
    for (sizes, i, kmaj), (k, u) in compiled.items():
        r = u.resources[k.entry]
        assert r.spill_bytes == 0 and r.stack_bytes == 0, (sizes, CONFIGS[i], kmaj, r)
        assert r.registers <= 255
        if CONFIGS[i]["bn"] <= 128 and CONFIGS[i]["bm"] == 128:
            assert r.registers <= 128, r  # two 256-thread blocks per SM fit
        assert "serializ" not in u.log.lower(), u.log  # ptxas did not serialize the wgmma chain
        assert k.shared_bytes <= 227 * 1024


def test_sass_runs_hgmma(compiled):
    from cuvil_dsl.compile import SassUnavailable, count_instructions, disassemble, find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed")
    for (sizes, i, kmaj), (k, u) in compiled.items():
        try:
            sass = disassemble(u.cubin)
        except SassUnavailable as exc:
            pytest.skip(str(exc))
        bn = CONFIGS[i]["bn"]
        assert count_instructions(sass, rf"HGMMA\.64x{bn}x16\.F32") == 4, (sizes, CONFIGS[i])  # 4 per BK = 64
        assert count_instructions(sass, "HMMA") == 0
        assert count_instructions(sass, "LDGSTS") > 0
        assert count_instructions(sass, "LDL|STL") == 0
        assert ("tnspB" in sass) == (not kmaj)


def test_unsupported_shapes_are_named():
    a = WgmmaOperand("a", "a", DType.F16, 4096, 4096, True, 4096, 1)
    b = WgmmaOperand("b", "b", DType.F16, 4096, 4096, False, 1, 4096)
    assert supported(a, b, 128, 256) is None
    assert "BK" in supported(a, b, 128, 256, bk=32)
    ragged = WgmmaOperand("a", "a", DType.F16, 100, 45, True, 45, 1)
    assert "16-byte" in supported(ragged, b, 128, 256)
    f32 = WgmmaOperand("a", "a", DType.F32, 64, 64, True, 64, 1)
    assert "f16" in supported(f32, b, 128, 256)


# --------------------------------------------------------------------------- layout model
def _swizzle128(addr: int) -> int:
    """The 128-byte swizzle: bits 4-6 of a shared address XOR bits 7-9."""
    return addr ^ (((addr >> 7) & 7) << 4)


def _descriptor_read(start: int, lbo: int, sbo: int, k_major: bool, mn: int, k: int) -> int:
    """Byte address wgmma reads for element (mn, k) of one 16-deep slice, by the canonical
    layouts of the PTX ISA with 128-byte swizzling (T = 8 halves per 16 bytes):
    K-major  ((8, m), (T, 2)) : ((8T, SBO), (1, T));  MN-major ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))."""
    if k_major:
        addr = start + (mn // 8) * sbo + (mn % 8) * 128 + k * 2
    else:
        addr = start + (mn // 64) * lbo + (mn % 64) * 2 + (k // 8) * sbo + (k % 8) * 128
    return _swizzle128(addr)


def _c_eval(expr: str, **names: int) -> int:
    """The engine's offset expressions use only + * >> & ^ and parentheses: Python reads them alike."""
    return eval(expr, {"__builtins__": {}}, names)  # noqa: S307 - our own generated arithmetic


@pytest.mark.parametrize("b_k_major", [False, True])
@pytest.mark.parametrize("bm,bn", [(128, 256), (64, 128)])
def test_writes_match_descriptor_reads(b_k_major, bm, bn):
    """Write each operand tile where the cp.async offsets put it, then read it back the way the
    descriptors (start, LBO, SBO, per-slice advance) describe it: every element comes back."""
    a = WgmmaOperand("a", "a", DType.F16, 4096, 4096, True, 4096, 1)
    b = (WgmmaOperand("b", "b", DType.F16, 4096, 4096, True, 4096, 1) if b_k_major
         else WgmmaOperand("b", "b", DType.F16, 4096, 4096, False, 1, 4096))
    eng = WgmmaEngine(a, b, bm=bm, bn=bn, stages=3, pending=1)
    base = 3 * 1024  # any 1024-aligned shared address
    for o, rows in ((a, bm), (b, bn)):
        tile = eng.tile_bytes(o)
        mem: dict[int, tuple[int, int]] = {}
        mn_s, k_s = ("r", "cc") if o.k_major else ("cc", "r")
        expr = eng._offset(o, mn_s, k_s)
        # 16-byte chunks: 8 consecutive elements along the contiguous axis
        chunks = [(mn, k) for mn in range(0, rows, 1 if o.k_major else 8)
                  for k in range(0, eng.bk, 8 if o.k_major else 1)]
        for stage in range(eng.stages):
            for mn, k in chunks:
                off = _c_eval(expr, r=mn if o.k_major else k, cc=k if o.k_major else mn)
                assert off % 16 == 0 and 0 <= off < tile
                for e in range(8):
                    addr = base + stage * tile + off + 2 * e
                    mem[addr] = (mn, k + e) if o.k_major else (mn + e, k)
        assert len(mem) == eng.stages * rows * eng.bk  # a bijection onto the stages
        lbo, sbo = eng.offsets(o)
        groups = eng.groups if o.role == "a" else 1
        extent = 64 if o.role == "a" else bn
        for stage, g, kk in itertools.product(range(eng.stages), range(groups), range(eng.bk // 16)):
            start = base + (g * eng.group_bytes(o) if o.role == "a" else 0) + stage * eng.tile_bytes(o) \
                + kk * eng.slice_bytes(o)
            for mn, k in itertools.product(range(extent), range(16)):
                got = mem[_descriptor_read(start, lbo, sbo, o.k_major, mn, k)]
                assert got == (g * 64 + mn, kk * 16 + k), (o.role, stage, g, kk, mn, k)


def test_elements_cover_the_tile_once():
    """The D fragment map of elements(): every (m, n) of the BM x BN tile exactly once."""
    a = WgmmaOperand("a", "a", DType.F16, 4096, 4096, True, 4096, 1)
    b = WgmmaOperand("b", "b", DType.F16, 4096, 4096, False, 1, 4096)
    eng = WgmmaEngine(a, b, bm=128, bn=128)
    lines = eng.elements("0", "0", ["BODY"])
    m_expr = next(line for line in lines if "const int m =" in line).split("=", 1)[1].rstrip(";").strip()
    n_expr = next(line for line in lines if "const int n =" in line).split("=", 1)[1].rstrip(";").strip()
    seen = {}
    for t in range(eng.threads):
        lane, wg, wl = t % 32, t // 128, (t // 32) % 4
        for ni, h, q in itertools.product(range(eng.bn // 8), range(2), range(2)):
            env = dict(lane=lane, wg=wg, wl=wl, ni=ni, h=h, q=q)
            m = _c_eval(m_expr.replace("/", "//"), **env)
            n = _c_eval(n_expr.replace("/", "//"), **env)
            seen[(m, n)] = seen.get((m, n), 0) + 1
    assert len(seen) == eng.bm * eng.bn and set(seen.values()) == {1}
