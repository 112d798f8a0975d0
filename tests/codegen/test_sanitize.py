"""User names never reach C source as identifiers: keywords, builtins and reserved names work."""

from __future__ import annotations

import re

from cuvil_dsl.codegen import render_cuda
from cuvil_dsl.codegen.names import comment_text, entry_name
from cuvil_dsl.compile import CompileUnit, compile_units
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes import plan_pipeline

HOSTILE = """pipeline main(int: f32[N, N], __half: f16[N], float4: f32[N, N]) -> (threadIdx: f32[N, N], b0: f16[N, N]) {
    graph main {
        kernel __syncthreads {
            blockIdx = int @ float4
            threadIdx = softmax(blockIdx * 2)
        }
        u0 = cast(threadIdx, f16) + __half
        b0 = u0 * 2
    }
}
"""


def test_hostile_names_render_and_compile():
    checked = check_source(HOSTILE, "hostile.cuvil")
    assert checked.ok, [str(d) for d in checked.diagnostics]
    plan, diags = plan_pipeline(checked.module.pipelines[0])
    assert not diags
    kernels = render_cuda(plan, {"N": 64}, "sm_90")
    assert [k.entry for k in kernels] == ["cvl_syncthreads", "cvl_main_k1"]
    units = compile_units([CompileUnit(k.entry, k.source, (k.entry,)) for k in kernels], "sm_90")
    assert all(u.cubin for u in units)
    for k in kernels:
        signature = k.source.split('extern "C"')[1].split(") {")[0]
        params = re.findall(r"(\w+),?\s+//", signature)
        assert params and all(re.fullmatch(r"[bu]\d+", p) for p in params), params
        assert "// int: f32[N, N] input" in k.source or "// threadIdx: f32[N, N] input" in k.source


def test_entry_names_are_never_reserved():
    assert entry_name("__half") == "cvl_half"
    assert entry_name("int") == "cvl_int"
    assert entry_name("forward_k1") == "cvl_forward_k1"
    assert entry_name("a__b") == "cvl_a_b"
    assert "__" not in entry_name("x___y__")


def test_comment_text_cannot_close_or_break_a_comment():
    assert "\n" not in comment_text("a\nb") and "*/" not in comment_text("*/") and "\\" not in comment_text("a\\")
