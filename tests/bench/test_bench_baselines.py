"""Matching specs to baselines, choosing families, and the baselines' arithmetic (on the host)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from cuvil_dsl import driver
from cuvil_dsl.bench import impl_cupy, impl_numpy
from cuvil_dsl.bench.baselines import FAMILIES, KINDS, STEMS, check_output, problem_for, select
from cuvil_dsl.check import tolerances
from cuvil_dsl.reference import execute as reference_execute
from cuvil_dsl.reference._special import erf
from cuvil_dsl.types import DType

WITH_KIND = ["elementwise_f32", "softmax_f16", "softmax_f32", "layernorm_f16", "gemm_gelu_f16", "attention_f16",
             "attention_full_f16", "attention_full_f16-causal"]


def open_small(folder, stem):
    return driver.open_spec(folder / f"{stem}.yaml", backend="reference")


def expected_and_tolerances(session, problem):
    expected = reference_execute(session.pipeline, session.inputs, session.binding.params)[problem.result]
    check = session.spec.check
    return expected, tolerances(problem.result_dtype, check.rtol, check.atol)


def test_every_benchmark_stem_names_a_known_kind():
    assert set(STEMS.values()) == set(KINDS)
    for stem in WITH_KIND:
        assert stem in STEMS


def test_select_families():
    names = lambda fams: [f.name for f in fams]  # noqa: E731
    assert names(select("auto", "cuda")) == ["cupy", "torch", "torch_compile", "triton"]
    assert names(select("auto", "cpu")) == names(select("auto", "reference")) == ["numpy"]
    assert names(select("all", "cpu")) == names(FAMILIES)
    assert select("none", "cuda") == []
    assert names(select("triton, torch.compile,triton", "cuda")) == ["triton", "torch_compile"]
    with pytest.raises(ValueError, match="unknown baseline `tensorflow`"):
        select("torch,tensorflow", "cuda")


def test_problem_from_a_spec(small_benchmarks):
    session = open_small(small_benchmarks, "layernorm_f16")
    problem, why = problem_for(session)
    assert why == "" and problem.kind == "layernorm" and problem.result == "y"
    assert problem.result_dtype is DType.F16 and problem.compute_dtype == np.float32 and problem.eps == 1e-5
    assert [a is session.inputs[n] for a, n in zip(problem.inputs, ("x", "w", "b"))] == [True] * 3
    attention, _ = problem_for(open_small(small_benchmarks, "attention_f16"))
    assert attention.scale == 0.125
    causal, why = problem_for(open_small(small_benchmarks, "attention_full_f16-causal"))
    assert why == "" and causal.kind == "attention_causal" and causal.fill == -30000.0 and len(causal.inputs) == 5


def test_the_masked_logits_value_is_folded_from_literals(tmp_path):
    """attention_causal's fill: the where's third operand computed from literals, rounded (saturating, as the
    language's literals are) to its dtype; a fill computed from the inputs leaves no baseline, with the reason."""
    from cuvil_dsl.api import checked_module
    from cuvil_dsl.bench.baselines import constant_value

    def spec(fill: str):
        (tmp_path / "attention_causal.cuvil").write_text(
            "pipeline p(q: f16[M, D], k: f16[N, D], v: f16[N, D], qpos: i32[M, 1], kpos: i32[1, N]) -> o: f16[M, D] {\n"
            f"    o = softmax(where(kpos <= qpos, q @ k.T, {fill})) @ v\n}}\n")
        (tmp_path / "attention_causal.yaml").write_text(
            "pipeline: attention_causal.cuvil\nshapes: {M: 8, N: 8, D: 16}\n")
        return tmp_path / "attention_causal.yaml"

    for fill, want in (("-(100.0 * 3.0) - 1.0", -301.0), ("-1.0e6", -65504.0), ("-0.1", -0.0999755859375)):
        spec(fill)
        (pipeline,) = checked_module(tmp_path / "attention_causal.cuvil")[0].pipelines
        where = next(op for op in pipeline.ops() if op.op == "where")
        assert constant_value(pipeline, where.args[2]) == want, fill
        problem, why = problem_for(driver.open_spec(tmp_path / "attention_causal.yaml", backend="reference"))
        assert why == "" and problem.fill == want
    problem, why = problem_for(driver.open_spec(spec("(q @ k.T) * 0.5"), backend="reference"))
    assert problem is None and "no `where(mask, logits, constant)`" in why


def test_spec_without_a_known_baseline(small_benchmarks):
    problem, why = problem_for(open_small(small_benchmarks, "small_graph"))
    assert problem is None and "no baseline known for `small_graph`" in why


def test_a_variant_of_a_benchmark_keeps_its_baselines(small_benchmarks, tmp_path):
    """`softmax_f16-long.yaml` (the same pipeline at other shapes) is matched as `softmax_f16.yaml` is;
    a stem that only starts like one is not."""
    shutil.copy(small_benchmarks / "softmax_f16.cuvil", tmp_path)
    (tmp_path / "softmax_f16-long.yaml").write_text((small_benchmarks / "softmax_f16.yaml").read_text())
    problem, why = problem_for(driver.open_spec(tmp_path / "softmax_f16-long.yaml", backend="reference"))
    assert problem is not None and problem.kind == "softmax", why
    (tmp_path / "softmax_f16_long.yaml").write_text((small_benchmarks / "softmax_f16.yaml").read_text())
    problem, why = problem_for(driver.open_spec(tmp_path / "softmax_f16_long.yaml", backend="reference"))
    assert problem is None and "no baseline known for `softmax_f16_long`" in why


def test_a_stem_matched_to_a_kind_of_another_arity_is_refused(small_benchmarks, tmp_path):
    shutil.copy(small_benchmarks / "layernorm_f16.cuvil", tmp_path)
    (tmp_path / "softmax_f16.yaml").write_text((small_benchmarks / "layernorm_f16.yaml").read_text())
    problem, why = problem_for(driver.open_spec(tmp_path / "softmax_f16.yaml", backend="reference"))
    assert problem is None and "takes 1 tensor(s)" in why and "takes 3" in why


@pytest.mark.parametrize("stem", WITH_KIND)
def test_numpy_baseline_computes_the_pipeline(small_benchmarks, stem):
    session = open_small(small_benchmarks, stem)
    problem, _ = problem_for(session)
    contender = impl_numpy.build(problem)
    out = contender.fetch(contender.launch())
    expected, (rtol, atol) = expected_and_tolerances(session, problem)
    assert out.dtype == problem.result_dtype.numpy
    assert check_output(problem.result, out, expected, problem.result_dtype, rtol, atol).passed


@pytest.mark.parametrize("stem", WITH_KIND)
def test_cupy_baseline_arithmetic_with_numpy_arrays(small_benchmarks, stem):
    """The CuPy baseline's functions are array-module generic: checked here with NumPy standing in."""
    session = open_small(small_benchmarks, stem)
    problem, _ = problem_for(session)
    fn = impl_cupy.function(np, problem, erf=lambda x: erf(x).astype(x.dtype))
    out = np.asarray(fn(*problem.inputs))
    expected, (rtol, atol) = expected_and_tolerances(session, problem)
    assert check_output(problem.result, out, expected, problem.result_dtype, rtol, atol).passed


def test_check_rejects_a_different_result_and_reads_bf16():
    import ml_dtypes

    ref = np.linspace(-1, 1, 64).reshape(8, 8)
    assert check_output("y", ref.astype(np.float32), ref, DType.F32, 1e-5, 1e-5).passed
    wrong = check_output("y", (ref + 0.01).astype(np.float32), ref, DType.F32, 1e-5, 1e-5)
    assert not wrong.passed and wrong.mismatches == 64
    assert not check_output("y", ref[:4].astype(np.float32), ref, DType.F32, 1e-5, 1e-5).passed  # shape
    assert check_output("y", ref.astype(ml_dtypes.bfloat16), ref, DType.BF16, 8e-3, 8e-3).passed


def test_missing_packages_and_gpu_are_reasons():
    torch_family = next(f for f in FAMILIES if f.name == "torch")
    numpy_family = next(f for f in FAMILIES if f.name == "numpy")
    assert numpy_family.missing() is None
    reason = torch_family.missing(gpu=lambda: False)
    assert reason in ("not installed: torch", "no GPU here")
