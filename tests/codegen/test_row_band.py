"""The row-band GEMM + softmax template (cuda_matmul, 16-bit operands, K <= 128): when it is
chosen, what the benchmark kernel compiles to, and the generic template behind ``ROW_BAND``."""

from __future__ import annotations

import re

from pathlib import Path

import pytest
from codegen_cases import ROOT, compile_kernel, load_case

from cuvil_dsl.codegen import cuda_matmul, render_cuda
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes import plan_pipeline

BENCH = ROOT / "benchmarks" / "attention_f16.yaml"


def _render(path: Path, arch: str = "sm_90"):
    case = load_case(path)
    return render_cuda(case.plan(arch), case.binding.sizes, arch, tf32=case.tf32)


def _is_band(source: str) -> bool:
    return "the A band" in source and "__shared__ float warp_max" not in source


def test_attention_benchmark_takes_the_row_band(monkeypatch):
    # the mma.sync band (asked for: on sm_90 the benchmark's size picks the wgmma band, see
    # test_band_engines_follow_the_measured_sweep)
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"mma": True})
    (k,) = _render(BENCH)
    assert _is_band(k.source)
    # 128 rows (4 warps of 32) per block, 4 blocks per SM, every column of a row in one warp
    assert k.block == (128, 1, 1) and k.grid == (32 * 2048 // 128, 1, 1)
    body = k.source.split('extern "C"')[1]
    assert "__launch_bounds__(128, 4)" in body
    assert body.count("__syncthreads()") == 2  # the A band, then one per column tile
    assert "__stcs(reinterpret_cast<uint4*>" in body  # staged 16-byte streaming stores
    # the scale folded into one FMA, log2(sum) into the base: no multiply or division per element
    assert "cvl_ex2(fmaf(ACC, band_c, -row_base[slot]));" in body and "log2f(total)" in body
    assert "/ row_" not in body and "* row_norm[slot]" not in body


def test_unfolded_write_pass_multiplies_by_the_reciprocal(monkeypatch):
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"fold": False, "stream": False})
    (k,) = _render(BENCH)
    body = k.source.split('extern "C"')[1]
    assert "* row_norm[slot]" in body and "/ row_" not in body and "band_c" not in body


def test_switch_and_deep_k_use_the_generic_template(monkeypatch):
    monkeypatch.setattr(cuda_matmul, "ROW_BAND", False)
    (k,) = _render(BENCH)
    assert not _is_band(k.source) and "__shared__ float warp_max" in k.source
    monkeypatch.setattr(cuda_matmul, "ROW_BAND", True)
    text = """pipeline deep(q: f16[M, D], k: f16[N, D]) -> p: f16[M, N] {
        p = softmax(q @ k.T, axis=-1)
    }"""
    plan, _ = plan_pipeline(check_source(text, "deep.cuvil").module.pipelines[0])
    (deep,) = render_cuda(plan, {"M": 256, "N": 256, "D": 160}, "sm_90")
    assert not _is_band(deep.source)
    (short,) = render_cuda(plan, {"M": 256, "N": 256, "D": 128}, "sm_90")
    assert _is_band(short.source)


def test_spec_tiles_pick_the_template():
    text = """pipeline t(q: f16[M, D], k: f16[N, D]) -> p: f16[M, N] {
        kernel s { p = softmax(q @ k.T, axis=-1) }
    }"""
    pipeline = check_source(text, "t.cuvil").module.pipelines[0]
    sizes = {"M": 512, "N": 512, "D": 64}
    # 2 warps of 32 rows each: a row band
    plan, diags = plan_pipeline(pipeline, {"s": {"block": 64, "tile": {"m": 64, "n": 64, "k": 32}}}, "sm_90")
    assert not diags
    (k,) = render_cuda(plan, sizes, "sm_90")
    assert _is_band(k.source) and k.block == (64, 1, 1) and "float acc[2][8][4];" in k.source
    # 8 warps over 64 rows would have 8 rows each: the generic template (warps split columns)
    plan, diags = plan_pipeline(pipeline, {"s": {"block": 256, "tile": {"m": 64, "n": 64, "k": 32}}}, "sm_90")
    assert not diags
    (k,) = render_cuda(plan, sizes, "sm_90")
    assert not _is_band(k.source)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_benchmark_kernel_resources(arch, tmp_path, monkeypatch):
    """The mma.sync band (on sm_90 asked for: the benchmark's size picks the wgmma band there)."""
    from cuvil_dsl.compile import CompileUnit, SassUnavailable, compile_units, count_instructions, disassemble

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"mma": True})
    (k,) = _render(BENCH, arch)
    (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], arch)
    r = unit.resources[k.entry]
    threads, per_sm = map(int, re.search(r"__launch_bounds__\((\d+), (\d+)\)", k.source).groups())
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers <= 65536 // (threads * per_sm), r
    assert k.shared_bytes <= 48 * 1024
    try:
        sass = disassemble(unit.cubin)
    except SassUnavailable as exc:
        pytest.skip(str(exc))
    # one tile of mma per step (2 m16 x 4 k16 x 8 n8 for a warp's 32 rows), two exponentials an
    # element (statistics and write) plus a few per row, 16-byte stores, no merge between warps
    assert count_instructions(sass, "HMMA") == 64
    assert 128 <= count_instructions(sass, r"MUFU\.EX2") <= 144
    assert count_instructions(sass, r"STG\.E(\.EF)?\.128") > 0
    assert count_instructions(sass, r"BAR\.SYNC") <= 4


# ---------------------------------------------------------------- tuning variants (ab_attention.py)
def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ab_attention", ROOT / "benchmarks" / "ab_attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _poly_emulated(x):
    """cvl_ex2_fma step by step in f32 (NumPy), its constants read from the helper's source."""
    import numpy as np

    src = cuda_matmul.BAND_POLY_HELPER
    coeffs = [np.float32(float(c)) for c in re.findall(r"([0-9.]+e[-+][0-9]+)f", src)]
    assert len(coeffs) == 5 and "p = fmaf(p, f, 1.0f);" in src  # degree 5, highest first, then 1
    coeffs.append(np.float32(1.0))
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        xc = np.where(np.isnan(x), x, np.maximum(x, np.float32(-127.0))).astype(np.float32)  # max.NaN
        magic = np.float32(12582912.0)
        t = (xc + magic).astype(np.float32)
        j = (t - magic).astype(np.float32)
        f = (xc - j).astype(np.float32)
        p = np.full_like(f, coeffs[0])
        for c in coeffs[1:]:
            p = (p.astype(np.float64) * f + np.float64(c)).astype(np.float32)  # fmaf: one rounding
        bits = np.where(np.isnan(t), np.float32(np.nan), t).view(np.uint32).astype(np.uint64)
        bits = np.where(np.isnan(t), np.uint64(0x7FFFFFFF), bits)  # the GPU's canonical NaN
        scale = (((bits << np.uint64(23)) + np.uint64(0x3F800000)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        return (p * scale.view(np.float32)).astype(np.float32)


def test_fma_exp2_accuracy_and_specials():
    import numpy as np

    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-126, 0.3, 1_000_000), np.linspace(-4, 0.25, 200_001)]).astype(np.float32)
    got = _poly_emulated(x).astype(np.float64)
    rel = np.abs(got / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() < 2.0 ** -22  # the bound the helper's comment states
    special = _poly_emulated(np.array([-np.inf, -1000.0, -126.6, -127.0, np.nan, 0.0, -1.0], dtype=np.float32))
    assert (special[:4] == 0).all() and np.isnan(special[4]) and special[5] == 1.0 and special[6] == 0.5


def test_poly_variant_moves_exps_to_the_fma_pipe(monkeypatch):
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"poly": (4, 2)})
    (k,) = _render(BENCH)
    body = k.source.split('extern "C"')[1]
    assert "cvl_ex2_fma" in k.source and "max.NaN.f32" in k.source
    # the statistics pass: half of a tile's element pairs, the write pass a quarter
    assert "((ni * 2 + q) % 8 < 4 ? cvl_ex2_fma(fmaf(ACC, band_c, -base[slot]))" in body
    assert "((ni * 2 + q) % 8 < 2 ? cvl_ex2_fma(fmaf(ACC, band_c, -row_base[slot]))" in body
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"poly": (8, 0)})
    (k,) = _render(BENCH)
    assert "? cvl_ex2_fma" not in k.source and "row_sum[slot] += cvl_ex2_fma(" in k.source
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {})
    (k,) = _render(BENCH)
    assert "cvl_ex2_fma" not in k.source  # the default has no helper


def test_64_row_warps_only_for_tuning_tiles(monkeypatch):
    """A 64-row warp needs about 200 registers: ROW_BAND_TUNING's tiles (which set min_blocks) may ask
    for one; a spec's tile with 64 rows a warp stays on the generic template."""
    text = """pipeline t(q: f16[M, D], k: f16[N, D]) -> p: f16[M, N] {
        kernel s { p = softmax(q @ k.T, axis=-1) }
    }"""
    pipeline = check_source(text, "t.cuvil").module.pipelines[0]
    plan, diags = plan_pipeline(pipeline, {"s": {"block": 64, "tile": {"m": 128, "n": 32, "k": 32}}}, "sm_90")
    assert not diags
    (k,) = render_cuda(plan, {"M": 512, "N": 512, "D": 64}, "sm_90")
    assert not _is_band(k.source)
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"tile": (128, 32, 64), "min_blocks": 4})
    plan, _ = plan_pipeline(pipeline)
    (k,) = render_cuda(plan, {"M": 512, "N": 512, "D": 64}, "sm_90")
    assert _is_band(k.source) and k.block == (64, 1, 1) and "float acc[4][4][4];" in k.source
    assert "__launch_bounds__(64, 4)" in k.source


def _compile_sass(k, arch="sm_90"):
    from cuvil_dsl.compile import CompileUnit, SassUnavailable, compile_units, disassemble

    (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], arch)
    try:
        sass = disassemble(unit.cubin)
    except SassUnavailable:
        sass = None
    return unit.resources[k.entry], sass


def test_ab_attention_variants_build_without_spills(tmp_path, monkeypatch):
    """Every variant ab_attention.py times compiles for sm_90 with its launch bounds, no spills,
    shared memory within 4 blocks' share, the tile it asks for; poly variants have fewer MUFU.EX2."""
    from cuvil_dsl.compile import count_instructions

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    mod = _bench_module()
    variants = mod.VARIANTS + mod.CHECKED_VARIANTS
    assert len(variants) >= 10
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"mma": True})  # the band the poly variants tune
    _, base_sass = _compile_sass(_render(BENCH)[0])
    for name, tuning in variants:
        monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", dict(tuning))
        (k,) = _render(BENCH)
        assert _is_band(k.source), name
        if "tile" in tuning:
            bm, bn, threads = tuning["tile"]
            assert k.block == (threads, 1, 1) and k.grid == (32 * 2048 // bm, 1, 1), name
        threads, per_sm = map(int, re.search(r"__launch_bounds__\((\d+), (\d+)\)", k.source).groups())
        assert per_sm == tuning.get("min_blocks", per_sm), name
        assert per_sm * k.shared_bytes <= 227 * 1024, name
        r, sass = _compile_sass(k)
        assert r.spill_bytes == 0 and r.stack_bytes == 0, (name, r)
        assert r.registers <= min(255, 65536 // (threads * per_sm)), (name, r)
        if sass is not None and base_sass is not None and "tile" not in tuning and any(tuning.get("poly", ())):
            moved = 64 * (tuning["poly"][0] + tuning["poly"][1]) // 8  # of 64 elements a thread per pass
            assert count_instructions(sass, r"MUFU\.EX2") == count_instructions(base_sass, r"MUFU\.EX2") - moved, name


ODD = """pipeline odd(q: bf16[B, M, D], k: bf16[B, N, D]) -> p: bf16[B, M, N] {
    kernel scores { p = softmax(q @ k.T * 0.125, axis=-1) }
}"""


@pytest.mark.parametrize("path", [ROOT / "specs" / "masked_attention.yaml",
                                  ROOT / "tests" / "codegen" / "programs" / "attention_f16.yaml", None])
def test_checked_variants_on_masked_log_softmax_and_odd_cases(path, tmp_path, monkeypatch):
    """ab_attention's CHECKED_VARIANTS (all exps on the FMA pipe; the overlapped loop) render and build
    without spills for the unfolded passes (masks, log_softmax) and odd sizes (unstreamed B tiles)."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    for name, tuning in _bench_module().CHECKED_VARIANTS:
        monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", dict(tuning))
        if path is None:
            plan, _ = plan_pipeline(check_source(ODD, "odd.cuvil").module.pipelines[0])
            kernels = render_cuda(plan, {"B": 8, "M": 1000, "N": 1000, "D": 40}, "sm_90")
        else:
            kernels = _render(path)
        kernels = [k for k in kernels if _is_band(k.source)]
        assert kernels, name
        for k in kernels:
            body = k.source.split('extern "C"')[1]
            if tuning.get("poly") == (8, 8):
                assert "cvl_ex2_fma(" in body and "cvl_ex2(fmaf(ACC" not in body, name
            if tuning.get("stsm") and "__stcs(" in body:  # a staged store (not the log_softmax program's)
                assert "cvl_stsm_x4(st_lane" in body and "= __floats2" not in body, name
            if tuning.get("overlap"):
                assert "float acc_odd[" in body and body.count("cvl_mma(") == 3, name
            r, _ = _compile_sass(k)
            assert r.spill_bytes == 0 and r.stack_bytes == 0, (name, r)


def test_overlap_issues_the_next_tiles_mma_before_this_tiles_epilogue(monkeypatch, tmp_path):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"overlap": True, "tile": (64, 64, 128), "min_blocks": 4})
    (k,) = _render(BENCH)
    body = k.source.split('extern "C"')[1]
    loop = body[body.index("for (int step = 0; step < 64; step += 2)"):]
    # in each half of the loop body: a tile's mma, then the previous tile's statistics or output
    first_mma, first_epilogue = loop.index("cvl_mma("), loop.index("const int n0 = step % 32 * 64;")
    second_mma = loop.index("cvl_mma(", first_mma + 1)
    second_epilogue = loop.index("const int n0 = step % 32 * 64;", first_epilogue + 1)
    assert first_mma < first_epilogue < second_mma < second_epilogue
    assert "float (&acc)[1][8][4] = acc_odd;" in loop and "float (&acc)[1][8][4] = acc_even;" in loop
    assert body.count("__syncthreads()") == 4  # the A band, the first tile, the two tiles of a loop pass
    r, sass = _compile_sass(k)
    assert r.spill_bytes == 0 and r.registers <= 128, r
    if sass is not None:
        from cuvil_dsl.compile import count_instructions

        assert count_instructions(sass, "HMMA") == 3 * 32  # 16 rows x 64 columns x K 64: 32 a tile


def test_stmatrix_staging(monkeypatch, tmp_path):
    """"stsm": one stmatrix.x4 per two n8 tiles of an m16 tile replaces the 4-byte stores; sm_80 keeps them."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"stsm": True})
    (k,) = _render(BENCH)
    body = k.source.split('extern "C"')[1]
    assert "cvl_stsm_x4(st_lane + (mi * 16 * 72 + nj * 16) * 2" in body and "reinterpret_cast<__half2*>" not in body
    r, sass = _compile_sass(k)
    assert r.spill_bytes == 0 and r.registers <= 128, r
    if sass is not None:
        from cuvil_dsl.compile import count_instructions

        assert count_instructions(sass, r"STSM") == 8  # 32 rows x 64 columns: 2 m16 x 4 pairs of n8
        assert count_instructions(sass, r"STS(\.\w+)* ") == 0
    (k80,) = _render(BENCH, "sm_80")
    assert "cvl_stsm_x4" not in k80.source


@pytest.mark.parametrize("tune", [(64, 4, 2), (128, 4, 1)])
def test_wgmma_band_loads_by_tma_and_compiles_without_spills(monkeypatch, tmp_path, tune):
    """ROW_BAND_TUNING "wgmma" (or ROW_BAND_WGMMA): the band on sm_90a wgmma, both operands by TMA
    (batches flattened into one 2-D map each), the same statistics and write passes."""
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"wgmma": tune})
    (k,) = _render(BENCH)
    bn, stages, min_blocks = tune
    maps = {a.name: a.tensor_map for a in k.args if a.kind == "tensormap"}
    assert maps["tma_a"].dims == (64, 32 * 2048) and maps["tma_a"].box == (64, 128)
    assert maps["tma_b"].dims == (64, 32 * 2048) and maps["tma_b"].box == (64, bn)
    body = k.source.split('extern "C"')[1]
    assert f"__launch_bounds__(256, {min_blocks})" in body and k.grid == (32 * 2048 // 128, 1, 1)
    assert "cvl_wgmma(acc_odd" in body and "cvl_wgmma_set(acc_even" in body and "cvl_mma(" not in body
    assert "log2f(total)" in body and "__stcs(reinterpret_cast<uint4*>" in body  # staged 16-byte stores
    assert k.shared_bytes == 128 * 128 + stages * bn * 128 + 8 * 16 * (bn + 8) * 2 + 1024
    u = compile_kernel(k, monkeypatch, tmp_path, fallback="none")
    r = u.resources[k.entry]
    assert u.arch == "sm_90a" and r.spill_bytes == 0 and r.stack_bytes == 0
    assert "serialized" not in u.log  # the next tile's wgmma really overlaps this tile's epilogue


ATTENTION = """pipeline a(q: f16[B, M, D], k: f16[B, N, D]) -> p: f16[B, M, N] {
    kernel s { p = softmax((q @ k.T) * 0.125, axis=-1) }
}"""


def _engine(source: str) -> str:
    if "cvl_cluster_push(part0" in source:
        return "lagged"
    return "cluster" if "cvl_cluster_" in source else "wgmma" if "cvl_wgmma(" in source else "mma"


# (B, M, N), D 64 -> each engine's time in us on the H200, 2026-11-30, fifth session (benchmarks/ab_attention.py
# --sweep, benchmarks/results/2026-11-30-h200-ab_attention-session5-sweep.md; "lagged" needs clusters of 2 or more)
MEASURED = {
    (4, 2048, 2048): {"mma": 37.6, "wgmma": 49.1, "cluster": 26.0, "lagged": 21.9},
    (8, 2048, 2048): {"mma": 50.0, "wgmma": 50.0, "cluster": 45.7, "lagged": 35.9},
    (16, 2048, 2048): {"mma": 84.5, "wgmma": 74.3, "cluster": 86.5, "lagged": 60.5},
    (32, 1024, 1024): {"mma": 46.5, "wgmma": 39.9, "cluster": 43.8, "lagged": 34.3},
    (64, 512, 512): {"mma": 26.5, "wgmma": 24.6, "cluster": 22.5, "lagged": 22.6},
    (128, 256, 256): {"mma": 17.7, "wgmma": 16.0, "cluster": 13.1},
    (32, 2048, 2048): {"mma": 146.5, "wgmma": 139.6, "cluster": 166.6, "lagged": 115.7},
    (4, 256, 256): {"mma": 8.9, "wgmma": 12.8, "cluster": 6.9},
}


@pytest.mark.parametrize("shape", sorted(MEASURED))
def test_band_engines_follow_the_measured_sweep(shape):
    """sm_90 picks the row band's engine by the shape of its grid (cuda_matmul.row_band_engine): one
    within 2% of the fastest measured at each size; sm_80 always has the mma.sync band."""
    plan, _ = plan_pipeline(check_source(ATTENTION, "a.cuvil").module.pipelines[0])
    sizes = dict(zip("BMN", shape), D=64)
    (k,) = render_cuda(plan, sizes, "sm_90")
    times = MEASURED[shape]
    assert times[_engine(k.source)] <= 1.02 * min(times.values())
    (k80,) = render_cuda(plan, sizes, "sm_80")
    assert _engine(k80.source) == "mma" and _is_band(k80.source)


def test_engine_keys_force_an_engine(monkeypatch):
    plan, _ = plan_pipeline(check_source(ATTENTION, "a.cuvil").module.pipelines[0])
    sizes = {"B": 4, "M": 256, "N": 256, "D": 64}
    for tuning, want in [({"mma": True}, "mma"), ({"poly": (1, 1)}, "mma"), ({"wgmma": (64, 4, 2)}, "wgmma"),
                         ({"cluster": (1,)}, "cluster"), ({}, "cluster")]:
        monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", tuning)
        (k,) = render_cuda(plan, sizes, "sm_90")
        assert _engine(k.source) == want, tuning


LOG_SOFTMAX = """pipeline l(q: f16[M, D], k: f16[N, D]) -> p: f16[M, N] {
    kernel s { p = log_softmax(q @ k.T, axis=-1) }
}"""
WIDE = """pipeline w(q: f16[M, D], k: f16[N, D]) -> p: f16[M, N] {
    kernel s { p = softmax(q @ k.T, axis=-1) }
}"""


def test_cluster_band_only_for_a_stored_softmax_of_at_most_2048_columns(monkeypatch):
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster": (1,)})
    plan, _ = plan_pipeline(check_source(LOG_SOFTMAX, "l.cuvil").module.pipelines[0])
    (k,) = render_cuda(plan, {"M": 256, "N": 256, "D": 64}, "sm_90")
    assert _engine(k.source) == "mma"  # log_softmax: the two-pass band
    plan, _ = plan_pipeline(check_source(WIDE, "w.cuvil").module.pipelines[0])
    (k,) = render_cuda(plan, {"M": 256, "N": 2048, "D": 64}, "sm_90")
    assert _engine(k.source) == "cluster" and "__cluster_dims__(8, 1, 1)" in k.source
    (k,) = render_cuda(plan, {"M": 256, "N": 2049, "D": 64}, "sm_90")
    assert _engine(k.source) == "mma"  # 33 column tiles: more than 8 CTAs of 4


ODD_CLUSTER = [(ROOT / "specs" / "masked_attention.yaml", "masked_softmax", 16, 1, 3),  # masks: walked, 3/SM
               (ROOT / "specs" / "attention_scores.yaml", "qk_softmax", 16, 1, 3),  # N 256: one CTA, no cluster
               (None, "scores", 8 * 16, 4, 3)]  # bf16 [8, 1000, 1000], D 40: ragged M, N and K


@pytest.mark.parametrize("path,name,bands,ctas,per_sm", ODD_CLUSTER)
def test_cluster_band_renders_and_builds_without_spills(path, name, bands, ctas, per_sm, tmp_path, monkeypatch):
    """The one-pass band: a cluster of ``ctas`` CTAs a 64-row band (``__cluster_dims__`` only when more
    than one), TMA boxes of 64 rows, the statistics merged through distributed shared memory, staged
    16-byte stores; sm_90a, no spills, within the CTAs a multiprocessor it asks for."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster": (1,)})  # (the odd case would lag)
    if path is None:
        plan, _ = plan_pipeline(check_source(ODD, "odd.cuvil").module.pipelines[0])
        kernels = render_cuda(plan, {"B": 8, "M": 1000, "N": 1000, "D": 40}, "sm_90")
    else:
        kernels = _render(path)
    (k,) = [k for k in kernels if k.name == name]
    body = k.source.split('extern "C"')[1]
    assert _engine(k.source) == "cluster" and k.grid == (bands * ctas, 1, 1) and k.block == (128, 1, 1)
    assert ("__cluster_dims__" in body) == (ctas > 1) and ("cvl_cluster_ld2(" in body) == (ctas > 1)
    assert f"__launch_bounds__(128, {per_sm})" in body and per_sm * k.shared_bytes <= 227 * 1024
    maps = [a.tensor_map for a in k.args if a.kind == "tensormap"]
    assert [m.box for m in maps] == [(64, 64), (64, 64)]
    assert "__stcs(reinterpret_cast<uint4*>" in body and body.count("cvl_wgmma_set(") == 4
    r, _ = _compile_sass(k)
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers <= 65536 // (128 * per_sm), r


def test_cluster_band_of_the_benchmark(monkeypatch, tmp_path):
    """attention_f16 on the cluster band (its size picks the wgmma band; forced here): clusters of 8,
    one exp an element (half the two-pass band's), the next tile's wgmma overlapping this tile's exps."""
    from cuvil_dsl.compile import CompileUnit, compile_units, count_instructions

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster": (1,)})
    (k,) = _render(BENCH)
    body = k.source.split('extern "C"')[1]
    assert "__cluster_dims__(8, 1, 1) __launch_bounds__(128, 4)" in body and k.grid == (32 * 32 * 8, 1, 1)
    assert k.shared_bytes == 8192 + 4 * 8192 + 4 * 16 * 72 * 2 + 1024
    (u,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], "sm_90", fallback="none")
    r = u.resources[k.entry]
    assert u.arch == "sm_90a" and r.spill_bytes == 0 and r.registers <= 128 and "serialized" not in u.log
    _, sass = _compile_sass(k)
    if sass is not None:  # 4 tiles x 64 columns x 2 rows a thread: 128 exps, a few per row besides
        assert 128 <= count_instructions(sass, r"MUFU\.EX2") <= 176
        assert count_instructions(sass, "HGMMA") == 16 and count_instructions(sass, "HMMA") == 0


@pytest.mark.parametrize("sizes,grid,per_sm", [({"B": 32, "M": 2048, "N": 2048}, 49 * 8, 3),
                                               ({"B": 3, "M": 200, "N": 320}, 12 * 2, 2)])
def test_lagged_cluster_band_builds_without_spills(sizes, grid, per_sm, tmp_path, monkeypatch):
    """Clusters of 4 or more take the lagged exchange: persistent clusters (all 49 of 8 that fit at 3 a
    multiprocessor, of which the loader launches those the driver says run at once; every band when
    there are fewer), statistics pushed by st.async onto the
    peers' mbarriers, B tiles through 2 TMA slots and the A band through 2 buffers (PREFETCH: loads a
    band ahead); 3 tiles a CTA when N = 320 (2 CTAs, masked columns past N: the argument is walked, at 2
    CTAs a multiprocessor)."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    plan, _ = plan_pipeline(check_source(ATTENTION, "a.cuvil").module.pipelines[0])
    if sizes["N"] == 320:  # 2 CTAs a cluster: asked for (the default lags from 4)
        monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster": (1, None, 0.9, True)})
    (k,) = render_cuda(plan, {**sizes, "D": 64}, "sm_90")
    body = k.source.split('extern "C"')[1]
    assert _engine(k.source) == "lagged" and k.grid == (grid, 1, 1) and f"__launch_bounds__(128, {per_sm})" in body
    # one cluster barrier, after the set up: never per band, and none before leaving (every push into a
    # CTA has landed once its last write has the last band's statistics)
    assert body.count("cvl_cluster_wait();") == 1
    assert body.index("cvl_cluster_wait();") < body.index("for (; band <")
    tiles = 4 if sizes["N"] == 2048 else 3
    assert k.shared_bytes == 2 * 8192 + 2 * 8192 + 4 * 16 * (tiles * 64 + 8) * 2 + 1024
    assert "cvl_full[4];" in body and "cvl_mbar_wait(full0 + 16 + (round & 1) * 8, (round >> 1) & 1);" in body
    # A_REGS: every wgmma takes A from the warp's fragments, loaded once a band from the A buffer TMA filled
    assert "cvl_wgmma_rs_set(acc_even, afr[0]" in body and "cvl_wgmma_set(" not in body
    assert body.count("cvl_ldsm_x4_at(afr[kk], sa + (round & 1) * 8192u") == 1
    r, _ = _compile_sass(k)
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers <= 65536 // (128 * per_sm), r
    # per_sm CTAs fit a multiprocessor's 228 KB, each with the 1 KB the system reserves
    assert per_sm * (k.shared_bytes + r.shared_bytes + 1024) <= 228 * 1024


@pytest.mark.parametrize("n,ctas,tiles", [(2048, 4, 8), (1800, 4, 8), (4096, 8, 8), (1024, 4, 4)])
def test_lagged_band_of_eight_tiles_a_cta(n, ctas, tiles, tmp_path, monkeypatch):
    """ROW_BAND_TUNING "cluster_tiles" 8 (ab_attention.py, session 36): clusters of 4 CTAs of 8 column tiles, whose
    66 KB of staged rows allow 2 CTAs a multiprocessor, so all 66 clusters of 4 that fit the 132 SMs are rendered;
    each row's factors for 8 tiles in the warp's table (lane j fills tiles j and j + 4). N = 1800: 29 tiles, the
    last CTA's fifth ragged and its last three masked whole. N = 4096 (two-pass bands by default: a cluster of 8
    holds 2048 columns) fits a cluster of 8 such CTAs, one pass. Where 8 tiles a CTA would leave fewer CTAs than the
    lagged band needs (N = 1024: 2), the layout keeps 4 a CTA; the barrier band never takes more than 4."""
    from cuvil_dsl.codegen import cuda_band_cluster

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster_tiles": 8})
    assert cuda_band_cluster.layout(n) == (ctas, tiles)
    plan, _ = plan_pipeline(check_source(ATTENTION, "a.cuvil").module.pipelines[0])
    (k,) = render_cuda(plan, {"B": 32, "M": 2048, "N": n, "D": 64}, "sm_90")
    body = k.source.split('extern "C"')[1]
    assert _engine(k.source) == "lagged"
    if tiles == 4:  # the default kernel, byte for byte
        monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {})
        assert render_cuda(plan, {"B": 32, "M": 2048, "N": n, "D": 64}, "sm_90")[0].source == k.source
        return
    assert k.grid == (132 * 2 // ctas * ctas, 1, 1) and f"__cluster_dims__({ctas}, 1, 1) __launch_bounds__(128, 2)" in body
    assert k.shared_bytes == 2 * 8192 + 2 * 8192 + 4 * 16 * (8 * 64 + 8) * 2 + 1024
    assert "cvl_factor[4][128];" in body and "const unsigned sf_rd = cvl_smem_addr(sf) + pr * 32;" in body
    for t in range(8):
        assert f"cvl_lds32(sf_rd + ((0 + j) * 32 + {t}) * 4)" in body  # row 4j + pr's factor of tile t
        assert f"cvl_stsm_x4(pw_st + {t * 128} + q * 32" in body
    assert body.count("sf[(lane / 4) * 8 + lane % 4 + 4] = ") == 2  # tiles 4-7 (in the loop and after it)
    r, _ = _compile_sass(k)
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers <= 65536 // (128 * 2), r
    assert 2 * (k.shared_bytes + r.shared_bytes + 1024) <= 228 * 1024
    # the barrier band (clusters of 2 or 3 asked for with the cluster barrier) would hold 8 tiles' numerators in
    # registers: refused, with the way out
    monkeypatch.setattr(cuda_matmul, "ROW_BAND_TUNING", {"cluster_tiles": 8, "cluster": (1,)})
    with pytest.raises(ValueError, match="need the lagged band"):
        render_cuda(plan, {"B": 32, "M": 2048, "N": n, "D": 64}, "sm_90")


@pytest.mark.parametrize("text,dtype", [(ATTENTION, "f16"), (ODD, "bf16")])
def test_lagged_band_scales_numerators_as_it_stores(text, dtype, tmp_path, monkeypatch):
    """The lagged band's write: numerators staged by stmatrix, the tile maxima merged over a row's four
    lanes (one base, so one factor per row and tile, in a table), the factor applied in the 16-byte
    store loop (one HMUL2 a pair for f16; in f32 for bf16), the loop cut into one piece after each
    column tile of the next band plus the last band's after the loop."""
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    plan, _ = plan_pipeline(check_source(text, "a.cuvil").module.pipelines[0])
    (k,) = render_cuda(plan, {"B": 32, "M": 2048, "N": 2048, "D": 64}, "sm_90")
    body = k.source.split('extern "C"')[1]
    assert _engine(k.source) == "lagged"
    # each tile's numerators staged right after its statistics, into the columns the last band's piece
    # of the write (that tile's columns) has just freed; the statistics pushed as one float a row
    for t in range(4):
        assert f"cvl_stsm_x4(pw_st + {t * 128} + q * 32" in body
        piece = body.index(f"cvl_lds32(sf_rd + ((0 + j) * 16 + {t}) * 4)")  # the factor of rows 4j + pr, tile t
        assert piece < body.index(f"cvl_stsm_x4(pw_st + {t * 128}")
    assert body.count("cvl_cluster_push(part0") == 1 and "cvl_lg2(row_sum[r])" in body
    assert body.count("__shfl_xor_sync(0xffffffffu, tile_max[r], 1)") == 4  # each tile's maximum
    assert body.count("if (__all_sync(0xffffffffu, fine)) {") == 3  # tiles 1-3 keep the bases when they can
    # v15 (INTERLEAVE): the pieces go out in chunks inside the lazy pass of tiles 1-3 (before its check, so
    # never again in the slow path), stores predicated; v16 (INTERLEAVE0): piece 0's too, in tile 1's pass
    # (its statistics waited for after tile 0, tile 0's numerators staged after tile 1); the last band's
    # write after the loop keeps its guarded stores. Every piece stores from the band's one output pointer
    # at constant offsets (OUT_BASE)
    assert body.count("cvl_stcs128_if(") == 4 and body.count("__stcs(") == 1
    for t in (0, 1, 2, 3):
        chunk = body.index(f"chunk (ni * 2 + h) / 4 of the last band's piece {t}")
        assert body.index("fpart[slot] += p0 + p1;", chunk - 2000) < chunk < body.index("if (__all_sync(", chunk)
        assert f"cvl_stcs128_if(out_prev + (0 + j) * 1024 + {t * 8}, v, round > 0);" in body
    lazy = body.index("pv[1][ni * 2 + h] = __floats2half2_rn(p0, p1);")  # tile 1's lazy pass carries pieces 0, 1
    assert lazy < body.index("last band's piece 0") < body.index("last band's piece 1") < body.index("if (__all_sync(", lazy)
    assert body.index("cvl_stsm_x4(pw_st + 0 + q * 32") > body.index("last band's piece 1")
    scaled = "v.x = cvl_hmul2_bits(v.x, f);" if dtype == "f16" else "w[e] = cvl_pack_bits(__floats2bfloat162_rn("
    assert body.count(scaled) == 4 + 1 and body.count("cvl_mbar_wait(stats0") == 1 + 1
    assert ("__half22float2" in body) == (dtype == "bf16")  # f16: never widened to f32
    r, sass = _compile_sass(k)
    assert r.spill_bytes == 0 and r.registers <= 65536 // (128 * 3), r
    if sass is not None and dtype == "f16":
        from cuvil_dsl.compile import count_instructions

        # 4 tiles x 16 pairs: one HMUL2 each, in the loop and after it; 16 stmatrix of the numerators
        assert count_instructions(sass, r"HMUL2") == 2 * 64 and count_instructions(sass, r"STSM") == 16
        assert count_instructions(sass, r"HADD2\.F32") == 0
        # the write pieces' addresses from per-lane bases (session 6, v13 in benchmarks/NOTES.md): the kernel
        # was 2568 instructions before, 2376 after (-2.2% on the H200); a regression here costs time. The
        # loads a band ahead (session 7, PREFETCH) add a block barrier and thread 0's TMA issues: 2456;
        # the interleaved pieces 2464; from one pointer a band (session 8, OUT_BASE) 2392, piece 0 in tile
        # 1's pass 2376
        assert count_instructions(sass, r".") <= 2420
        # every piece's 16 stores a band through one 64-bit base at immediate offsets (then the last band's 16)
        stores = [line for line in sass.splitlines() if "STG.E.EF.128" in line]
        assert len(stores) == 16 + 16 and len({line.split("[")[1].split(".64")[0] for line in stores[:16]}) == 1


def test_half_scaling_error_bound():
    """The module docstring's bound for an f16 output: the numerator, the factor and their product each
    rounded to f16 (IEEE round to nearest, as HMUL2 and cvt.rn do), against the exact product: within
    3 * 2^-11 relatively, plus 2^-20 absolutely for what falls below f16's normal range (a subnormal
    factor's rounding times a numerator up to 16, with lazy bases)."""
    import numpy as np

    rng = np.random.default_rng(7)
    x = 4.0 - rng.exponential(4.0, 200_000)  # exponents of the numerators: 2^x in (0, 16)
    f = 2.0 ** -rng.uniform(0, 30, x.size) / rng.uniform(1, 2048, x.size)  # 2^(b_t - b) / L
    exact = 2.0 ** x * f
    got = (np.float16(2.0 ** x).astype(np.float32) * np.float16(f).astype(np.float32)).astype(np.float16)
    err = np.abs(got.astype(np.float64) - exact)
    assert np.all(err <= 3 * 2.0 ** -11 * exact + 2.0 ** -20)
    normal = exact > 2.0 ** -14
    assert np.max(err[normal] / exact[normal]) > 2.0 ** -11  # the bound is not vacuous: more than one rounding shows


def test_head_dimension_128_runs_the_lagged_band_in_two_atoms():
    """D 128 (benchmarks/shapes/attention_f16-d128.yaml): the lagged cluster band, each tile's K in two
    64-wide atoms (a TMA box each, the second at column 64), 2 CTAs a multiprocessor asked of ptxas, and
    the persistent grid sized for 2 (33 clusters of 8 on 132 SMs); at D 64 one box a tile, as before."""
    (k,) = _render(ROOT / "benchmarks" / "shapes" / "attention_f16-d128.yaml")
    body = k.source.split('extern "C"')[1]
    assert "__cluster_dims__(8, 1, 1)" in body and "__launch_bounds__(128, 2)" in body
    assert k.grid == (33 * 8, 1, 1) and k.persistent_cluster == 8
    assert re.search(r"cvl_tma_2d\(sb \+ 8192u, tma_b, 64, ", body)  # B's second atom
    assert re.search(r"cvl_tma_2d\([^;]*\+ 8192u, tma_a, 64, ", body)  # A's second atom (64 rows x 128 bytes on)
    assert "(kk >> 2) * 8192 + (kk & 3) * 32" in body  # descriptors step by atom
    (k64,) = _render(BENCH)
    assert ", tma_b, 64, " not in k64.source and "(kk >> 2)" not in k64.source
