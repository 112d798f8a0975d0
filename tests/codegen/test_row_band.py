"""The row-band GEMM + softmax template (cuda_matmul, 16-bit operands, K <= 128): when it is
chosen, what the benchmark kernel compiles to, and the generic template behind ``ROW_BAND``."""

from __future__ import annotations

import re

from pathlib import Path

import pytest
from codegen_cases import ROOT, load_case

from cuvil_dsl.codegen import cuda_matmul, render_cuda
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes import plan_pipeline

BENCH = ROOT / "benchmarks" / "attention_f16.yaml"


def _render(path: Path, arch: str = "sm_90"):
    case = load_case(path)
    return render_cuda(case.plan(arch), case.binding.sizes, arch, tf32=case.tf32)


def _is_band(source: str) -> bool:
    return "the A band" in source and "__shared__ float warp_max" not in source


def test_attention_benchmark_takes_the_row_band():
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
    from cuvil_dsl.compile import CompileUnit, SassUnavailable, compile_units, count_instructions, disassemble

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
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
