"""The spec models: section 7's keys and defaults, strictness, the structure walk."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from cuvil_dsl.spec.models import (
    Budget,
    Check,
    FilledInput,
    FileInput,
    KernelSettings,
    LaunchBounds,
    NormalInput,
    Spec,
    Target,
    Tile,
    UniformInput,
    model_at,
)
from cuvil_dsl.types import DType


def test_every_default_of_section_7():
    spec = Spec.model_validate({"pipeline": "model.cuvil"})
    assert spec.entry is None
    assert spec.shapes == {} and spec.params == {} and spec.kernels == {} and spec.inputs == {}
    assert spec.target == Target(
        backend="auto", arch="auto", compiler="nvrtc", fallback="nvcc", fast_math=False, tf32=False, options=(), devices=(0,)
    )
    assert spec.check.reference == "numpy" and spec.check.rtol is None and spec.check.atol is None
    assert (spec.run.warmup, spec.run.iterations) == (10, 100)
    assert spec.budget == Budget(backend="cuda")
    assert spec.budget.p50_us is None and spec.budget.max_registers is None


def test_generated_input_defaults():
    normal = NormalInput(init="normal")
    assert (normal.mean, normal.std, normal.seed) == (0.0, 1.0, None)
    uniform = UniformInput(init="uniform")
    assert (uniform.low, uniform.high, uniform.seed) == (-1.0, 1.0, None)


def test_section_7_example_validates():
    spec = Spec.model_validate(
        {
            "pipeline": "model.cuvil",
            "entry": "attention_scores",
            "shapes": {"B": 8, "M": 1024},
            "params": {"alpha": 0.5},
            "target": {"backend": "auto", "arch": "sm_90a", "compiler": "nvrtc", "fallback": "nvcc",
                       "fast_math": False, "tf32": False, "options": [], "devices": [0]},
            "kernels": {"qk_softmax": {"launch_bounds": {"max_threads": 256, "min_blocks": 2}, "block": 256,
                                       "tile": {"m": 64, "n": 64, "k": 32}, "max_registers": 128}},
            "inputs": {"x": {"init": "normal", "mean": 0.0, "std": 1.0, "seed": 0}, "w": {"file": "w.npy"}},
            "check": {"reference": "numpy"},
            "run": {"warmup": 10, "iterations": 100},
            "budget": {"backend": "cuda", "p50_us": 120, "p99_us": 200, "max_spill_bytes": 0,
                       "max_registers": 255, "regress_pct": 10},
        }
    )
    assert spec.kernels["qk_softmax"].tile == Tile(m=64, n=64, k=32)
    assert isinstance(spec.inputs["x"], NormalInput) and isinstance(spec.inputs["w"], FileInput)
    assert spec.target.devices == (0,)


def test_devices_all_and_fills():
    spec = Spec.model_validate(
        {"pipeline": "p", "target": {"devices": "all"}, "inputs": {"a": {"init": "arange"}, "b": {"init": "ones"}}}
    )
    assert spec.target.devices == "all"
    assert spec.inputs["a"] == FilledInput(init="arange")


@pytest.mark.parametrize(
    "data",
    [
        {"pipeline": "p", "run": {"iterations": "10"}},  # no coercion from strings
        {"pipeline": "p", "run": {"iterations": 10.0}},
        {"pipeline": "p", "run": {"iterations": True}},
        {"pipeline": "p", "run": {"iterations": 0}},
        {"pipeline": "p", "run": {"warmup": -1}},
        {"pipeline": "p", "shapes": {"M": 0}},
        {"pipeline": "p", "params": {"alpha": float("nan")}},
        {"pipeline": "p", "params": {"alpha": "x"}},
        {"pipeline": "p", "target": {"devices": []}},
        {"pipeline": "p", "target": {"devices": [0, 0]}},
        {"pipeline": "p", "target": {"arch": "sm_80a"}},
        {"pipeline": "p", "target": {"arch": "sm_77"}},
        {"pipeline": "p", "check": {"rtol": -1}},
        {"pipeline": "p", "inputs": {"x": {"init": "normal", "std": -1}}},
        {"pipeline": "p", "inputs": {"x": {"init": "uniform", "low": 1, "high": 0}}},
        {"pipeline": "p", "inputs": {"x": {"init": "normal", "file": "x.npy"}}},
        {"pipeline": "p", "budget": {"backend": "auto"}},
        {"pipeline": ""},
    ],
)
def test_invalid_values_are_rejected(data):
    with pytest.raises(ValidationError):
        Spec.model_validate(data)


@pytest.mark.parametrize("block", [32, 64, 1024])
def test_valid_blocks(block):
    assert KernelSettings(block=block).block == block


@pytest.mark.parametrize(
    "settings",
    [
        {"block": 100},
        {"block": 2048},
        {"block": 0},
        {"max_registers": 256},
        {"max_registers": 8},
        {"tile": {"m": 48}},
        {"tile": {"k": 512}},
        {"launch_bounds": {"max_threads": 1056}},
        {"launch_bounds": {"max_threads": 128, "min_blocks": 0}},
        {"launch_bounds": {"max_threads": 128}, "block": 256},  # more threads than the bound
    ],
)
def test_invalid_launch_settings(settings):
    with pytest.raises(ValidationError):
        KernelSettings.model_validate(settings)


def test_models_are_frozen():
    spec = Spec.model_validate({"pipeline": "p"})
    with pytest.raises(ValidationError):
        spec.pipeline = "q"  # type: ignore[misc]
    assert LaunchBounds(max_threads=128).min_blocks is None


def test_tolerances_by_dtype():
    check = Check()
    assert check.tolerances(DType.F16) == (1e-3, 1e-3)
    assert check.tolerances(DType.BF16) == (8e-3, 8e-3)
    assert check.tolerances(DType.F32) == (1e-5, 1e-5)
    assert check.tolerances(DType.F32, tf32=True) == (1e-3, 1e-3)
    assert check.tolerances(DType.F64) == (1e-7, 1e-7)
    assert check.tolerances(DType.I32) == (0.0, 0.0)
    assert Check(rtol=0.5).tolerances(DType.F16) == (0.5, 1e-3)  # replaces only the one it names


def test_model_at_follows_the_structure():
    data = {"kernels": {"k": {"tile": {}}}, "inputs": {"a": {"init": "uniform"}, "b": {"file": "x"}, "c": 3}}
    assert model_at((), data) is Spec
    assert model_at(("kernels", "k", "tile"), data) is Tile
    assert model_at(("inputs", "a"), data) is UniformInput
    assert model_at(("inputs", "b"), data) is FileInput
    assert model_at(("inputs", "c"), data) is None
    assert model_at(("shapes",), data) is None
