"""The sm_90a wgmma GEMM engine: it compiles (NVRTC), keeps its accumulators in registers, runs
HGMMA, and its shared-memory writes agree with the descriptors' canonical layouts (CPU only)."""

from __future__ import annotations

import itertools

import pytest

from cuvil_dsl.codegen import cuda_wgmma
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


# --------------------------------------------------------------------------- variants (TUNING)
VARIANTS = [((4096, 4096, 4096), dict(persistent=True, pack=True, raster=8)),
            ((4096, 4096, 4096), dict(ws=True, pack=True)),
            ((1000, 1000, 520), dict(ws=True, pack=True, raster=3)),
            ((1000, 1000, 520), dict(bm=192, bn=256, persistent=True, pack=True)),
            ((1000, 1000, 520), dict(bm=256, bn=128, ws=True))]


@pytest.fixture(scope="module")
def compiled_variants(tmp_path_factory):
    _nvrtc_or_skip()
    from cuvil_dsl.compile import CompileUnit, compile_units

    mp = pytest.MonkeyPatch()
    mp.setenv("CUVIL_CACHE_DIR", str(tmp_path_factory.mktemp("wgmma-variants")))
    kernels = [gemm_bias_gelu_source(*sizes, **v) for sizes, v in VARIANTS]
    units = [CompileUnit(f"wgmma_v{n}", k.source, (k.entry,)) for n, k in enumerate(kernels)]
    try:
        built = compile_units(units, "sm_90a", fallback="none")
    finally:
        mp.undo()
    return list(zip(VARIANTS, kernels, built))


def test_variants_compile_without_spills(compiled_variants):
    for (sizes, v), k, u in compiled_variants:
        r = u.resources[k.entry]
        assert r.spill_bytes == 0 and r.stack_bytes == 0, (sizes, v, r)
        assert "serializ" not in u.log.lower() and "C7508" not in u.log, u.log  # wgmma chain, setmaxnreg kept
        assert k.shared_bytes <= 227 * 1024
        assert k.persistent == bool(v.get("persistent") or v.get("ws"))
        assert k.block[0] == k.engine.threads + (128 if v.get("ws") else 0)
        if v.get("ws"):  # setmaxnreg moves registers inside the block's pool, fixed at launch
            from cuvil_dsl.codegen.cuda_wgmma import ws_entry_regs, ws_regs

            assert r.registers == ws_entry_regs(k.block[0]), (v, r.registers)
            prod, cons = ws_regs(k.engine.threads)
            assert 128 * prod + k.engine.threads * cons <= r.registers * k.block[0]
            assert f"setmaxnreg.inc.sync.aligned.u32 {cons};" in k.source


def test_variants_sass(compiled_variants):
    from cuvil_dsl.compile import SassUnavailable, count_instructions, disassemble, find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed")
    for (sizes, v), k, u in compiled_variants:
        try:
            sass = disassemble(u.cubin)
        except SassUnavailable as exc:
            pytest.skip(str(exc))
        assert count_instructions(sass, rf"HGMMA\.64x{k.engine.bn}x16\.F32") == 4, (sizes, v)
        assert count_instructions(sass, "LDL|STL") == 0
        assert (count_instructions(sass, "USETMAXREG") == 2) == bool(v.get("ws")), (sizes, v)


def _c_block(lines: list[str], **env: int) -> dict:
    """Run straight-line C (``const int x = ...;`` / ``x = ...;``) with Python's integer ops."""
    env = dict(env)
    for line in lines:
        line = line.strip().rstrip(";").replace("const int ", "").replace("/", "//")
        if not line:
            continue
        name, expr = (part.strip() for part in line.split("=", 1))
        env[name] = eval(expr, {"__builtins__": {"min": min}}, env)  # noqa: S307 - our own generated arithmetic
    return env


@pytest.mark.parametrize("mt,nt,raster", [(32, 16, 0), (32, 16, 8), (22, 16, 8), (8, 4, 3), (7, 5, 2), (3, 9, 4)])
def test_tile_order_visits_every_tile_once(mt, nt, raster):
    from cuvil_dsl.codegen.cuda_wgmma import _tile_function

    src = _tile_function(mt, nt, 128, 256, raster)
    body = src.split("{", 1)[1].rsplit("}", 1)[0].splitlines()
    seen = set()
    for t in range(mt * nt):
        env = _c_block(body, t=t)
        m0, n0 = env["m0"], env["n0"]
        assert m0 % 128 == 0 and n0 % 256 == 0 and 0 <= m0 < mt * 128 and 0 <= n0 < nt * 256
        seen.add((m0, n0))
    assert len(seen) == mt * nt
    if 0 < raster < mt:  # the first tiles in flight stay inside one group of row tiles
        rows = {_c_block(body, t=t)["m0"] for t in range(raster * nt)}
        assert len(rows) == raster


@pytest.mark.parametrize("tiles", [1, 7, 32, 512])
def test_persistent_blocks_share_the_tiles(tiles):
    from cuvil_dsl.codegen.cuda_wgmma import _persistent_loop

    eng = gemm_bias_gelu_source(4096, 4096, 4096).engine
    line = next(x for x in _persistent_loop(eng, 64, tiles, []) if "my_tiles =" in x)
    expr = line.split("=", 1)[1].rstrip(";").replace("(int)", "").replace("/", "//")
    expr = expr.replace("?", " if ").replace(":", " else ")  # c ? a : b -> (a) if c else (b), reordered below
    cond, rest = expr.split(" if ", 1)
    then, other = rest.split(" else ", 1)
    for grid in sorted({1, 5, 132, tiles}):
        if grid > tiles:
            continue
        owned = []
        for block in range(grid):
            env = {"blockIdx": type("B", (), {"x": block})(), "gridDim": type("G", (), {"x": grid})()}
            n = eval(then if eval(cond, {}, env) else other, {}, env)  # noqa: S307
            owned += [block + i * grid for i in range(n)]
        assert sorted(owned) == list(range(tiles)), (tiles, grid)


@pytest.mark.parametrize("stages,pending,kt,tiles",
                         [(4, 1, 3, 5), (4, 0, 2, 4), (3, 1, 5, 2), (2, 0, 1, 6), (4, 2, 9, 3)])
def test_specialised_pipeline_model(stages, pending, kt, tiles):
    """Random interleavings of the warp-specialised protocol as generated (the mbarrier parities and
    the released stage are read off the kernel text): no deadlock, no phase aliasing, a stage is
    never rewritten while a wgmma that reads it is in flight, and every wgmma reads its own k step."""
    import random
    import re

    from cuvil_dsl.codegen.cuda_wgmma import _specialised

    eng = gemm_bias_gelu_source(4096, 4096, 4096, stages=stages, pending=pending).engine
    text = "\n".join(_specialised(eng, kt, tiles, []))
    pw = re.search(r"if \(g >= (\d+)\) cvl_mbar_wait\(bars \+ 8 \* \((\d+) \+ stage\), (.+)\);", text)
    assert pw and int(pw[1]) == stages and int(pw[2]) == stages
    prod_parity = pw[3].replace("/", "//")
    cw = re.search(r"cvl_mbar_wait\(bars \+ 8 \* stage, (.+)\);", text)
    cons_parity = cw[1].replace("/", "//")
    rel = re.search(r"(?:if \(g >= (\d+)\) )?cvl_mbar_arrive\(bars \+ 8 \* \((\d+) \+ (.+)\)\);", text)
    rel_from = int(rel[1] or 0)
    rel_stage = rel[3].replace("/", "//")
    assert int(rel[2]) == stages and rel_from == pending
    stage_of = lambda g: g % stages  # noqa: E731 - "const int stage = g % S" in both loops
    assert f"const int stage = g % {stages};" in text
    total = kt * tiles  # one block owning every tile
    groups = eng.groups

    for seed in range(40):
        rng = random.Random(seed)
        full = [dict(need=128, got=0, done=0) for _ in range(stages)]
        empty = [dict(need=128 * groups, got=0, done=0) for _ in range(stages)]
        data: list[int | None] = [None] * stages

        def arrive(bar, n):
            bar["got"] += n
            assert bar["got"] <= bar["need"]
            if bar["got"] == bar["need"]:
                bar["got"], bar["done"] = 0, bar["done"] + 1

        def ready(bar, parity, phase):
            ok = (bar["done"] & 1) != parity
            if ok:
                assert bar["done"] == phase + 1, "parity aliasing"
            return ok

        prod = dict(g=0, landing=[])  # issued copies not yet landed: (step, stage)
        cons = [dict(g=0, flight=[]) for _ in range(groups)]
        for _tick in range(100000):
            moves = []
            g = prod["g"]
            if g < total and (g < stages or ready(empty[stage_of(g)], eval(prod_parity, {}, {"g": g}),
                                                  g // stages - 1)):
                moves.append("issue")
            if prod["landing"]:
                moves.append("land")
            for i, c in enumerate(cons):
                if c["g"] < total and ready(full[stage_of(c["g"])], eval(cons_parity, {}, {"g": c["g"]}),
                                            c["g"] // stages):
                    moves.append(i)
                if c["flight"]:
                    moves.append(("retire", i))
            if not moves:
                break
            mv = rng.choice(moves)
            if mv == "issue":
                st = stage_of(g)
                for c in cons:
                    assert all(s != st for _, s in c["flight"]), "stage overwritten under a wgmma"
                data[st] = None  # being written
                prod["landing"].append((g, st))
                prod["g"] += 1
            elif mv == "land":  # cp.async lands in order for a thread's arrive.noinc
                step, st = prod["landing"].pop(0)
                data[st] = step
                arrive(full[st], 128)
            elif isinstance(mv, tuple):  # a wgmma group retires early (in order)
                cons[mv[1]]["flight"].pop(0)
            else:
                c = cons[mv]
                cg = c["g"]
                st = stage_of(cg)
                assert data[st] == cg, "wgmma would read another step's tile"
                c["flight"].append((cg, st))
                while len(c["flight"]) > pending:  # wgmma.wait_group W
                    c["flight"].pop(0)
                if cg % kt == kt - 1:
                    c["flight"].clear()  # wait_group 0 before the epilogue
                if cg >= rel_from:
                    arrive(empty[eval(rel_stage, {}, {"g": cg, "stage": st})], 128)
                c["g"] += 1
        assert prod["g"] == total and not prod["landing"], "producer stuck"
        assert all(c["g"] == total for c in cons), "consumer stuck"


@pytest.mark.parametrize("bm,bn,threads", [(128, 256, None), (192, 256, None), (256, 128, None),
                                           (128, 256, 128), (256, 128, 128)])
def test_load_threads_copy_every_chunk_once(bm, bn, threads):
    """The thread -> chunk map of load(): every 16-byte chunk of each operand tile once, also for a
    block that does not divide the tile (192 rows: 384 threads) and for the ws producer (128)."""
    import copy
    import re

    a = WgmmaOperand("a", "a", DType.F16, 4096, 4096, True, 4096, 1)
    b = WgmmaOperand("b", "b", DType.F16, 4096, 4096, False, 1, 4096)
    eng = WgmmaEngine(a, b, bm=bm, bn=bn, stages=4, pending=1)
    if threads:
        eng = copy.copy(eng)
        eng.threads = threads
    for o, rows in ((a, bm), (b, bn)):
        text = "\n".join(eng.load(o, "0", "0", "0", o.pointer))
        per_row = int(re.search(r"threadIdx\.x / (\d+)u", text)[1])
        passes = int(re.search(r"i < (\d+);", text)[1])
        rp = int(re.search(r"r0 \+ i \* (\d+);", text)[1])
        stop = re.search(r"if \(r >= (\d+)\) break;", text)
        offset = re.search(r"u \+ (.+);\n", text)[1]
        seen, copies = {}, 0
        for t in range(eng.threads):
            r0, cc = t // per_row, t % per_row * 8
            for i in range(passes):
                r = r0 + i * rp
                if stop and r >= int(stop[1]):
                    break
                mn, k = (r, cc) if o.k_major else (cc, r)
                assert 0 <= mn < rows and 0 <= k < eng.bk, (o.role, t, i)
                off = _c_eval(offset, r=r, cc=cc, r0=r0)
                seen[(mn, k)] = off
                copies += 1
        assert len(seen) == copies == rows * eng.bk // 8, (o.role, len(seen), copies)
        assert len(set(seen.values())) == len(seen)  # distinct destinations


@pytest.mark.parametrize("ws", [False, True])
def test_probes_leave_out_one_half(ws):
    def body(k):
        return k.source[k.source.index('extern "C"'):]

    full = body(gemm_bias_gelu_source(4096, 4096, 4096, ws=ws))
    loads = body(gemm_bias_gelu_source(4096, 4096, 4096, ws=ws, probe="loads"))
    mma = body(gemm_bias_gelu_source(4096, 4096, 4096, ws=ws, probe="mma"))
    assert "cvl_wgmma(acc" in full and "cvl_cp_async16s(dst" in full
    assert "cvl_wgmma(acc" not in loads and "cvl_cp_async16s(dst" in loads and "cvl_wgmma_commit" in loads
    assert "cvl_wgmma(acc" in mma and "cvl_cp_async16s(dst" not in mma
    with pytest.raises(ValueError):
        gemm_bias_gelu_source(4096, 4096, 4096, probe="epilogue")


# --------------------------------------------------------------------------- the library's epilogue
# Programs for the library path (render_plain with this engine): (program, spec lines after
# ``pipeline:``, the pair type its stores use or None for per-element stores). tests/gpu runs them.
LIBRARY_PROGRAMS = {
    # odd N (B stored N x K keeps wgmma): a pair could cross the edge, so one store per element
    "wg_odd_n": ("pipeline wg_odd_n(a: f16[M, K], w: f16[N, K], bias: f16[N]) -> y: f16[M, N] {\n"
                 "    y = gelu(a @ w.T + bias)\n}\n",
                 "shapes: {M: 1000, K: 136, N: 999}\ncheck: {rtol: 8.0e-3, atol: 8.0e-3}\n", None),
    # batched, M and N ragged, large enough for LARGE_TILE; a bias row read as pairs, a [G, M, 1] scale per element
    "wg_batched_pairs": ("pipeline wg_batched_pairs(a: f16[G, M, K], b: f16[G, K, N], bias: f16[N], s: f16[G, M, 1])"
                         " -> y: f16[G, M, N] {\n    y = silu(a @ b + bias) * s\n}\n",
                         "shapes: {G: 9, M: 1000, K: 200, N: 1000}\ncheck: {rtol: 8.0e-3, atol: 8.0e-3}\n",
                         "__half2"),
    # bf16 and f16 results of one GEMM: two paired stores of different types
    "wg_two_outputs": ("pipeline wg_two_outputs(a: bf16[M, K], b: bf16[K, N], bias: bf16[N])"
                       " -> (y: bf16[M, N], h: f16[M, N]) {\n    y = relu(a @ b + bias)\n    h = cast(y, f16) * 2\n}\n",
                       "shapes: {M: 520, K: 64, N: 1480}\ncheck: {rtol: 1.6e-2, atol: 1.6e-2}\n", "__nv_bfloat162"),
    # a 16-bit and an f32 result: per-element stores
    "wg_mixed_outputs": ("pipeline wg_mixed_outputs(a: f16[M, K], b: f16[K, N]) -> (y: f16[M, N], r: f32[M, N]) {\n"
                         "    y = a @ b * 0.5\n    r = cast(y, f32) + 1\n}\n",
                         "shapes: {M: 300, K: 72, N: 264}\ncheck: {rtol: 8.0e-3, atol: 8.0e-3}\n", None),
}


def library_case(name: str, folder):
    """LIBRARY_PROGRAMS[name] written to ``folder`` and loaded as a codegen case."""
    from pathlib import Path

    from codegen_cases import load_case

    program, spec, _pair = LIBRARY_PROGRAMS[name]
    folder = Path(folder)
    (folder / f"{name}.cuvil").write_text(program)
    (folder / f"{name}.yaml").write_text(f"pipeline: {name}.cuvil\n{spec}")
    return load_case(folder / f"{name}.yaml")


def _library_kernels(case, pairs: bool, tile: tuple, ws: bool = False) -> list:
    from cuvil_dsl.codegen import cuda_wgmma, render_cuda

    mp = pytest.MonkeyPatch()
    mp.setattr(cuda_wgmma, "PAIRED_STORES", pairs)
    mp.setattr(cuda_wgmma, "LARGE_TILE", tile)
    mp.setattr(cuda_wgmma, "LIBRARY_WS", ws)
    try:
        return list(render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90"))
    finally:
        mp.undo()


NEW, OLD, WS = (True, (256, 128, 4, 1)), (False, (128, 256, 4, 1)), (True, (256, 128, 4, 1), True)


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """{(case name, (pairs, tile)): [(RenderedKernel, CompiledUnit)]} for sm_90, one batch."""
    _nvrtc_or_skip()
    from codegen_cases import ROOT, load_case

    from cuvil_dsl.compile import CompileUnit, compile_units

    folder = tmp_path_factory.mktemp("wgmma-library")
    cases = {name: library_case(name, folder) for name in LIBRARY_PROGRAMS}
    cases["gemm_gelu_f16"] = load_case(ROOT / "benchmarks" / "gemm_gelu_f16.yaml")
    cases["gemm_wgmma"] = load_case(ROOT / "tests" / "codegen" / "programs" / "gemm_wgmma.yaml")
    jobs = [(name, mode, k) for name, case in cases.items() for mode in (NEW, OLD, WS)
            for k in _library_kernels(case, *mode)]
    mp = pytest.MonkeyPatch()
    mp.setenv("CUVIL_CACHE_DIR", str(tmp_path_factory.mktemp("wgmma-library-cache")))
    try:
        units = compile_units([CompileUnit(f"lib_{i}", k.source, (k.entry,), k.options)
                               for i, (_n, _m, k) in enumerate(jobs)], "sm_90")
    finally:
        mp.undo()
    out: dict = {}
    for (name, mode, k), u in zip(jobs, units):
        out.setdefault((name, mode), []).append((k, u))
    return out


def _sass(u) -> str:
    from cuvil_dsl.compile import SassUnavailable, disassemble, find_cuobjdump

    if find_cuobjdump() is None:
        pytest.skip("cuobjdump is not installed")
    try:
        return disassemble(u.cubin)
    except SassUnavailable as exc:
        pytest.skip(str(exc))


def _stores(sass: str, width: str = "") -> tuple[int, int]:
    """(32-bit, 16-bit) global stores; with ``width`` ("128"), (stores of that width, every other one)."""
    from cuvil_dsl.compile.sass import instructions

    ops = [op for op in instructions(sass) if op.startswith("STG.E")]
    if width:
        return sum(op == f"STG.E.{width}" for op in ops), sum(op != f"STG.E.{width}" for op in ops)
    return sum(op == "STG.E" for op in ops), sum(op.startswith("STG.E.U16") for op in ops)


@pytest.mark.parametrize("name", list(LIBRARY_PROGRAMS))
def test_library_pairs_where_they_apply(library, name):
    pair = LIBRARY_PROGRAMS[name][2]
    for mode in (NEW, OLD):
        for k, u in library[(name, mode)]:
            r = u.resources[k.entry]
            assert r.spill_bytes == 0 and r.stack_bytes == 0, (name, mode, r)
            assert "wgmma.mma_async" in k.source, (name, mode)
            body = k.source.split('extern "C"')[1]
            paired = "float& ACC0" in body
            assert paired == (mode is NEW and pair is not None), (name, mode)
            if paired:
                assert f"reinterpret_cast<{pair}*>" in body
                assert "float& ACC;" not in body and "float& ACC =" not in body
            sass = _sass(u)
            assert u.arch == "sm_90a" and "HGMMA" in sass
            wide, narrow = _stores(sass)
            # STAGED_STORES: one 16-bit output with N and its strides multiples of 8 goes out through shared
            # memory, in 16-byte stores only
            staged = "cvl_stage[" in body
            assert staged == (paired and name == "wg_batched_pairs"), (name, mode)
            if staged:
                chunks, other = _stores(sass, "128")
                assert chunks > 0 and other == 0, (name, chunks, other)
            elif paired:
                assert wide > 0 and narrow == 0, (name, wide, narrow)
            elif name != "wg_mixed_outputs":  # its f32 result uses 32-bit stores too
                assert wide == 0 and narrow > 0, (name, mode, wide, narrow)


def test_library_pair_reads_and_guards(library):
    (k, _u), = library[("wg_batched_pairs", NEW)]
    body = k.source.split('extern "C"')[1]
    assert "const __half2 pr" in body and ".x)" in body and ".y)" in body  # the bias row, one load per pair
    assert "(n + 1)" not in body.split("pr")[0]  # pair loads use the even column
    assert "if (m < 1000 && n < 1000)" in body  # ragged: both edges tested
    assert k.block == (512, 1, 1)  # 9 * 4 * 8 blocks of 256 x 128: LARGE_TILE
    (k, _u), = library[("wg_odd_n", NEW)]
    assert "if (m < 1000 && n < 999)" in k.source and "ACC0" not in k.source


def test_library_gemm_gelu_f16(library):
    """benchmarks/gemm_gelu_f16.yaml: 256 x 128 tiles (512 threads), paired bias loads, the output staged
    in shared memory and stored in 16-byte chunks (STAGED_STORES), no edge tests (the tiles divide 4096):
    an eighth of the store instructions of the paired epilogue, a sixteenth of the per-element one."""
    (new, un), = library[("gemm_gelu_f16", NEW)]
    (old, uo), = library[("gemm_gelu_f16", OLD)]
    assert new.block == (512, 1, 1) and new.grid == (512, 1, 1) and old.block == (256, 1, 1)
    assert "if (m < 4096" not in new.source and "if (m < 4096 && n < 4096)" in old.source
    for k, u in ((new, un), (old, uo)):
        r = u.resources[k.entry]
        assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers <= 65536 // k.block[0], r
    from cuvil_dsl.compile import count_instructions

    sn, so = _sass(un), _sass(uo)
    assert count_instructions(sn, r"HGMMA\.64x128x16\.F32") == 4
    assert count_instructions(so, r"HGMMA\.64x256x16\.F32") == 4
    # per thread: 256 x 128 / 512 = 64 elements (8 chunks of 16 bytes) against 128 x 256 / 256 = 128 elements
    assert _stores(sn, "128") == (8, 0) and _stores(so) == (0, 128)
    assert "cvl_stage[" in new.source and "cvl_stage[" not in old.source


def test_library_warp_specialised(library):
    """cuda_wgmma.LIBRARY_WS: launches on LARGE_TILE get the persistent producer / consumer kernel
    (grid of one block per SM, 4 consumer warpgroups + 1 producer, setmaxnreg, the barrier wait's trap outlined),
    with the library's tile decode (batch coordinates, operand bases) and the same paired epilogue; others are
    unchanged."""
    from cuvil_dsl.codegen.cuda_wgmma import ws_entry_regs

    specialised = {}
    for name in (*LIBRARY_PROGRAMS, "gemm_gelu_f16", "gemm_wgmma"):
        for (k, u), (k0, _u0) in zip(library[(name, WS)], library[(name, NEW)]):
            r = u.resources[k.entry]
            assert r.spill_bytes == 0 and r.stack_bytes == 0, (name, k.name, r)
            ws = "setmaxnreg" in k.source
            specialised[(name, k.name)] = ws
            if not ws:
                assert k.source == k0.source, (name, k.name)
                continue
            # persistent: a CTA a multiprocessor, or a tile (gemm_wgmma's u: 72 tiles of 256 x 128)
            assert k.block == (640, 1, 1) and k.grid[1:] == (1, 1) and k.grid[0] <= 132, (name, k.name)
            assert k.grid[0] == 132 or name == "gemm_wgmma", (name, k.grid)
            assert r.registers == ws_entry_regs(640), r
            # the same stages as the plain kernel's large tile (where that one took 128 x 192 tiles: NARROW_TILE)
            assert k.shared_bytes == k0.shared_bytes + 64 or "m64n192k16" in k0.source
            body = k.source.split('extern "C"')[1]
            assert "cvl_mbar_wait" in body and "__syncthreads()" not in body.split("setmaxnreg")[1]
            # the barrier wait traps through a function of its own (WS_TRAP_OUTLINED): inlined, ptxas would keep the
            # consumers at the entry count whatever setmaxnreg gives them; the plain kernel keeps its inlined trap
            assert "__noinline__ void cvl_hang()" in k.source and "cvl_hang" not in k0.source
            assert ("float& ACC0" in body) == ("float& ACC0" in k0.source)
            assert "HGMMA" in _sass(u)
    assert specialised[("gemm_gelu_f16", "gemm_gelu")] and specialised[("wg_batched_pairs", "main_k1")]
    assert specialised[("gemm_wgmma", "main_k2")] and not specialised[("wg_odd_n", "main_k1")]
    (k, _u), = library[("wg_batched_pairs", WS)]
    assert "const int c0 = (bz) % 9;" in k.source and "pa = b0 + (int)c0 * " in k.source  # per-tile batch


# -- the library's plain GEMM with TMA loads (cuda_wgmma.TMA) ------------------------------------

def _library_gemm(text: str, sizes: dict):
    from cuvil_dsl.codegen import render_cuda
    from cuvil_dsl.frontend import check_source
    from cuvil_dsl.passes import plan_pipeline

    plan, _ = plan_pipeline(check_source(text, "tma.cuvil").module.pipelines[0])
    (k,) = render_cuda(plan, sizes, "sm_90")
    return k


GELU = """pipeline g(a: f16[M, K], b: f16[K, N], bias: f16[N]) -> y: f16[M, N] {
    y = gelu(a @ b + bias)
}"""


@pytest.mark.parametrize("ws,multicast", [(False, False), (False, True), ("tma", False), ("tma", "ws")])
@pytest.mark.parametrize("b_t", [False, True])
def test_library_gemm_loads_tiles_with_tma(b_t, ws, multicast, tmp_path, monkeypatch):
    """The plain kernel (LIBRARY_WS False, the default) and the warp-specialised persistent one ("tma")
    load both operands by TMA: tensor-map parameters, no cp.async; in the specialised kernel one thread
    of the producer warpgroup issues every stage's copies. With MULTICAST (True: the plain kernel, "ws":
    the warp-specialised one) the CTAs run in clusters of 2 along M (4000 rows: 32 row tiles, so every
    CTA has its partner), each loading its A and half of the B tile into both, once both copies of the
    stage are free: in the plain kernel the partner's arrival on an "empty" barrier, in the specialised
    one each consumer warp of both CTAs releases the stage."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "LIBRARY_WS", ws)
    monkeypatch.setattr(cuda_wgmma, "MULTICAST", multicast)
    pair = (multicast is True and not ws) or (multicast == "ws" and bool(ws))
    text = GELU.replace("b: f16[K, N]", "b: f16[N, K]").replace("a @ b", "a @ b.T") if b_t else GELU
    k = _library_gemm(text, {"M": 4000, "N": 3000, "K": 520})
    maps = {a.name: a.tensor_map for a in k.args if a.kind == "tensormap"}
    assert set(maps) == {"tma_a", "tma_b"}
    # A [M, K] K-major: one box of 64 (K) x 128 rows; B [K, N] N-major: boxes of 64 (N) x 64 (K),
    # or B stored [N, K]: one box of 64 (K) x 256 rows (128, half the tile's, for a pair)
    assert maps["tma_a"].dims == (520, 4000) and maps["tma_a"].stride == 520 * 2 and maps["tma_a"].box == (64, 128)
    if b_t:
        assert maps["tma_b"].dims == (520, 3000) and maps["tma_b"].box == (64, 128 if pair else 256)
    else:
        assert maps["tma_b"].dims == (3000, 520) and maps["tma_b"].stride == 3000 * 2 and maps["tma_b"].box == (64, 64)
    body = k.source.split('extern "C"')[1]
    sites = 1 if ws else 3  # per stage; the plain kernel's prologue 2 + loop 1
    if pair:  # A alone; this CTA's half of B, multicast to both (mask 3)
        assert body.count("cvl_tma_2d(") == sites and body.count("cvl_tma_2d_mc(") == (1 if b_t else 2) * sites
        assert body.count(", bar, 3);") == (1 if b_t else 2) * sites
        assert "__cluster_dims__(2, 1, 1)" in body and k.grid == ((132 if ws else 32 * 12), 1, 1)
        # tiles mt, mt + 1 of one column tile; the pairs walk groups of 8 (test_grouped_walk_of_pairs)
        assert "const int mt = mp_ * 2 + (int)rank;" in body and "const int mp_ = first_ + q_ % rows_;" in body
        if ws:  # a pair tile at a time; a stage released by each consumer warp of both CTAs (8 + 8)
            assert k.persistent_cluster == 2 and "cvl_mbar_init(bars + 8 * (4 + i), 16u);" in body
            assert "else if (lane == 1) cvl_mbar_arrive_cta(bars + 8 * (4 + (g - 1) % 4), rank ^ 1u);" in body
            assert body.rstrip().endswith("cvl_pair_sync();  // no CTA leaves while its partner may still arrive on its barriers\n}")
    if pair and not ws:
        # our copy of the stage to refill is free after the block barrier (told at once); after the step's
        # wgmma are issued, the wait for the partner's copy, then the refill
        loop = body.index("for (int step = 0;")
        free = body.index("    cvl_mbar_arrive_cta(empty0 + ((step + 2) % 4) * 8, rank ^ 1u);", loop)
        issued = body.index("cvl_wgmma_commit();", loop)
        assert body.index("__syncthreads();", loop) < free < issued < body.index(
            "cvl_mbar_wait(empty0 + ((step + 2) % 4) * 8, (step / 4) & 1);") < body.index("cvl_tma_2d_mc(", loop)
        assert body.index("cvl_pair_sync();") < body.index("cvl_tma_2d(")  # partner's barriers set up first
    if not pair:
        assert body.count("cvl_tma_2d(") == (2 if b_t else 5) * sites and "cvl_tma_2d_mc" not in body
        assert "__cluster_dims__" not in body
    assert "cvl_cp_async16s" not in body
    assert "__grid_constant__ cvl_tensor_map tma_a" in body
    assert ("setmaxnreg" in body) == bool(ws) and k.block == ((384 if ws else 256), 1, 1)
    if ws:  # persistent: one block per SM, walking tiles; the consumers wait on the TMA barriers
        assert k.grid == (132, 1, 1) and "if (threadIdx.x == 0) {  // the copies of every stage" in body
        assert "cvl_mbar_wait(full0 + 8 * stage" in body and "cvl_fence_proxy_async" not in body
    _nvrtc_or_skip()
    from cuvil_dsl.compile import CompileUnit, SassUnavailable, compile_units, count_instructions, disassemble, find_cuobjdump

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    (u,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], "sm_90", fallback="none")
    r = u.resources[k.entry]
    # no serialised wgmma: a pair's wait for its partner is every thread's (on thread 0's divergent path a
    # wait loop made ptxas serialise them, C7518: 1.7x slower on the H200)
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and "serialized" not in u.log, u.log
    if find_cuobjdump() is None:
        return
    try:
        sass = disassemble(u.cubin)
    except SassUnavailable:
        return
    assert count_instructions(sass, "UTMALDG") > 0 and count_instructions(sass, "LDGSTS") == 0
    assert (count_instructions(sass, r"UTMALDG\.2D\.MULTICAST") > 0) == pair
    assert count_instructions(sass, r"HGMMA\.64x256x16\.F32") == 4


@pytest.mark.parametrize("m,multicast,paired", [(4096, True, True), (3900, True, False), (4096, False, False)])
def test_library_gemm_pairs_only_whole_pairs_of_row_tiles(m, multicast, paired, monkeypatch):
    """cuda_wgmma.pairs: clusters of 2 only when every row tile has its partner (3900 rows: 31 tiles, so
    the plain kernel keeps one CTA a tile, unclustered) and MULTICAST is on."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "MULTICAST", multicast)
    k = _library_gemm(GELU, {"M": m, "N": 4096, "K": 256})
    assert ("__cluster_dims__(2, 1, 1)" in k.source) == paired and ("cvl_tma_2d_mc(" in k.source) == paired
    assert k.grid == (-(-m // 128) * 16, 1, 1)


def test_batched_operands_load_by_three_dimensional_tensor_maps(monkeypatch):
    """cuda_wgmma.TMA_BATCHED: a batched operand's batch axes fold into the outer dimension of a 3-D map (A [B, M, K]
    with stride M K; B [B, K, N] with stride K N; a bias broadcast over the batch keeps its pointer), each box at
    the tile's batch coordinate; off, or where the axes do not fold, cp.async as before."""
    text = """pipeline g(a: f16[B, H, M, K], b: f16[H, K, N]) -> y: f16[B, H, M, N] {
        y = a @ b
    }"""
    k = _library_gemm(text, {"B": 2, "H": 3, "M": 1000, "N": 1000, "K": 256})
    maps = {a.name: a.tensor_map for a in k.args if a.kind == "tensormap"}
    assert maps["tma_a"].dims == (256, 1000, 6) and maps["tma_a"].box == (64, 128, 1)
    assert maps["tma_a"].stride == 256 * 2 and maps["tma_a"].batch_stride == 1000 * 256 * 2
    assert maps["tma_b"].dims == (1000, 256, 3) and maps["tma_b"].batch_stride == 256 * 1000 * 2  # broadcast over B
    body = k.source.split('extern "C"')[1]
    assert "cvl_tma_3d(sa + " in body and ", (int)c0 * 3 + (int)c1, bar);" in body and ", (int)c1, bar);" in body
    assert "cvl_cp_async16s(" not in body and "cvl_tma_2d(" not in body
    monkeypatch.setattr(cuda_wgmma, "TMA_BATCHED", False)
    k = _library_gemm(text, {"B": 2, "H": 3, "M": 1000, "N": 1000, "K": 256})
    assert "cvl_cp_async16s(" in k.source and not any(a.kind == "tensormap" for a in k.args)


def test_batch_view_folds_only_axes_of_one_stride():
    from types import SimpleNamespace

    view = cuda_wgmma.batch_view
    assert view(SimpleNamespace(batch=()), None) == (1, 0, ())
    assert view(SimpleNamespace(batch=((0, 3000), (1, 1000))), (2, 3, 64, 64)) == (6, 1000, ((0, 3), (1, 1)))
    assert view(SimpleNamespace(batch=((1, 4096),)), (5, 7, 64, 64)) == (7, 4096, ((1, 1),))
    assert view(SimpleNamespace(batch=((0, 1000), (1, 3000))), (2, 3, 64, 64)) is None  # transposed batch axes
    assert view(SimpleNamespace(batch=((0, 8000), (1, 1000))), (2, 3, 64, 64)) is None  # a gap between batches
    assert view(SimpleNamespace(batch=((0, 8),)), None) is None  # no domain to fold over


# -- split-K (cuda_wgmma.SPLIT_K) -------------------------------------------------------------------

@pytest.mark.parametrize("tiles,steps,parts", [
    (64, 128, 2),  # 1024 x 1024 x 8192: two parts fill 128 SMs
    (16, 128, 8),  # capped at SPLIT_MAX
    (4, 64, 4),  # every part at least SPLIT_MIN_STEPS steps
    (24, 65, 4),  # parts of 17 steps, the last 14
    (66, 256, 2), (67, 256, 1),  # more than half the SMs busy: no split
    (10, 31, 1),  # too shallow for two parts
    (5, 100, 6), (1, 200, 8),
])
def test_split_parts(tiles, steps, parts):
    from cuvil_dsl.codegen.cuda_wgmma import split_parts

    assert split_parts(tiles, steps, 132) == parts


def test_split_parts_cover_k_with_no_empty_part(monkeypatch):
    from cuvil_dsl.codegen import cuda_wgmma

    for tiles, steps in itertools.product(range(1, 70), range(1, 300, 7)):
        parts = cuda_wgmma.split_parts(tiles, steps, 132)
        per = -(-steps // parts)
        assert tiles * parts <= 132 and parts * per >= steps and (parts - 1) * per < steps
        assert parts == 1 or per >= cuda_wgmma.SPLIT_MIN_STEPS - 1
    monkeypatch.setattr(cuda_wgmma, "SPLIT_K", False)
    assert cuda_wgmma.split_parts(16, 128, 132) == 1


@pytest.mark.parametrize("exchange", ["l2", "dsmem"])
def test_split_k_kernels(exchange, tmp_path, monkeypatch):
    """gemm_split_k's GEMMs: a CTA per (part, tile); each part walks its own steps of K (the batched one, with
    steps past K, tests K in its loads). Where the output has no 16-byte chunks (y, z) the parts meet in a
    workspace of the tiles' counters (256 bytes) and one f32 partial tile per CTA: partials out, a ticket after
    the fences, the last CTA adds the parts in order and resets the counter. Two parts (w) are one cluster,
    each CTA summing half the columns from both; more (u, t: 4, x: 8) are clusters of two that sum their pair's
    halves the same way, then meet through the workspace per (tile, half): each CTA's half sum out, a ticket,
    the last adds the clusters' sums in order. A cluster's pair meets through the workspace from the
    accumulators (cuda_wgmma.SPLIT_EXCHANGE "l2": the peer's half out, a cluster barrier, the peer's part of
    this CTA's half read back) or in shared memory ("dsmem": whole partials in each CTA's shared memory, read
    through the cluster's window). All compile for sm_90a with no spills."""
    import sys

    from cuvil_dsl.codegen import render_cuda

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from codegen_cases import ROOT, compile_kernel, load_case

    monkeypatch.setattr(cuda_wgmma, "SPLIT_EXCHANGE", exchange)
    case = load_case(ROOT / "tests" / "codegen" / "programs" / "gemm_split_k.yaml")
    y, z, u, w, x, t = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
    for k, tiles, parts, per, loads_test_k, bn in ((y, 4 * 6, 4, 17, False, 128), (z, 2 * 3 * 3, 2, 17, False, 128),
                                                   (u, 8 * 4, 4, 17, False, 256), (w, 8 * 8, 2, 17, False, 256),
                                                   (x, 2 * 4, 8, 17, False, 128), (t, 2 * 2 * 4, 4, 16, False, 128)):
        assert k.grid == (tiles * parts, 1, 1)
        body = k.source.split('extern "C"')[1]
        lines = body.splitlines()
        assert f"for (int step = 0; step < {per}; ++step)" in body
        assert (f"gk < {case.binding.sizes['D']}" in body) == loads_test_k
        if k in (y, z):
            adds = body.index(f"for (int p = 0; p < {parts}; ++p)")
            (ws,) = [a for a in k.args if a.kind == "workspace"]
            assert ws.workspace == 256 + tiles * parts * 128 * bn * 4 and "__cluster_dims__" not in body
            assert f"const int tile_ = blockIdx.x % {tiles};" in body and f"const int part = blockIdx.x / {tiles};" in body
            fence, ticket = body.index("__threadfence();"), body.index("atomicAdd(&cvl_count[tile_], 1u)")
            leave = body.index(f"if (cvl_ticket != {parts - 1}u) return;")
            assert fence < ticket < leave < adds < body.index("cvl_count[tile_] = 0u;") < body.index("float& ACC0")
            continue
        assert body.startswith(" __global__ void __cluster_dims__(2, 1, 1)")
        assert f"const int part = blockIdx.x % {parts};" in body and f"const int tile_ = blockIdx.x / {parts};" in body
        assert "for (int p = 0; p < 2; ++p)" in body  # a cluster's two partials, in rank order
        groups, half = parts // 2, 128 * bn // 2 // 4  # a half tile's sum in float4
        rank = "part" if groups == 1 else "(part % 2)"
        assert f"const int nc = {rank} * {bn // 2} + c % {bn // 2 // 8} * 8;" in body
        syncs = [i for i, line in enumerate(lines) if "cvl_split_sync();" in line]
        first = syncs[0]
        before, after = "\n".join(lines[:first]), "\n".join(lines[first:])
        pair_bytes = tiles * parts * half * 16 if exchange == "l2" else 0  # each CTA's part of its peer's half
        (ws,) = [a for a in k.args if a.kind == "workspace"] or [None]
        if exchange == "l2":
            assert len(syncs) == 1 and "cvl_ld_peer4(" not in body and "__threadfence();" in lines[first - 1]
            assert f"__stcg(to + i * 256, make_float4(acc[{bn // 4} + 4 * i + 0]" in before  # the peer's half out
            assert after.index("for (int p = 0; p < 2; ++p)") < after.index("*reinterpret_cast<uint4*>(&")
        else:
            second = syncs[1]
            assert len(syncs) == 2 and "make_float2(acc[" in lines[first - 1]
            assert "cvl_ld_peer4(at, p)" in "\n".join(lines[first:second])
        if k is w:  # one cluster a tile: each CTA stores its half of the columns
            assert "cvl_ticket" not in body
            assert ws.workspace == pair_bytes if exchange == "l2" else ws is None
            continue
        assert ws.workspace == 256 + groups * tiles * 2 * half * 16 + pair_bytes
        ticket, leave = after.index("atomicAdd(&cvl_count[tile_ * 2 + (part % 2)], 1u)"), after.index(
            f"if (cvl_ticket != {groups - 1}u) return;")
        adds = after.index(f"for (int g = 0; g < {groups}; ++g)")
        assert "*reinterpret_cast<uint4*>(&" not in after[:ticket]  # the last cluster's CTA alone stores outputs
        assert ticket < leave < adds < after.index("*reinterpret_cast<uint4*>(&")
        assert adds < after.index("cvl_count[tile_ * 2 + (part % 2)] = 0u;")
        unit = compile_kernel(k, monkeypatch, tmp_path, fallback="none")
        r = unit.resources[k.entry]
        assert r.spill_bytes == 0 and r.stack_bytes == 0 and "serializ" not in unit.log.lower(), unit.log
    assert "cvl_tma_2d(" in y.source and "cvl_tma_3d(" in z.source and "cvl_tma_3d(" in t.source
    assert "__nv_bfloat16 cvl_o[8];" in t.source  # a batched bf16 GEMM's clusters store 16-byte chunks of bf16


@pytest.mark.parametrize("sizes,tile,parts", [
    ((2048, 2048, 8192), 256, 1), ((4096, 4096, 4096), 256, 1),  # large tiles from half the SMs on
    ((1536, 2048, 8192), 192, 1),  # 96 large tiles (one wave, 36 SMs idle) or 132 of 128 x 192 (NARROW_TILE)
    ((1024, 2048, 512), 128, 1),  # too shallow to split: 128 x 128 tiles fill the SMs
    ((1024, 1024, 8192), 256, 4),  # 32 large tiles in 4 parts: 41.8 us, 45.3 on 64 of 128 x 128 in 2
    ((1024, 2048, 8192), 256, 2),  # 63.1 us, 68.8 on 128 of 128 x 128
    ((512, 1024, 8192), 128, 4),  # 16 large tiles in 4 fill under half: 32 of 128 x 128 in 4 (30.6 us)
])
def test_tile_and_split_choice(sizes, tile, parts):
    """cuda_wgmma.plain_engine's choice, as measured on the H200 in sessions 14 and 19 (cuda_wgmma.LARGE_WAVES,
    SPLIT_K, NARROW_TILE): the grid is the tiles times the parts of K, and only a split kernel has a workspace (where a
    cluster's parts meet, cuda_wgmma.SPLIT_EXCHANGE "l2"; a ticket's counters with more than one cluster a tile)."""
    M, N, K = sizes
    k = _library_gemm(GELU, {"M": M, "N": N, "K": K})
    assert k.grid == (-(-M // 128) * -(-N // tile) * parts, 1, 1)
    # two parts meet in a cluster; more in clusters of two, whose sums meet through the workspace
    assert ("__cluster_dims__(2, 1, 1)" in k.source) == (parts > 1)
    assert any(a.kind == "workspace" for a in k.args) == (parts > 1) and ("cvl_ticket" in k.source) == (parts > 2)


# -- the narrower large tile (cuda_wgmma.NARROW_TILE) ------------------------------------------------

@pytest.mark.parametrize("wide,narrow,chosen", [
    (288, 384, True),  # 3072^3: 3 waves of 128 x 256 (the last 24 tiles) against 3 of 128 x 192
    (192, 264, True),  # 1536 x 4096 x 4096: 2 against 2
    (96, 132, True), (100, 133, False),  # one wave against one; against two
    (320, 440, False),  # 2560 x 4096 x 4096: 3 against 4
    (512, 704, False),  # 4096^3: 4 against 6
    (2048, 2752, False),  # 8192^3: 16 against 21
])
def test_narrow_tile_takes_launches_that_end_in_a_thin_wave(wide, narrow, chosen, monkeypatch):
    from cuvil_dsl.codegen import cuda_wgmma

    assert cuda_wgmma.narrow_pays(wide, narrow, 132) == chosen
    monkeypatch.setattr(cuda_wgmma, "NARROW_TILE", None)
    assert not cuda_wgmma.narrow_pays(wide, narrow, 132)


@pytest.mark.parametrize("sizes,tile", [
    ((3072, 3072, 3072), 192), ((1536, 4096, 4096), 192), ((1400, 2296, 200), 192),  # ragged M, N and K
    ((2560, 4096, 4096), 256), ((4096, 4096, 4096), 256), ((4000, 3000, 520), 256),
])
def test_narrow_tile_choice(sizes, tile, monkeypatch):
    """plain_engine's 128 x 192 tiles (three B boxes of 64 columns, m64n192k16 wgmma, 192-column staging) where
    128 x 256 ones end in a thin last wave (batched operands too, loaded by 3-D tensor maps); none when NARROW_TILE
    is None."""
    from cuvil_dsl.codegen import cuda_wgmma

    M, N, K = sizes
    k = _library_gemm(GELU, {"M": M, "N": N, "K": K})
    assert k.grid == (-(-M // 128) * -(-N // tile), 1, 1) and k.block == (256, 1, 1)
    assert ("m64n192k16" in k.source) == (tile == 192) and ("m64n256k16" in k.source) == (tile == 256)
    assert "__cluster_dims__" not in k.source and not any(a.kind == "workspace" for a in k.args)
    monkeypatch.setattr(cuda_wgmma, "NARROW_TILE", None)
    assert _library_gemm(GELU, {"M": M, "N": N, "K": K}).grid == (-(-M // 128) * -(-N // 256), 1, 1)
    monkeypatch.undo()
    batched = GELU.replace("a: f16[M, K], b: f16[K, N]", "a: f16[B, M, K], b: f16[B, K, N]").replace(
        "f16[M, N]", "f16[B, M, N]")
    kb = _library_gemm(batched, {"B": 2, "M": M, "N": N, "K": K})  # two of each tile, by 3-D tensor maps
    narrow = cuda_wgmma.narrow_pays(2 * -(-M // 128) * -(-N // 256), 2 * -(-M // 128) * -(-N // 192), 132)
    assert "cvl_tma_3d(" in kb.source and ("m64n192k16" in kb.source) == narrow


def test_narrow_tile_compiles_without_spills(tmp_path, monkeypatch):
    _nvrtc_or_skip()
    from cuvil_dsl.compile import CompileUnit, SassUnavailable, compile_units, count_instructions, disassemble, find_cuobjdump

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    for sizes in ({"M": 3072, "N": 3072, "K": 3072}, {"M": 1400, "N": 2296, "K": 200}):
        k = _library_gemm(GELU, sizes)
        (u,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], "sm_90", fallback="none")
        r = u.resources[k.entry]
        assert u.arch == "sm_90a" and r.spill_bytes == 0 and r.stack_bytes == 0 and "serializ" not in u.log, u.log
        if find_cuobjdump() is None:
            continue
        try:
            sass = disassemble(u.cubin)
        except SassUnavailable:
            continue
        assert count_instructions(sass, r"HGMMA\.64x192x16\.F32") == 4 and count_instructions(sass, "UTMALDG") > 0


@pytest.mark.parametrize("groups", [False, True])
def test_four_parts_meet_in_clusters_of_two(groups, monkeypatch):
    """cuda_wgmma.SPLIT_CLUSTER_GROUPS: 4 parts as two clusters of two meeting through the workspace (a half tile's
    sum per CTA: 64 KB, after each pair met there: 64 KB a CTA, its peer's half); False: the workspace alone (a
    whole partial tile per CTA: 128 KB)."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "SPLIT_CLUSTER_GROUPS", groups)
    k = _library_gemm(GELU, {"M": 1024, "N": 1024, "K": 8192})
    (ws,) = [a for a in k.args if a.kind == "workspace"]
    assert k.grid == (128, 1, 1) and ("__cluster_dims__(2, 1, 1)" in k.source) == groups
    assert ws.workspace == 256 + (2 * (2 * 32 * 2 * 64 * 1024) if groups else 4 * 32 * 128 * 1024)


@pytest.mark.parametrize("cluster", [False, True])
def test_two_parts_meet_in_a_cluster(cluster, monkeypatch):
    """cuda_wgmma.SPLIT_CLUSTER: two parts of a tile are one cluster, each CTA writing its peer's half of the
    columns to the workspace (64 KB a CTA, no counters; none when they meet in shared memory); False: the
    workspace alone (a whole partial tile a CTA, and the tiles' counters)."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "SPLIT_CLUSTER", cluster)
    k = _library_gemm(GELU, {"M": 1024, "N": 2048, "K": 8192})
    assert k.grid == (128, 1, 1) and ("__cluster_dims__(2, 1, 1)" in k.source) == cluster
    (ws,) = [a for a in k.args if a.kind == "workspace"]
    assert ws.workspace == (128 * 64 * 1024 if cluster else 256 + 128 * 128 * 1024)
    monkeypatch.setattr(cuda_wgmma, "SPLIT_EXCHANGE", "dsmem")
    k = _library_gemm(GELU, {"M": 1024, "N": 2048, "K": 8192})
    assert any(a.kind == "workspace" for a in k.args) != cluster


def _decode_lines(source: str) -> list[str]:
    """The plain kernel's tile decode: the ``const int`` lines from the first that reads blockIdx.x."""
    import re

    lines = [line.strip() for line in source.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("const int") and "blockIdx.x" in line)
    out = []
    for line in lines[start:]:
        if not re.match(r"const int (bz|r_|first_|rows_|q_|mt|nt|pair_|mp_) = ", line):
            break
        out.append(line.replace("blockIdx.x", "t").replace("(int)rank", "rank"))
    return out


@pytest.mark.parametrize("M,N,rows", [(8192, 8192, 8), (2900, 3000, 16), (2900, 3000, 8), (4000, 3000, 4),
                                      (4096, 4096, 0), (1000, 1000, 8), (2048, 8192, 16), (1024, 16384, 16)])
def test_grouped_walk_visits_every_tile_once(M, N, rows, monkeypatch):
    """cuda_wgmma.RASTER_ROWS G: the plain kernel's blocks walk groups of G row tiles, each column by column
    (the last group fewer rows: 23 row tiles at M = 2900; with G or fewer row tiles, 16 at M = 2048 and 8 at
    1024, one group: column-major); every tile once; the first G x nt blocks stay in one group. Grids of one
    wave (1000 x 1000: 64 tiles) and a G of 0 keep the row-major walk."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "RASTER_ROWS", rows)
    k = _library_gemm(GELU, {"M": M, "N": N, "K": 512})
    bn = 192 if "m64n192k16" in k.source else 256 if M * N > 2**21 else 128  # 2900 x 3000: NARROW_TILE
    mt, nt = -(-M // 128), -(-N // bn)
    assert k.grid == (mt * nt, 1, 1)
    decode = _decode_lines(k.source)
    rows = min(rows, mt)
    grouped = rows > 1 and mt * nt > 132
    assert any("first_" in line for line in decode) == grouped
    walk = [(env["mt"], env["nt"], env["bz"]) for env in (_c_block(decode, t=t) for t in range(mt * nt))]
    assert sorted(walk) == [(m, n, 0) for m in range(mt) for n in range(nt)]
    head = {m for m, _n, _b in walk[:(rows if grouped else 1) * nt]}
    assert head == (set(range(rows)) if grouped else {0})
    if grouped:  # inside a group, the row tile changes fastest
        assert [m for m, _n, _b in walk[:rows]] == list(range(rows))


@pytest.mark.parametrize("M,N", [(4000, 3000), (8192, 8192), (2048, 4096)])
def test_grouped_walk_of_pairs(M, N, monkeypatch):
    """With B multicast to CTA pairs (cuda_wgmma.MULTICAST), the pairs of row tiles walk groups of
    RASTER_ROWS / 2 pairs, each column by column: CTAs 2i and 2i + 1 take row tiles 2j and 2j + 1 of one
    column tile, and every tile is taken once."""
    from cuvil_dsl.codegen import cuda_wgmma

    monkeypatch.setattr(cuda_wgmma, "MULTICAST", True)
    k = _library_gemm(GELU, {"M": M, "N": N, "K": 512})
    mt, nt = -(-M // 128), -(-N // 256)
    assert k.grid == (mt * nt, 1, 1) and "__cluster_dims__(2, 1, 1)" in k.source
    decode = _decode_lines(k.source)
    walk = [(env["mt"], env["nt"], env["bz"]) for env in (_c_block(decode, t=t, rank=t % 2) for t in range(mt * nt))]
    assert sorted(walk) == [(m, n, 0) for m in range(mt) for n in range(nt)]
    assert all(walk[t][1] == walk[t + 1][1] and walk[t][0] % 2 == 0 and walk[t][0] + 1 == walk[t + 1][0]
               for t in range(0, mt * nt, 2))
    group = min(cuda_wgmma.RASTER_ROWS, mt)
    assert {m for m, _n, _b in walk[:group * nt]} == set(range(group))


def test_refill_first_loop_builds_for_every_tma_gemm(tmp_path, monkeypatch):
    """REFILL_FIRST (an A/B switch, session 36): each step's block barrier and the refill of step s + P come before
    the wait for step s's tile. Every TMA main loop of the GEMM programs and the benchmark changes only there (one
    barrier a step, as before) and still builds for sm_90a without spills or a serialised wgmma chain."""
    _nvrtc_or_skip()
    import re

    from codegen_cases import ROOT, case_paths, load_case

    from cuvil_dsl.codegen import render_cuda
    from cuvil_dsl.compile import CompileUnit, compile_units

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    paths = [p for p in case_paths() if p.stem.startswith("gemm")] + [ROOT / "benchmarks" / "gemm_gelu_f16.yaml"]
    loop = re.compile(r"for \(int step = 0; step < \d+; \+\+step\) \{\n(.*?)\n    \}\n", re.S)
    kernels = []
    for path in paths:
        case = load_case(path)
        before = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90", tf32=case.tf32)
        monkeypatch.setattr(cuda_wgmma, "REFILL_FIRST", True)
        after = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90", tf32=case.tf32)
        monkeypatch.setattr(cuda_wgmma, "REFILL_FIRST", False)
        for b, a in zip(before, after):
            if "cvl_mbar_wait(full0 + (step %" not in b.source or "empty0" in b.source:  # no TMA loop, or pairs
                assert a.source == b.source, (path.stem, a.name)
                continue
            body = loop.search(a.source).group(1)
            wait, barrier, refill = (body.index("cvl_mbar_wait(full0 + (step %"), body.index("__syncthreads();"),
                                     body.index("cvl_mbar_expect_tx("))
            assert barrier < refill < wait < body.index("cvl_wgmma_commit();"), (path.stem, a.name)
            assert body.count("__syncthreads();") == 1
            old = loop.search(b.source).group(1)
            assert sorted(old.splitlines()) == sorted(body.splitlines())  # the same lines, reordered
            kernels.append(a)
    assert len(kernels) >= 10
    units = compile_units([CompileUnit(f"{k.entry}_{i}", k.source, (k.entry,), k.options) for i, k in enumerate(kernels)],
                          "sm_90", fallback="none")
    for k, u in zip(kernels, units):
        r = u.resources[k.entry]
        assert u.arch == "sm_90a" and r.spill_bytes == 0 and r.stack_bytes == 0 and "serializ" not in u.log, (k.name, u.log)
