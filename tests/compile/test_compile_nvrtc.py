"""NVRTC driver, ptxas report parser, SASS inspection, arch checks and E602 messages (CPU only)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuvil_dsl.compile import (
    RESULT_CODES,
    CompileUnit,
    KernelResources,
    capture,
    compile_units,
    count_instructions,
    disassemble,
    emit_ptx,
    find_cuobjdump,
    parse_report,
    result_info,
)
from cuvil_dsl.compile import nvcc as nvcc_mod
from cuvil_dsl.compile import nvrtc as nvrtc_mod
from cuvil_dsl.compile.failures import numbered_source
from cuvil_dsl.compile.ptxas import clean_log, error_source_lines, resource_errors
from cuvil_dsl.compile.sass import instructions
from cuvil_dsl.diagnostics import InternalError, UserError

pytestmark = pytest.mark.nvrtc

ELEMENTWISE = r"""
extern "C" __global__ void axpy(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(a * x[i] + y[i], 0.0f);
}
"""

# Exactly three __syncthreads, no loops around them: SASS must show exactly three BAR.SYNC.
BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  s[t] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (t < 128) s[t] += s[t + 128];
  __syncthreads();
  if (t < 64) s[t] += s[t + 64];
  __syncthreads();
  if (t < 32) {
    float v = s[t] + s[t + 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (t == 0) out[blockIdx.x] = v;
  }
}
"""

HALF = r"""
#include <cuda_fp16.h>
extern "C" __global__ void half_scale(const __half* __restrict__ x, __half* __restrict__ y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half(__half2float(x[i]) * s);
}
"""

TOO_MUCH_SHARED = """extern "C" __global__ void big(float* y) {
  __shared__ float s[100000];  // 400 KB: more than any GPU has
  s[threadIdx.x] = 1;
  __syncthreads();
  y[threadIdx.x] = s[threadIdx.x + 1];
}
"""

BROKEN = """extern "C" __global__ void broken(float* y) {
  int i = threadIdx.x;
  y[i] = undefined_name + 1.0f;
}
"""



needs_cuobjdump = pytest.mark.skipif(find_cuobjdump() is None, reason="cuobjdump wheel not installed")


@needs_cuobjdump
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cubin_is_elf_and_sass_counts_barriers(cache_dir, arch):
    [result] = compile_units([CompileUnit("reduce_unit", BLOCK_SUM, ("block_sum",))], arch)
    assert result.cubin[:4] == b"\x7fELF"
    assert result.compiler == "nvrtc" and result.arch == arch
    res = result.resources["block_sum"]
    assert res.registers > 0
    assert res.spill_bytes == 0 and res.stack_bytes == 0
    assert res.barriers == 1
    assert res.shared_bytes == 1024
    assert f"Compiling entry function 'block_sum' for '{arch}'" in result.log
    sass = disassemble(result.cubin)
    assert count_instructions(sass, r"BAR\.SYNC") == 3
    assert count_instructions(sass, r"SHFL") >= 1
    assert not count_instructions(sass, r"HGMMA|HMMA")
    assert instructions(sass)[-1] in {"BRA", "EXIT", "NOP"}


def test_multi_kernel_unit_and_fp16_header(cache_dir):
    [result] = compile_units([CompileUnit("mixed", ELEMENTWISE + HALF, ("axpy", "half_scale"))], "sm_90")
    assert set(result.resources) == {"axpy", "half_scale"}
    assert result.resources["axpy"].barriers == 0
    assert result.resources["axpy"].shared_bytes == 0
    assert all(r.registers > 0 and r.spill_bytes == 0 for r in result.resources.values())


def test_sm_90a_is_accepted(cache_dir):
    [result] = compile_units([CompileUnit("ew90a", ELEMENTWISE, ("axpy",))], "sm_90a")
    assert "for 'sm_90a'" in result.log


@pytest.mark.parametrize("arch", ["sm_70", "sm_xx", "90", "compute_90"])
def test_unsupported_arch_is_e504(cache_dir, arch):
    with pytest.raises(UserError) as info:
        compile_units([CompileUnit("ew", ELEMENTWISE, ("axpy",))], arch)
    [diag] = info.value.diagnostics
    assert diag.code == "E504"
    assert "sm_90" in (diag.hint or "")


def test_source_error_is_e602_with_numbered_source_and_saved_file(cache_dir, monkeypatch):
    def no_nvcc(*args, **kwargs):
        raise AssertionError("a source error must never fall back to nvcc")

    monkeypatch.setattr(nvcc_mod, "compile_cubin", no_nvcc)
    with capture() as records, pytest.raises(UserError) as info:
        compile_units([CompileUnit("broken_unit", BROKEN, ("broken",))], "sm_90", options=("-DFOO=1",))
    [diag] = info.value.diagnostics
    assert diag.code == "E602"
    text = diag.message
    assert "cannot compile unit 'broken_unit'" in text
    assert "NVRTC_ERROR_COMPILATION (6)" in text
    assert 'identifier "undefined_name" is undefined' in text
    assert "-arch=sm_90" in text and "-DFOO=1" in text and "-Xptxas=-v" in text
    assert ">3 | " in text and " 1 | " in text  # numbered source, the error line flagged
    saved = Path(re.search(r"saved to (\S+\.cu);", text).group(1))
    assert saved.parent == cache_dir / "failed"
    assert saved.read_text() == BROKEN
    assert saved.with_suffix(".log").read_text().count("undefined_name") >= 1
    assert diag.span.file == str(saved) and diag.span.line == 3
    [record] = records
    assert record["error"] == "E602" and record["fallback"] is None
    assert record["nvrtc_result"]["name"] == "NVRTC_ERROR_COMPILATION"


def test_invalid_option_is_a_source_error(cache_dir):
    with pytest.raises(UserError) as info:
        compile_units([CompileUnit("ew", ELEMENTWISE, ("axpy",), ("--no-such-option",))], "sm_90", fallback="none")
    assert "NVRTC_ERROR_INVALID_OPTION (5)" in info.value.diagnostics[0].message


def test_too_much_shared_memory_is_a_resource_failure(cache_dir):
    source = TOO_MUCH_SHARED
    with pytest.raises(nvrtc_mod.NvrtcFailure) as info:
        nvrtc_mod.compile_cubin(source, "big.cu", ("-arch=sm_90", "-Xptxas=-v"))
    failure = info.value
    assert failure.info.code == 6 and failure.kind == "resource" and not failure.nvrtc_unhealthy
    assert "too much shared data" in failure.ptxas_resource_errors[0]
    with pytest.raises(UserError) as err:
        compile_units([CompileUnit("big_unit", source, ("big",))], "sm_90", fallback="none")
    assert "too much shared data" in err.value.diagnostics[0].message


def test_several_failures_are_reported_together(cache_dir):
    units = [CompileUnit(f"bad{i}", BROKEN, ("broken",)) for i in range(2)]
    units.append(CompileUnit("ok", ELEMENTWISE, ("axpy",)))
    with pytest.raises(UserError) as info:
        compile_units(units, "sm_90", workers=2, fallback="none")
    assert [d.code for d in info.value.diagnostics] == ["E602", "E602"]


def test_declared_kernel_missing_from_cubin_is_internal_error(cache_dir):
    with pytest.raises(InternalError, match="no_such_kernel"):
        compile_units([CompileUnit("ew", ELEMENTWISE, ("axpy", "no_such_kernel"))], "sm_90")


def test_emit_ptx_is_text_for_the_virtual_arch(cache_dir):
    ptx = emit_ptx(CompileUnit("ew", ELEMENTWISE, ("axpy",)), "sm_90")
    assert ".target sm_90" in ptx and ".entry axpy" in ptx and "\x00" not in ptx
    with pytest.raises(UserError) as info:
        emit_ptx(CompileUnit("bad", BROKEN, ("broken",)), "sm_90")
    assert info.value.diagnostics[0].code == "E602"


def test_result_code_table_is_complete():
    assert sorted(RESULT_CODES) == list(range(19))
    assert len({info.name for info in RESULT_CODES.values()}) == 19
    resource = {c for c, info in RESULT_CODES.items() if info.kind == "resource"}
    assert {1, 2, 7, 11} <= resource
    assert RESULT_CODES[5].kind == "source" and RESULT_CODES[6].kind == "source"
    assert all(info.meaning and info.action for info in RESULT_CODES.values())
    unknown = result_info(42)
    assert unknown.name == "NVRTC_ERROR_UNKNOWN_42" and unknown.kind == "resource"


NVRTC_SM80_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'row_softmax' for 'sm_80'
ptxas info    : Function properties for row_softmax
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 13 registers, used 1 barriers, 1024 bytes smem, 372 bytes cmem[0]
ptxas info    : Compile time = 4.490 ms
"""

NVCC_SM90_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperf
    24 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'spill_me' for 'sm_90'
ptxas info    : Function properties for spill_me
    2136 bytes stack frame, 4060 bytes spill stores, 5180 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 2136 bytes cumulative stack size
ptxas info    : Compiling entry function 'plain' for 'sm_90'
ptxas info    : Function properties for plain
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""


def test_parse_report_from_literal_logs():
    softmax = parse_report(NVRTC_SM80_LOG)["row_softmax"]
    assert softmax == KernelResources("row_softmax", 13, 0, 0, 0, 1024, 1)
    report = parse_report(NVCC_SM90_LOG)
    assert list(report) == ["spill_me", "plain"]
    spill = report["spill_me"]
    assert (spill.registers, spill.stack_bytes) == (32, 2136)
    assert (spill.spill_store_bytes, spill.spill_load_bytes) == (4060, 5180)
    assert spill.spill_bytes == 9240
    assert report["plain"] == KernelResources("plain", 8)
    assert parse_report("") == {}


def test_log_helpers():
    assert clean_log("a\n\x00ptxas error   : x\n\x00") == "a\nptxas error   : x\n"
    assert clean_log("\x00") == ""
    log = "u.cu(3): error: bad\nu.cu(7): catastrophic error: worse\nother.cu(9): error: no\n"
    assert error_source_lines(log, "u.cu") == [3, 7]
    assert resource_errors("ptxas error   : Entry function 'k' uses too much local data (0x1 bytes, 0x0 max)")


def test_numbered_source_shows_windows_for_long_sources():
    source = "\n".join(f"line{i}" for i in range(1, 301))
    text = numbered_source(source, [150])
    assert ">150 | line150" in text and "line142" in text and "line158" in text
    assert "line1\n" not in text and "more lines in the saved file" in text
    short = numbered_source("a\nb", [])
    assert short.splitlines() == [" 1 | a", " 2 | b"]


def test_count_instructions_on_literal_sass():
    sass = """
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;  /* 0x0000000000007b1d */
        /*0080*/              @!P0 BAR.SYNC.DEFER_BLOCKING 0x0 ;  /* 0x0000000000007b1d */
        /*0090*/                   HGMMA.64x128x16.F32 gdesc[UR4], RZ, !UPT ;
        /*00a0*/                   EXIT ;
"""
    assert count_instructions(sass, r"BAR\.SYNC") == 2
    assert count_instructions(sass, "HGMMA") == 1
    assert instructions(sass) == ["BAR.SYNC.DEFER_BLOCKING", "BAR.SYNC.DEFER_BLOCKING", "HGMMA.64x128x16.F32", "EXIT"]


def test_unit_validation():
    with pytest.raises(ValueError):
        CompileUnit("bad name", ELEMENTWISE, ("axpy",))
    with pytest.raises(ValueError):
        CompileUnit("ok", ELEMENTWISE, ())
    with pytest.raises(ValueError):
        CompileUnit("ok", ELEMENTWISE, ("a-b",))
