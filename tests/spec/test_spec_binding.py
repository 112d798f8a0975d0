"""Binding a spec to a checked pipeline: names, sizes, files' headers, scalars, limits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl.diagnostics import Diagnostic, Span, UserError
from cuvil_dsl.ir.nodes import Constraint, Module, Param, Pipeline, Result
from cuvil_dsl.spec import FileSource, GeneratedSource, bind, check_kernel_names, load_spec, select_pipeline
from cuvil_dsl.types import DType, ScalarType, Sym, TensorType

CUVIL = "p.cuvil"


def span(line: int = 1) -> Span:
    return Span(CUVIL, line, 1, line, 2)


def tensor(name: str, dtype: str, *dims: int | str, line: int = 1) -> Param:
    shape = tuple(Sym(d) if isinstance(d, str) else d for d in dims)
    return Param(name, TensorType(DType(dtype), shape), DType(dtype), span(line))


def scalar(name: str, dtype: str, default: float | int | bool | None = None) -> Param:
    return Param(name, ScalarType(DType(dtype).kind), DType(dtype), span(), default)


def result(name: str, dtype: str, *dims: int | str) -> Result:
    shape = tuple(Sym(d) if isinstance(d, str) else d for d in dims)
    return Result(name, TensorType(DType(dtype), shape), span())


def pipeline(*params: Param, results: tuple[Result, ...] = (), constraints: tuple[Constraint, ...] = ()) -> Pipeline:
    return Pipeline("f", params, results, (), span(), constraints)


# attention_scores(q: f16[B, M, D], k: f16[B, N, D], scale: f32 = 0.125) -> p: f16[B, M, N]
ATTENTION = pipeline(
    tensor("q", "f16", "B", "M", "D"),
    tensor("k", "f16", "B", "N", "D"),
    scalar("scale", "f32", 0.125),
    results=(result("p", "f16", "B", "M", "N"),),
)


def load(folder: Path, text: str):
    (folder / CUVIL).write_text("")
    (folder / "s.yaml").write_text(text)
    return load_spec(folder / "s.yaml")


def problems(folder: Path, text: str, pipe: Pipeline, **kwargs) -> list[Diagnostic]:
    loaded = load(folder, text)
    with pytest.raises(UserError) as caught:
        bind(loaded, pipe, **kwargs)
    return list(caught.value.diagnostics)


def at(diag: Diagnostic) -> tuple[str, int, int]:
    return diag.code, diag.span.line, diag.span.column


def test_attention_example_binds(tmp_path):
    text = (
        "pipeline: p.cuvil\n"
        "shapes: {B: 2, M: 16, N: 8, D: 4}\n"
        "inputs:\n"
        "  q: {init: normal, seed: 1}\n"
        "  k: {init: uniform}\n"
    )
    binding = bind(load(tmp_path, text), ATTENTION)
    assert binding.sizes == {"B": 2, "M": 16, "N": 8, "D": 4}
    assert binding.params == {"scale": 0.125}
    assert binding.shapes == {"q": (2, 16, 4), "k": (2, 8, 4), "p": (2, 16, 8)}
    q, k = binding.inputs["q"], binding.inputs["k"]
    assert isinstance(q, GeneratedSource) and (q.init, q.seed, q.mean, q.std) == ("normal", 1, 0.0, 1.0)
    assert q.span.line == 4
    assert isinstance(k, GeneratedSource) and (k.init, k.seed, k.low, k.high) == ("uniform", 1, -1.0, 1.0)


def test_unlisted_inputs_default_to_normal_seeded_by_position(tmp_path):
    pipe = pipeline(tensor("x", "f32", 4), scalar("alpha", "f32", 1.0), tensor("y", "f32", 4))
    binding = bind(load(tmp_path, "pipeline: p.cuvil\ninputs: {y: {init: ones}}\n"), pipe)
    assert binding.inputs["x"] == GeneratedSource("normal", 0, Span.whole_file(str(tmp_path / "s.yaml")))
    assert (binding.inputs["y"].init, binding.inputs["y"].seed) == ("ones", 2)


def test_unknown_names(tmp_path):
    text = (
        "pipeline: p.cuvil\n"
        "shapes: {B: 1, M: 1, N: 1, D: 1, K: 3}\n"
        "params: {scal: 1.0, q: 2}\n"
        "inputs:\n"
        "  kk: {init: zeros}\n"
        "  scale: {init: ones}\n"
        "  p: {init: ones}\n"
    )
    found = {d.span.line * 100 + d.span.column: d for d in problems(tmp_path, text, ATTENTION)}
    assert sorted((d.code, d.span.line, d.span.column) for d in found.values()) == [
        ("E501", 2, 34),
        ("E501", 3, 10),
        ("E501", 3, 21),
        ("E501", 5, 3),
        ("E501", 6, 3),
        ("E501", 7, 3),
    ]
    assert found[310].hint == "did you mean `scale`?"
    assert found[321].hint == "`q` is a tensor: give it under inputs"
    assert found[503].hint == "did you mean `k`?"
    assert found[603].hint == "`scale` is a scalar: give it under params"
    assert found[703].hint == "`p` is a result, not an input"


def test_kernel_names(tmp_path):
    loaded = load(tmp_path, "pipeline: p.cuvil\nkernels:\n  qk_softmx: {block: 128}\n  main_k0: {block: 64}\n")
    found = check_kernel_names(loaded, ["qk_softmax", "main_k0"])
    assert [(d.code, d.span.line, d.span.column, d.hint) for d in found] == [
        ("E501", 3, 3, "did you mean `qk_softmax`?")
    ]


def test_symbols_without_size(tmp_path):
    found = problems(tmp_path, "pipeline: p.cuvil\nrun: {warmup: 0}\nshapes: {B: 1, D: 2}\n", ATTENTION)
    assert [(at(d), d.message, d.hint) for d in found] == [
        (("E502", 3, 1), "symbol `M` has no size", "add it under shapes: {M: ...}"),
        (("E502", 3, 1), "symbol `N` has no size", "add it under shapes: {N: ...}"),
    ]
    found = problems(tmp_path, "pipeline: p.cuvil\n", pipeline(tensor("x", "f32", "M")))
    assert [at(d) for d in found] == [("E502", 1, 1)]


def test_symbols_bind_from_npy_headers(tmp_path):
    np.save(tmp_path / "q.npy", np.zeros((2, 16, 4), np.float16))
    text = "pipeline: p.cuvil\nshapes: {N: 8}\ninputs:\n  q: {file: q.npy}\n"
    binding = bind(load(tmp_path, text), ATTENTION)
    assert binding.sizes == {"N": 8, "B": 2, "M": 16, "D": 4}
    source = binding.inputs["q"]
    assert isinstance(source, FileSource) and source.shape == (2, 16, 4) and source.dtype == np.float16


def test_symbol_bound_two_ways(tmp_path):
    np.save(tmp_path / "q.npy", np.zeros((2, 16, 4), np.float16))
    np.save(tmp_path / "k.npy", np.zeros((3, 8, 4), np.float16))
    text = "pipeline: p.cuvil\nshapes: {M: 32}\ninputs:\n  q: {file: q.npy}\n  k: {file: k.npy}\n"
    found = problems(tmp_path, text, ATTENTION)
    assert [at(d) for d in found] == [("E506", 4, 7), ("E506", 5, 7)]
    assert "`M` is bound two ways: 32 from shapes, 16 from axis 1 of `q` (q.npy)" in found[0].message
    assert "`B` is bound two ways: 2 from axis 0 of `q` (q.npy), 3 from axis 0 of `k` (k.npy)" in found[1].message


@pytest.mark.parametrize(
    ("array", "words"),
    [
        (np.zeros((2, 16), np.float16), "rank 2"),
        (np.zeros((2, 16, 4), np.float32), "holds float32 data; f16 input needs float16"),
        (np.zeros((2, 16, 4), np.int32), "holds int32 data"),
    ],
)
def test_file_mismatch(tmp_path, array, words):
    np.save(tmp_path / "q.npy", array)
    found = problems(tmp_path, "pipeline: p.cuvil\nshapes: {N: 8}\ninputs:\n  q: {file: q.npy}\n", ATTENTION)
    # the file's symbols are not reported again as E502
    assert [at(d) for d in found] == [("E506", 4, 7)]
    assert words in found[0].message


def test_literal_dimension_mismatch(tmp_path):
    np.save(tmp_path / "w.npy", np.zeros((3, 5), np.float32))
    found = problems(tmp_path, "pipeline: p.cuvil\ninputs: {w: {file: w.npy}}\n", pipeline(tensor("w", "f32", "M", 4)))
    assert [at(d) for d in found] == [("E506", 2, 14)]
    assert "needs 4 on axis 1" in found[0].message


@pytest.mark.parametrize(
    ("declared", "stored", "ok"),
    [
        ("bf16", np.float32, True),
        ("bf16", np.uint16, True),
        ("bf16", np.float16, False),
        ("f16", np.float16, True),
        ("f32", np.float32, True),
        ("f32", np.float64, False),
        ("f64", np.float64, True),
        ("i32", np.int32, True),
        ("i32", np.int64, False),
        ("bool", np.bool_, True),
        ("bool", np.uint8, False),
    ],
)
def test_file_dtypes(tmp_path, declared, stored, ok):
    np.save(tmp_path / "x.npy", np.zeros((4,), stored))
    loaded = load(tmp_path, "pipeline: p.cuvil\ninputs: {x: {file: x.npy}}\n")
    pipe = pipeline(tensor("x", declared, "N"))
    if ok:
        assert bind(loaded, pipe).inputs["x"].dtype == np.dtype(stored)
    else:
        with pytest.raises(UserError) as caught:
            bind(loaded, pipe)
        assert caught.value.diagnostics[0].code == "E506"


def test_big_endian_file_is_accepted(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((4,), ">f4"))
    binding = bind(load(tmp_path, "pipeline: p.cuvil\ninputs: {x: {file: x.npy}}\n"), pipeline(tensor("x", "f32", "N")))
    assert binding.inputs["x"].dtype == np.dtype(np.float32)


def test_object_and_non_npy_files_refused(tmp_path):
    np.save(tmp_path / "o.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    (tmp_path / "t.npy").write_text("not numpy")
    text = "pipeline: p.cuvil\ninputs:\n  o: {file: o.npy}\n  t: {file: t.npy}\n"
    found = problems(tmp_path, text, pipeline(tensor("o", "f32", 2), tensor("t", "f32", 2)))
    assert [at(d) for d in found] == [("E506", 3, 7), ("E506", 4, 7)]
    assert "object arrays are refused" in found[0].message
    assert "not a readable .npy file" in found[1].message


def test_constraint_violated_is_e204_in_the_pipeline_file(tmp_path):
    pipe = pipeline(
        tensor("x", "f32", "M", "K"),
        constraints=(Constraint("K", 64, Span(CUVIL, 7, 9, 7, 14), "`x @ w` needs K = 64"),),
    )
    found = problems(tmp_path, "pipeline: p.cuvil\nshapes: {M: 2, K: 48}\n", pipe)
    assert [(d.code, str(d.span)) for d in found] == [("E204", "p.cuvil:7:9")]
    assert "`K` is bound to 48 but must be 64" in found[0].message
    assert bind(load(tmp_path, "pipeline: p.cuvil\nshapes: {M: 2, K: 64}\n"), pipe).sizes["K"] == 64


def test_scalar_without_value(tmp_path):
    pipe = pipeline(scalar("alpha", "f32"), scalar("beta", "f32", 2.0))
    found = problems(tmp_path, "pipeline: p.cuvil\n", pipe)
    assert [(at(d), d.message, d.hint) for d in found] == [
        (("E507", 1, 1), "scalar parameter `alpha` has no value", "add it under params: {alpha: ...}")
    ]
    found = problems(tmp_path, "pipeline: p.cuvil\nparams:\n  beta: 1.0\n", pipe)
    assert [at(d) for d in found] == [("E507", 2, 1)]


def test_scalar_values_by_kind(tmp_path):
    pipe = pipeline(scalar("alpha", "f32"), scalar("n", "i32"), scalar("flag", "bool", False), scalar("h", "f16", 3))
    binding = bind(load(tmp_path, "pipeline: p.cuvil\nparams: {alpha: 2, n: 7, flag: true}\n"), pipe)
    assert binding.params == {"alpha": 2.0, "n": 7, "flag": True, "h": 3.0}
    assert [type(v) for v in binding.params.values()] == [float, int, bool, float]


@pytest.mark.parametrize(
    ("values", "column"),
    [("{n: 1.5}", 13), ("{n: true}", 13), ("{alpha: false}", 17), ("{flag: 1}", 16), ("{n: 4294967296}", 13)],
)
def test_scalar_of_the_wrong_kind(tmp_path, values, column):
    pipe = pipeline(scalar("alpha", "f32", 1.0), scalar("n", "i32", 1), scalar("flag", "bool", False))
    found = problems(tmp_path, f"pipeline: p.cuvil\nparams: {values}\n", pipe)
    assert [at(d) for d in found] == [("E508", 2, column)]


def test_absurd_buffer(tmp_path):
    found = problems(tmp_path, "pipeline: p.cuvil\nshapes: {M: 1048576, N: 1048576}\n",
                     pipeline(tensor("x", "f64", "M", "N")))
    assert [at(d) for d in found] == [("E509", 2, 1)]
    assert "8.0 TiB" in found[0].message and "1048576" in found[0].message


def test_total_over_the_memory_limit(tmp_path):
    pipe = pipeline(tensor("x", "f32", "N"), results=(result("y", "f32", "N"),))
    text = "pipeline: p.cuvil\nshapes: {N: 1024}\n"
    found = problems(tmp_path, text, pipe, memory_limit=8191)
    assert [at(d) for d in found] == [("E509", 2, 1)]
    assert "8.0 KiB" in found[0].message
    assert bind(load(tmp_path, text), pipe, memory_limit=8192).shapes == {"x": (1024,), "y": (1024,)}


def test_select_pipeline(tmp_path):
    one, two = Pipeline("one", (), (), (), span()), Pipeline("two", (), (), (), span())
    module = Module(CUVIL, (one, two))
    assert select_pipeline(load(tmp_path, "pipeline: p.cuvil\nentry: two\n"), module) is two
    assert select_pipeline(load(tmp_path, "pipeline: p.cuvil\n"), Module(CUVIL, (one,))) is one
    with pytest.raises(UserError) as caught:
        select_pipeline(load(tmp_path, "pipeline: p.cuvil\n"), module)
    assert at(caught.value.diagnostics[0]) == ("E508", 1, 1)
    with pytest.raises(UserError) as caught:
        select_pipeline(load(tmp_path, "pipeline: p.cuvil\nentry: tow\n"), module)
    diag = caught.value.diagnostics[0]
    assert at(diag) == ("E508", 2, 8) and diag.hint == "did you mean `two`?"
