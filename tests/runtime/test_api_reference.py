"""The Python API on the reference backend: binding, inference, errors, caching (no GPU needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import cuvil_dsl
from cuvil_dsl.diagnostics import UserError
from cuvil_dsl.frontend import check_file
from cuvil_dsl.reference.executor import HostHooks, execute
from cuvil_dsl.runtime.device import gpu_available
from cuvil_dsl.runtime.reference_executor import ReferenceExecutor

SPECS = Path(__file__).resolve().parents[2] / "specs"


def codes(exc: UserError) -> list[str]:
    return [d.code for d in exc.diagnostics]


def rng_array(shape, dtype, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def test_import_is_cheap_and_load_is_lazy():
    code = ("import sys, cuvil_dsl; assert 'cuvil_dsl.api' not in sys.modules and 'cupy' not in sys.modules; "
            "cuvil_dsl.load; assert 'cuvil_dsl.api' in sys.modules and 'cupy' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_call_matches_the_reference_and_returns_a_tuple_for_several_results():
    compiled = cuvil_dsl.load(SPECS / "multi_result.cuvil").compile(backend="reference")
    x = rng_array((6, 10), np.float32)
    p, lse = compiled(x)
    expected = execute(compiled.pipeline, {"x": x}, {})
    assert np.array_equal(p, expected["p"]) and np.array_equal(lse, expected["lse"])
    assert p.dtype == np.float32 and lse.shape == (6, 1)


def test_single_result_is_returned_bare_and_scalars_bind_by_name_with_defaults():
    compiled = cuvil_dsl.load(SPECS / "log_softmax_f32.cuvil").compile(backend="reference")
    x = rng_array((3, 8), np.float32)
    default = compiled(x)
    assert isinstance(default, np.ndarray)
    np.testing.assert_array_equal(default, execute(compiled.pipeline, {"x": x}, {"temperature": 2.0})["y"])
    hotter = compiled(x=x, temperature=0.5)
    np.testing.assert_array_equal(hotter, execute(compiled.pipeline, {"x": x}, {"temperature": 0.5})["y"])


def test_executors_are_cached_per_shape_signature():
    compiled = cuvil_dsl.load(SPECS / "elementwise_chain.cuvil").compile(backend="reference")
    compiled(rng_array((5,), np.float32))
    compiled(rng_array((5,), np.float32, seed=1))
    compiled(rng_array((7,), np.float32))
    assert sorted(compiled.executors) == [(("N", 5),), (("N", 7),)]


def test_fast_path_reuses_the_binding_but_reads_new_contents():
    compiled = cuvil_dsl.load(SPECS / "elementwise_chain.cuvil").compile(backend="reference")
    x = rng_array((5,), np.float32)
    first = compiled(x)
    call = compiled._last
    x[:] = 0.25
    second = compiled(x)
    assert compiled._last is call  # the same array object: no new binding
    np.testing.assert_array_equal(second, execute(compiled.pipeline, {"x": x}, {})["y"])
    assert not np.array_equal(first, second)
    x.shape = (5, 1)  # the same object, another shape: bound again (and refused)
    with pytest.raises(UserError):
        compiled(x)


def test_lists_are_accepted_but_never_take_the_fast_path():
    compiled = cuvil_dsl.load(SPECS / "elementwise_chain.cuvil").compile(backend="reference")
    values = [0.5, 1.0, 2.0]
    out = compiled(np.asarray(values, np.float32))
    with pytest.raises(UserError, match="float64"):  # a list becomes float64 data: refused for f32
        compiled(values)
    assert out.shape == (3,)
    chain64 = cuvil_dsl.load(SPECS / "f64_chain.cuvil").compile(backend="reference")
    rows = [[0.5, 1.0], [2.0, -1.0]]
    first = chain64(rows)
    rows[0][0] = 4.0  # a list's contents are read again on every call
    assert chain64._last is None and not np.array_equal(chain64(rows), first)


def test_bf16_and_bool_and_int_data():
    bf16 = cuvil_dsl.load(SPECS / "multi_pipeline.cuvil", entry="silu_gate").compile(backend="reference")
    x, gate = rng_array((2, 4), ml_dtypes.bfloat16), rng_array((2, 4), ml_dtypes.bfloat16, 1)
    y = bf16(x, gate)
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(bf16(x.view(np.uint16), gate), y)  # bit patterns bind too
    fill = cuvil_dsl.load(SPECS / "masked_fill.cuvil").compile(backend="reference")
    keep = np.random.default_rng(2).uniform(size=(3, 5)) < 0.5
    y, kept = fill(rng_array((3, 5), np.float16), keep, scale=3)
    assert kept.dtype == np.int32 and np.array_equal(kept[:, 0], keep.sum(axis=1))
    ints = cuvil_dsl.load(SPECS / "int_ops.cuvil").compile(backend="reference")
    c, total, half = ints(np.arange(6, dtype=np.int32), np.ones(6, np.int32), lo=np.int32(-1), hi=3)
    assert total.dtype == np.int32 and half.dtype == np.float32


def test_mismatched_data_is_e506_at_the_parameter():
    compiled = cuvil_dsl.load(SPECS / "attention_scores.cuvil").compile(backend="reference")
    q = rng_array((2, 4, 8), np.float16)
    with pytest.raises(UserError) as info:
        compiled(q, rng_array((2, 5, 9), np.float16))  # D is 8 from q, 9 from k
    assert codes(info.value) == ["E506"] and "symbol `D`" in str(info.value)
    assert info.value.diagnostics[0].span.line == compiled.pipeline.param("k").span.line
    with pytest.raises(UserError) as info:
        compiled(q, rng_array((2, 5, 8), np.float32))
    assert codes(info.value) == ["E506"] and "float32" in str(info.value)
    with pytest.raises(UserError) as info:
        compiled(q, rng_array((5, 8), np.float16))
    assert codes(info.value) == ["E506"]


def test_compiled_shapes_bind_symbols_ahead_of_the_arrays():
    compiled = cuvil_dsl.load(SPECS / "elementwise_chain.cuvil").compile({"N": 4}, backend="reference")
    assert compiled(rng_array((4,), np.float32)).shape == (4,)
    with pytest.raises(UserError) as info:
        compiled(rng_array((5,), np.float32))
    assert codes(info.value) == ["E506"]


def test_scalar_errors():
    compiled = cuvil_dsl.load(SPECS / "int_ops.cuvil").compile(backend="reference")
    a = np.arange(4, dtype=np.int32)
    with pytest.raises(UserError) as info:
        compiled(a, a, lo=0.5)
    assert codes(info.value) == ["E508"]
    with pytest.raises(UserError) as info:
        compiled(a, a, hi=True)
    assert codes(info.value) == ["E508"]


def test_calling_convention_errors_are_type_errors():
    compiled = cuvil_dsl.load(SPECS / "multi_result.cuvil").compile(backend="reference")
    x = rng_array((2, 3), np.float32)
    with pytest.raises(TypeError, match="no parameter `z`"):
        compiled(x, z=1)
    with pytest.raises(TypeError, match="two values"):
        compiled(x, x=x)
    with pytest.raises(TypeError, match="missing"):
        compiled()
    with pytest.raises(TypeError, match="by position"):
        compiled(x, x)


def test_compile_option_errors():
    program = cuvil_dsl.load(SPECS / "multi_result.cuvil")
    with pytest.raises(TypeError, match="unknown target option"):
        program.compile(backend="reference", fastmath=True)
    with pytest.raises(ValueError):
        program.compile(backend="gpu")
    with pytest.raises(ValueError):
        program.compile(backend="reference", device_inputs="share")


@pytest.mark.skipif(gpu_available(), reason="checks the refusal on a machine without a GPU")
def test_cuda_backend_without_a_gpu_is_e601():
    with pytest.raises(UserError) as info:
        cuvil_dsl.load(SPECS / "multi_result.cuvil").compile(backend="cuda")
    assert codes(info.value) == ["E601"]


def test_load_errors():
    with pytest.raises(UserError) as info:
        cuvil_dsl.load(SPECS / "multi_pipeline.cuvil")
    assert codes(info.value) == ["E508"] and "silu_gate" in str(info.value)
    with pytest.raises(UserError) as info:
        cuvil_dsl.load(SPECS / "multi_pipeline.cuvil", entry="nope")
    assert codes(info.value) == ["E508"]
    with pytest.raises(UserError) as info:
        cuvil_dsl.load(SPECS / "errors" / "E201_undefined_name.cuvil")
    assert "E201" in codes(info.value)


def test_host_statements_run_through_the_hooks(tmp_path, capsys):
    source = tmp_path / "checked.cuvil"
    source.write_text("pipeline checked(x: f32[N]) -> y: f32[N] {\n    h = log(x)\n    print(h)\n"
                      "    assert_finite(h)\n    y = h * 2.0\n}\n")
    compiled = cuvil_dsl.load(source).compile(backend="reference")
    compiled(np.ones(3, np.float32))
    assert "h: f32[3] min=0 max=0 mean=0" in capsys.readouterr().err
    with pytest.raises(Exception, match="assert_finite\\(h\\) failed"):
        compiled(np.zeros(3, np.float32))
    compiled.hooks = None  # host statements skipped
    compiled(np.zeros(3, np.float32))


def test_reference_executor_snapshot_and_timing():
    pipeline = check_file(SPECS / "multi_result.cuvil").module.pipelines[0]
    executor = ReferenceExecutor(pipeline, {"R": 2, "C": 3})
    x = rng_array((2, 3), np.float32)
    results = executor.run({"x": x}, {}, HostHooks())
    snap = executor.snapshot()
    assert [b.name for b in snap.buffers] == ["x", "p", "lse"]
    assert [b.role for b in snap.buffers] == ["input", "result", "result"]
    assert executor.check_guards() == [] and snap.backend == "reference"
    assert np.array_equal(executor.arena.view("p"), results["p"])
    timing = executor.time(warmup=1, iterations=4)
    assert timing.iterations == 4 and timing.p50_us > 0
    with pytest.raises(UserError) as info:
        executor.run({"x": x.astype(np.float64)}, {})
    assert codes(info.value) == ["E506"]
