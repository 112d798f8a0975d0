"""Input arrays: generated ones reproducible to the byte, files loaded without pickles."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from cuvil_dsl.diagnostics import Span, UserError
from cuvil_dsl.ir.nodes import Param, Pipeline
from cuvil_dsl.spec import bind, load_spec, make_inputs
from cuvil_dsl.spec.binding import FileSource, GeneratedSource
from cuvil_dsl.spec.inputs import generate, load_file
from cuvil_dsl.types import DType, Sym, TensorType

SPAN = Span("p.cuvil", 1, 1, 1, 2)


def tensor(name: str, dtype: str, *dims: int | str) -> Param:
    shape = tuple(Sym(d) if isinstance(d, str) else d for d in dims)
    return Param(name, TensorType(DType(dtype), shape), DType(dtype), SPAN)


def arrays(folder: Path, text: str, *params: Param) -> dict[str, np.ndarray]:
    (folder / "p.cuvil").write_text("")
    (folder / "s.yaml").write_text("pipeline: p.cuvil\n" + text)
    pipe = Pipeline("f", params, (), (), SPAN)
    return make_inputs(bind(load_spec(folder / "s.yaml"), pipe), pipe)


def source(init: str, seed: int = 0, **options: float) -> GeneratedSource:
    return GeneratedSource(init, seed, SPAN, **options)


def test_known_first_values_of_default_rng_zero():
    # If NumPy ever changes this stream, every recorded case changes: this test says so first.
    values = generate(source("normal"), DType.F64, (4,))
    assert values.tolist() == [0.1257302210933933, -0.1321048632913019, 0.6404226504432821, 0.10490011715303971]
    values = generate(source("uniform", low=0.0, high=1.0), DType.F64, (2,))
    assert values.tolist() == [0.6369616873214543, 0.2697867137638703]


def test_same_seed_same_bytes(tmp_path):
    text = "shapes: {M: 3, N: 5}\ninputs: {x: {init: normal, seed: 7}, y: {init: uniform, seed: 7, low: 2, high: 3}}\n"
    first = arrays(tmp_path, text, tensor("x", "bf16", "M", "N"), tensor("y", "f16", "M", "N"))
    second = arrays(tmp_path, text, tensor("x", "bf16", "M", "N"), tensor("y", "f16", "M", "N"))
    for name in ("x", "y"):
        assert first[name].tobytes() == second[name].tobytes()
        assert first[name].flags.c_contiguous
    assert first["x"].dtype == ml_dtypes.bfloat16 and first["y"].dtype == np.float16
    assert np.all((first["y"] >= 2) & (first["y"] <= 3))


def test_normal_parameters_and_rounding():
    draw = np.random.default_rng(3).normal(5.0, 0.5, size=(2, 3))
    got = generate(source("normal", 3, mean=5.0, std=0.5), DType.F16, (2, 3))
    assert got.dtype == np.float16 and got.shape == (2, 3)
    assert got.tobytes() == draw.astype(np.float16).tobytes()
    got = generate(source("normal", 3, mean=5.0, std=0.5), DType.BF16, (2, 3))
    assert got.tobytes() == draw.astype(ml_dtypes.bfloat16).tobytes()


def test_unlisted_input_is_normal_with_its_position_as_seed(tmp_path):
    got = arrays(tmp_path, "", tensor("a", "f64", 3), tensor("b", "f64", 3))
    assert got["a"].tolist() == np.random.default_rng(0).normal(size=3).tolist()
    assert got["b"].tolist() == np.random.default_rng(1).normal(size=3).tolist()


def test_fills_and_arange_in_c_order():
    assert generate(source("zeros"), DType.F32, (2, 2)).tolist() == [[0, 0], [0, 0]]
    assert generate(source("ones"), DType.I32, (3,)).tolist() == [1, 1, 1]
    assert generate(source("arange"), DType.F32, (2, 3)).tolist() == [[0, 1, 2], [3, 4, 5]]
    assert generate(source("arange"), DType.F16, (1,)).dtype == np.float16


def test_i32_is_floor_then_saturated():
    draw = np.random.default_rng(5).normal(0.0, 3.0, size=50)
    got = generate(source("normal", 5, std=3.0), DType.I32, (50,))
    assert got.dtype == np.int32 and got.tolist() == np.floor(draw).astype(int).tolist()
    assert got.min() < 0  # floor, not truncation, for negative values: -0.5 -> -1
    huge = generate(source("uniform", 1, low=-1e12, high=1e12), DType.I32, (64,))
    assert huge.max() == 2**31 - 1 and huge.min() == -(2**31)


def test_bool_rules():
    expected = (np.random.default_rng(4).uniform(0, 1, size=20) < 0.5).tolist()
    assert generate(source("normal", 4, mean=9.0), DType.BOOL, (20,)).tolist() == expected
    assert generate(source("uniform", 4, low=5.0, high=6.0), DType.BOOL, (20,)).tolist() == expected
    assert generate(source("zeros"), DType.BOOL, (2,)).tolist() == [False, False]
    assert generate(source("ones"), DType.BOOL, (2,)).tolist() == [True, True]
    assert generate(source("arange"), DType.BOOL, (3,)).tolist() == [False, True, True]


def test_bf16_files(tmp_path):
    bits = np.array([0x3F80, 0xC000, 0x7F80], dtype=np.uint16)  # 1.0, -2.0, inf
    np.save(tmp_path / "b.npy", bits)
    floats = np.array([1.00390625, 3.0, 1e-3], dtype=np.float32)
    np.save(tmp_path / "f.npy", floats)
    got = arrays(tmp_path, "inputs: {b: {file: b.npy}, f: {file: f.npy}}\n", tensor("b", "bf16", 3), tensor("f", "bf16", 3))
    assert got["b"].dtype == ml_dtypes.bfloat16 and got["b"].astype(np.float32).tolist() == [1.0, -2.0, np.inf]
    assert got["f"].dtype == ml_dtypes.bfloat16
    assert got["f"].tobytes() == floats.astype(ml_dtypes.bfloat16).tobytes()
    assert got["f"].astype(np.float32)[0] == 1.0  # 1 + 2**-8 is a tie, rounded to even


def test_other_files_loaded_as_stored(tmp_path):
    data = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.save(tmp_path / "x.npy", np.asfortranarray(data))
    np.save(tmp_path / "m.npy", np.array([True, False]))
    got = arrays(tmp_path, "inputs: {x: {file: x.npy}, m: {file: m.npy}}\n", tensor("x", "i32", "M", "N"), tensor("m", "bool", 2))
    assert got["x"].tolist() == data.tolist() and got["x"].flags.c_contiguous
    assert got["m"].tolist() == [True, False]


def test_pickled_object_array_refused_when_loading(tmp_path):
    path = tmp_path / "o.npy"
    np.save(path, np.array([1, None], dtype=object), allow_pickle=True)
    fake = FileSource(path, (2,), np.dtype(np.float32), SPAN)  # as if the file changed after binding
    with pytest.raises(UserError) as caught:
        load_file("o", DType.F32, fake)
    assert caught.value.diagnostics[0].code == "E506"


def test_file_changed_after_binding(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(3, np.float32))
    with pytest.raises(UserError) as caught:
        load_file("x", DType.F32, FileSource(path, (4,), np.dtype(np.float32), SPAN))
    diag = caught.value.diagnostics[0]
    assert diag.code == "E506" and "changed since the spec was bound" in diag.message
