"""Every spec and test program renders and compiles to CUBIN for sm_80 and sm_90 with no
register spills at default settings, and every barrier stands in block-uniform code."""

from __future__ import annotations

import pytest
from codegen_cases import ARCHS, case_id, case_paths, load_case

from cuvil_dsl.codegen import check_barriers_uniform, render_cuda

CASES = [case_id(p) for p in case_paths()]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles_without_spills(built, arch):
    kernels = built(arch)
    assert {case for case, _name in kernels} == set(CASES)
    problems = []
    for (case, name), b in sorted(kernels.items()):
        r = b.unit.resources[b.kernel.entry]
        if r.spill_bytes or r.stack_bytes or r.registers > 255:
            problems.append(f"{case} {name}: {r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("arch", ARCHS)
def test_every_barrier_is_block_uniform(built, arch):
    problems = {key: check_barriers_uniform(b.kernel.source) for key, b in built(arch).items()}
    assert not {k: v for k, v in problems.items() if v}


@pytest.mark.parametrize("arch", ARCHS)
def test_launch_shapes_fit_the_hardware(built, arch):
    for (case, name), b in built(arch).items():
        k = b.kernel
        threads = k.block[0] * k.block[1] * k.block[2]
        assert 32 <= threads <= 1024 and threads % 32 == 0, (case, name, k.block)
        assert 1 <= k.grid[0] < 2**31 and k.grid[1] < 65536 and k.grid[2] < 65536, (case, name, k.grid)
        assert k.shared_bytes <= 227 * 1024


def test_kernel_arguments_are_buffers_then_uniforms():
    case = load_case(next(p for p in case_paths() if p.stem == "attention_scores"))
    (k,) = render_cuda(case.plan("sm_80"), case.binding.sizes, "sm_80")
    assert [a.kind for a in k.args] == ["buffer", "buffer", "buffer", "scalar"]
    assert [a.ctype for a in k.args] == ["const __half* __restrict__", "const __half* __restrict__",
                                         "__half* __restrict__", "float"]
    # on sm_90 the band loads its operands by TMA: one descriptor each, after the uniforms
    (k90,) = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
    assert [a.kind for a in k90.args] == ["buffer", "buffer", "buffer", "scalar", "tensormap", "tensormap"]
    assert k.entry == "cvl_qk_softmax" and k.graph == "forward"


def test_f16_uniforms_are_passed_as_float_and_bools_as_int():
    from cuvil_dsl.frontend import check_source
    from cuvil_dsl.passes import plan_pipeline

    text = """pipeline f(x: f16[N], flag: bool, n: i32, d: f64) -> (y: f16[N], z: i32[N], w: f64[N]) {
        y = where(flag, x * 2.5, x)
        z = cast(x, i32) + n
        w = cast(x, f64) * d
    }"""
    plan, _ = plan_pipeline(check_source(text, "u.cuvil").module.pipelines[0])
    scalars = [a for k in render_cuda(plan, {"N": 100}, "sm_90") for a in k.args if a.kind == "scalar"]
    assert {(a.dtype.value, a.ctype) for a in scalars} == {("f16", "float"), ("bool", "int"), ("i32", "int"),
                                                         ("f64", "double")}


def test_large_sizes_switch_to_64_bit_indices():
    from cuvil_dsl.frontend import check_source
    from cuvil_dsl.passes import plan_pipeline

    text = "pipeline f(x: f16[N]) -> y: f16[N] { y = x * 2 }"
    plan, _ = plan_pipeline(check_source(text, "big.cuvil").module.pipelines[0])
    (small,) = render_cuda(plan, {"N": 1 << 20}, "sm_90")
    (big,) = render_cuda(plan, {"N": 3 << 30}, "sm_90")
    assert "long long" not in small.source.split("extern \"C\"")[1]
    assert "long long v" in big.source
