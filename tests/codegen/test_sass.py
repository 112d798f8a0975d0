"""What the generated kernels really run, from their SASS (cuobjdump, no GPU needed)."""

from __future__ import annotations

import pytest

from cuvil_dsl.compile import SassUnavailable, count_instructions, disassemble, find_cuobjdump

pytestmark = pytest.mark.skipif(find_cuobjdump() is None, reason="cuobjdump is not installed")


def sass_of(built, arch: str, case: str, kernel: str) -> str:
    b = built(arch)[(case, kernel)]
    try:
        return disassemble(b.unit.cubin)
    except SassUnavailable as exc:  # a broken tool is not a failure of the generated code
        pytest.skip(str(exc))


def barriers(sass: str) -> int:
    return count_instructions(sass, r"BAR\.SYNC")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("case,kernel", [
    ("specs/gemm_bias_gelu", "gemm_epilogue"),
    ("programs/gemm_bf16", "main_k1"),
    ("specs/attention_scores", "qk_softmax"),
    ("programs/gemm_f32_tf32", "main_k1"),
])
def test_half_and_tf32_matmuls_run_on_tensor_cores(built, arch, case, kernel):
    sass = sass_of(built, arch, case, kernel)
    if arch == "sm_90" and ((case, kernel) in WGMMA_GEMMS or case == "specs/attention_scores"):
        # plain GEMMs on wgmma; attention_scores' small grid takes the one-pass cluster band (wgmma too)
        assert count_instructions(sass, "HGMMA") > 0 and count_instructions(sass, "HMMA") == 0
        return
    assert count_instructions(sass, "HMMA") > 0
    if "tf32" not in case:
        assert count_instructions(sass, "LDSM") > 0  # fragments by ldmatrix


# plain f16/bf16 GEMMs (batched, ragged M and N, epilogues) that run wgmma on sm_90: built for sm_90a
WGMMA_GEMMS = [
    ("programs/gemm_bf16", "main_k1"),  # silu epilogue, M = 200, N = 136
    ("programs/gemm_f16_layouts", "main_k2"),  # batched (G = 3), M = 130, N = 96, * 0.5
    ("specs/multi_pipeline", "ffn_k1"),
    ("programs/gemm_wgmma", "main_k1"),  # 128 x 128, 4 stages; gelu(a @ b + bias), K = 520
    ("programs/gemm_wgmma", "main_k2"),  # 256 x 128 (LARGE_TILE), batched, B stored N x K, K = 72
    ("programs/gemm_wgmma", "main_k3"),  # 128 x 128, 3 stages
]


@pytest.mark.parametrize("case,kernel", WGMMA_GEMMS)
def test_hopper_plain_gemms_run_wgmma(built, case, kernel):
    b = built("sm_90")[(case, kernel)]
    assert b.unit.arch == "sm_90a" and "-arch=sm_90a" in b.kernel.options
    # two consumer warpgroups (LARGE_TILE 128 x 256, and the 128 x 128 tiles of smaller launches)
    assert "wgmma.mma_async" in b.kernel.source and b.kernel.block == (256, 1, 1)
    sass = sass_of(built, "sm_90", case, kernel)
    # 16-bit results, N even: one 32-bit store per pair of columns (cuda_wgmma.PAIRED_STORES), or where one
    # output's N and strides are multiples of 8, the tile staged in shared memory and stored in 16-byte
    # chunks only (cuda_wgmma.STAGED_STORES)
    assert count_instructions(sass, r"STG\.E\.U16") == 0
    if "cvl_stage[" in b.kernel.source:
        assert count_instructions(sass, r"STG\.E\.128") > 0 and count_instructions(sass, r"STG\.E(\s|$)") == 0
    else:
        assert count_instructions(sass, r"STG\.E(\s|$)") > 0
    assert count_instructions(sass, "HGMMA") > 0
    assert count_instructions(sass, "HMMA") == 0 and count_instructions(sass, "LDSM") == 0
    if any(a.kind == "tensormap" for a in b.kernel.args):  # tiles by TMA (cuda_wgmma.TMA), no cp.async
        assert count_instructions(sass, "UTMALDG") > 0 and count_instructions(sass, "LDGSTS") == 0
    else:
        assert count_instructions(sass, "LDGSTS") > 0
    r = b.unit.resources[b.kernel.entry]
    assert r.spill_bytes == 0 and r.stack_bytes == 0, r
    # the same kernels stay on mma.sync for sm_80, built for sm_80
    old = built("sm_80")[(case, kernel)]
    assert old.unit.arch == "sm_80" and "wgmma.mma_async" not in old.kernel.source
    assert count_instructions(sass_of(built, "sm_80", case, kernel), "HMMA") > 0


def test_overridden_gemm_tile_stays_on_mma_sync(built):
    b = built("sm_90")[("specs/gemm_bias_gelu", "gemm_epilogue")]  # the spec sets tile and block
    assert b.unit.arch == "sm_90" and "wgmma.mma_async" not in b.kernel.source


@pytest.mark.parametrize("case,kernel,fma", [
    ("specs/batched_matmul_broadcast", "main_k1", "FFMA"),
    ("programs/gemm_f64", "main_k1", "DFMA"),
])
def test_full_precision_matmuls_do_not_use_tensor_cores(built, case, kernel, fma):
    sass = sass_of(built, "sm_90", case, kernel)
    assert count_instructions(sass, "HMMA") == 0
    assert count_instructions(sass, fma) >= 4 * 4 * 8  # a 4x4 block of products per k, unrolled


def test_aligned_operands_are_copied_by_cp_async(built):
    assert count_instructions(sass_of(built, "sm_90", "specs/gemm_bias_gelu", "gemm_epilogue"), "LDGSTS") > 0
    # K = 45 halves is not 16-byte aligned: element copies instead
    assert count_instructions(sass_of(built, "sm_90", "programs/gemm_f16_ragged", "main_k1"), "LDGSTS") == 0


@pytest.mark.parametrize("case,kernel,expected", [
    ("specs/elementwise_chain", "main_k1", 0),  # elementwise: no barrier
    ("specs/softmax", "row_softmax", 0),  # rows of 1024: one warp per row, shuffles only
    ("specs/rmsnorm", "main_k1", 1),  # rows of 2048: a block per row, one phase
    ("programs/norm_wide", "main_k1", 2),  # two phases (rmsnorm's and layernorm's statistics)
    ("programs/softmax_very_long", "main_k1", 2),  # max, then sum
    ("specs/reductions", "main_k2", 1),  # strided (column) reduction: one shared-memory combine
    ("specs/batched_matmul_broadcast", "main_k1", 2),  # SIMT GEMM: first tile, then one per k step
])
def test_barrier_counts_match_the_templates(built, case, kernel, expected):
    sass = sass_of(built, "sm_90", case, kernel)
    assert barriers(sass) == expected
    source = built("sm_90")[(case, kernel)].kernel.source
    assert source.split('extern "C"')[1].count("__syncthreads()") == expected


@pytest.mark.parametrize("case,kernel,expected", [
    ("specs/gemm_bias_gelu", "gemm_epilogue", 1),  # one per k step
    ("specs/attention_scores", "qk_softmax", 2),  # row band: one per column tile, one before the A fragments
])
def test_tensor_core_pipeline_has_one_barrier_per_step(built, case, kernel, expected):
    source = built("sm_90")[(case, kernel)].kernel.source
    assert source.split('extern "C"')[1].count("__syncthreads()") == expected
    # the compiler may rotate the step loop, duplicating its barrier
    assert expected <= barriers(sass_of(built, "sm_90", case, kernel)) <= 2 * expected


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_f32_elementwise_uses_16_byte_accesses(built, arch):
    sass = sass_of(built, arch, "specs/elementwise_chain", "main_k1")
    assert count_instructions(sass, r"LDG\.E\.128") > 0
    assert count_instructions(sass, r"STG\.E\.128") > 0


def test_half_row_kernels_load_rows_with_16_byte_vectors(built):
    for case, kernel in (("specs/softmax", "row_softmax"), ("specs/layernorm", "norm")):
        sass = sass_of(built, "sm_90", case, kernel)
        assert count_instructions(sass, r"LDG\.E\.128") > 0 and count_instructions(sass, r"STG\.E\.128") > 0
