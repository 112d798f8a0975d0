"""benchmarks/pdl_filler.py without a GPU: its edit of the attention band kernel still applies to today's
render (a trigger at the start, the band walk's bounds) and compiles without changing the kernel's
resources, its launch attribute has cuda.h's layout, and the script exits 2 without a GPU."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import pytest
from bench_support import ROOT, build_for_sm_90, exits_2_without_gpu, load_script

from cuvil_dsl.codegen import render_cuda
from cuvil_dsl.frontend import check_file
from cuvil_dsl.passes import plan_pipeline
from cuvil_dsl.spec.binding import bind, select_pipeline
from cuvil_dsl.spec.loader import load_spec


def attention_kernel():
    loaded = load_spec(ROOT / "benchmarks" / "attention_f16.yaml")
    pipeline = select_pipeline(loaded, check_file(loaded.pipeline_path).module)
    plan, _ = plan_pipeline(pipeline, dict(loaded.spec.kernels), "sm_90")
    (kernel,) = render_cuda(plan, bind(loaded, pipeline).sizes, "sm_90", tf32=loaded.spec.target.tf32)
    return kernel


def test_the_probes_edit_applies_to_the_band_kernel_and_keeps_its_resources(tmp_path):
    s = load_script("pdl_filler")
    kernel = attention_kernel()
    edited = s.patch(990)(kernel.source)
    assert edited.count(s.TRIGGER) == 1 and "< 1024" not in edited and edited.count("< 990") == 5
    assert s.patch(None)(kernel.source).count("< 1024") == 5  # the whole walk, with the trigger
    before = build_for_sm_90(kernel.source, (kernel.entry,), tmp_path / "before", kernel.options)
    after = build_for_sm_90(edited, (kernel.entry,), tmp_path / "after", kernel.options)
    r0, r1 = before.resources[kernel.entry], after.resources[kernel.entry]
    assert r1.spill_bytes == 0 and abs(r1.registers - r0.registers) <= 8 and r1.shared_bytes == r0.shared_bytes
    with pytest.raises(AssertionError):  # a kernel whose walk moved is refused, not silently left whole
        s.patch(990)(kernel.source.replace("< 1024", "< 2048"))


def test_the_real_fillers_edit_moves_each_engines_band_index(tmp_path):
    """The two-pass engines the probe uses as fillers take their band from blockIdx.x in exactly two places;
    the edit offsets both, and the kernel still compiles with at most 8 more bytes of spills."""
    from cuvil_dsl.codegen import cuda_matmul

    s = load_script("pdl_filler")
    for label, tuning in s.ENGINES.items():
        cuda_matmul.ROW_BAND_TUNING.update(tuning)
        try:
            kernel = attention_kernel()
        finally:
            cuda_matmul.ROW_BAND_TUNING.clear()
        assert kernel.grid[0] == 512, label  # 128 rows a CTA: the tail of 34 64-row bands is 512 - 495 CTAs
        edited = s.offset_patch(s.TAIL_FROM)(kernel.source)
        assert edited.count(f"((int)blockIdx.x + {s.TAIL_FROM})") == 2 and "= blockIdx.x" not in edited, label
        before = build_for_sm_90(kernel.source, (kernel.entry,), tmp_path / f"b{len(label)}", kernel.options)
        after = build_for_sm_90(edited, (kernel.entry,), tmp_path / f"a{len(label)}", kernel.options)
        # the offset costs the mma.sync band, at its 128-register bound, one spilled word pair (8 bytes, as on
        # the H200); more would make the probe's filler a different kernel from the engine it stands for
        assert after.resources[kernel.entry].spill_bytes <= before.resources[kernel.entry].spill_bytes + 8, label


def test_the_launch_attribute_has_cuda_h_layout():
    from cuvil_dsl.compile.nvrtc import header_dir

    include = header_dir()
    if include is None or not (Path(include) / "cuda.h").is_file():
        pytest.skip("cuda.h is not installed (nvidia-cuda-runtime wheel)")
    text = (Path(include) / "cuda.h").read_text()
    s = load_script("pdl_filler")
    value = re.search(r"CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION\s*=\s*(\d+)", text)
    assert value and int(value.group(1)) == s.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert "char pad[8 - sizeof(CUlaunchAttributeID)];" in text and "char pad[64];" in text
    attr = s.LaunchAttribute(6, b"", 1)
    assert ctypes.sizeof(attr) == 8 + 64 and bytes(attr)[8:12] == (1).to_bytes(4, "little")


def test_exits_2_without_a_gpu(capsys):
    exits_2_without_gpu(load_script("pdl_filler"), "pdl_filler", capsys)
