"""Helpers for the bench tests: small copies of the benchmarks, and fakes (a simulated GPU clock,
GPU contenders, baseline families).

The benchmark specs are GPU-sized; their stems are what baselines are matched by, so the tests
copy each one with shapes small enough for the reference and NumPy to run in milliseconds.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from cuvil_dsl.bench.contender import Contender

ROOT = Path(__file__).resolve().parents[2]
SMALL_SHAPES = {
    "elementwise_f32": {"N": 4096},
    "softmax_f16": {"M": 32, "N": 128},
    "softmax_f32": {"M": 32, "N": 128},
    "layernorm_f16": {"M": 32, "N": 128},
    "gemm_gelu_f16": {"M": 64, "N": 32, "K": 48},
    "attention_f16": {"B": 2, "M": 32, "N": 48, "D": 16},
    "attention_full_f16": {"B": 2, "M": 40, "N": 72, "D": 16},
    "shapes/attention_full_f16-causal": {"B": 2, "M": 40, "N": 72, "D": 16},
    "small_graph": {"M": 16, "N": 16},
}


def load_script(stem: str):
    """``benchmarks/STEM.py`` loaded as a module (registered in sys.modules: a dataclass looks its module up
    there)."""
    spec = importlib.util.spec_from_file_location(stem, ROOT / "benchmarks" / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build_for_sm_90(source: str, names: tuple[str, ...], cache: Path, options: tuple[str, ...] = ()):
    """``source``'s kernels ``names`` compiled for sm_90 by NVRTC (no GPU needed; skips without NVRTC)
    with the unit's ``options`` (a rendered kernel's: its arch-specific target, its registers), the
    compile cache in ``cache``: the compiled unit."""
    import os

    from cuvil_dsl.compile import CompileUnit, compile_units, nvrtc

    try:
        nvrtc.library()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    saved = os.environ.get("CUVIL_CACHE_DIR")
    os.environ["CUVIL_CACHE_DIR"] = str(cache)
    try:
        (unit,) = compile_units([CompileUnit("script", source, names, tuple(options))], "sm_90")
    finally:
        if saved is None:
            del os.environ["CUVIL_CACHE_DIR"]
        else:
            os.environ["CUVIL_CACHE_DIR"] = saved
    assert set(names) <= set(unit.resources)
    return unit


def exits_2_without_gpu(module, tool: str, capsys, argv: list[str] | None = None) -> None:
    """The script ``module`` says it has no GPU to run on and exits with status 2 (skips on a GPU);
    ``argv``: its command line, for a script that parses one (not pytest's)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    assert (module.main() if argv is None else module.main(argv)) == 2
    assert f"{tool}: no GPU to run on" in capsys.readouterr().err


def copy_benchmarks(folder: Path, shapes: dict[str, dict[str, int]]) -> Path:
    """Copies of ``benchmarks/STEM.yaml`` (and their pipelines) into ``folder`` with other shapes (a stem in a
    subfolder, ``shapes/NAME``, is copied as ``NAME.yaml``)."""
    for stem, sizes in shapes.items():
        source = ROOT / "benchmarks" / f"{stem}.yaml"
        spec = yaml.safe_load(source.read_text())
        spec["shapes"] = sizes
        spec["run"] = {"warmup": 1, "iterations": 3}
        (folder / source.name).write_text(yaml.safe_dump(spec, sort_keys=False))
        shutil.copy(source.parent / spec["pipeline"], folder / spec["pipeline"])
    return folder


class FakeStream:
    ptr = 12345


class FakeClock:
    """Simulated device: events read a device timeline that launches and flushes advance."""

    name = "fake-events"

    def __init__(self, flush_us: float = 50.0):
        self.device_us = 0.0
        self.host_s = 0.0
        self.flush_us = flush_us
        self.log: list[str] = []

    def event(self) -> dict:
        return {"t": None}

    def record(self, event: dict, stream) -> None:
        assert stream is not None
        event["t"] = self.device_us
        self.log.append("record")

    def flush(self, stream) -> None:
        self.device_us += self.flush_us
        self.log.append("flush")

    def synchronize(self, stream) -> None:
        self.log.append("sync")

    def synchronize_device(self) -> None:
        self.log.append("sync_device")

    def elapsed_us(self, start: dict, end: dict) -> float:
        return end["t"] - start["t"]

    def now(self) -> float:
        return self.host_s


def fake_gpu_contender(clock: FakeClock, name: str, durations_us, result, calls: list | None = None,
                       host_us: float = 7.0) -> Contender:
    """A GPU contender whose every launch takes the next duration on the fake device and returns ``result``."""
    durations = iter(durations_us)

    def launch():
        clock.device_us += next(durations)
        clock.host_s += host_us * 1e-6
        clock.log.append("launch")
        if calls is not None:
            calls.append(1)
        return result

    return Contender(name, name.title(), "gpu", launch, fetch=lambda out: out, stream=FakeStream())


class FakeFamily:
    """A baseline family that is always 'installed' and builds what the test gives it."""

    def __init__(self, name: str, build, device: str = "gpu"):
        self.name, self.label, self.device = name, name.title(), device
        self._build = build

    def missing(self, gpu=None):
        return None

    def build(self, problem):
        return self._build(problem)
