"""What keeps a warm start of the CPU backend short (issue 5): structural, never timed.

A new process that loads a compiled CPU pipeline while the caches are warm must not import
CuPy, the CUDA renderer, the compile service or the CUDA runtime, must not parse (the checked
IR comes from the cache, so Lark is not imported), and must not initialise numba's typing and
lowering registries (``BaseContext.refresh``): those were most of the time. The time itself is
measured by ``benchmarks/startup.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import cuvil_dsl
from cuvil_dsl import api
from cuvil_dsl.diagnostics import UserError

ROOT = Path(__file__).resolve().parents[2]

# modules a warm CPU start must not import, and why they were once imported
NOT_IMPORTED = {
    "cupy": "GPU arrays",
    "cuvil_dsl.codegen.cuda": "the CUDA renderer (codegen/__init__ imported it)",
    "cuvil_dsl.compile.service": "the NVRTC compile service (compile/__init__ imported it)",
    "cuvil_dsl.compile.nvrtc": "NVRTC bindings",
    "cuvil_dsl.compile.doctor": "the doctor",
    "cuvil_dsl.runtime.graphs": "CUDA graphs (api imported GraphCache)",
    "cuvil_dsl.runtime.modules": "CUBIN modules",
    "lark": "the parser (the checked IR is cached)",
    "cuvil_dsl.frontend.parser": "the parser",
    "pydantic": "spec models",
    "matplotlib": "plots",
    # loaded only by numba's BaseContext.refresh, which the cached-load path skips
    "numba.np.linalg": "numba's registries",
    "numba.typed.typeddict": "numba's registries",
    "numba.experimental.jitclass.base": "numba's registries",
}

CHILD = """
import json, sys
import numpy as np
import cuvil_dsl
compiled = cuvil_dsl.load(sys.argv[1]).compile(backend="cpu")
x = (np.arange(4 * 96, dtype=np.float32).reshape(4, 96) / 7 - 20).astype(np.float16)
y = compiled(x)
executor = next(iter(compiled.executors.values()))
print(json.dumps({"y": y.view(np.uint16).tolist(), "hits": [k.cache_hit for k in executor.kernel_reports()],
                  "modules": sorted(m for m in sys.modules if m in json.loads(sys.argv[2]))}))
"""


def _fresh_process(cache: Path) -> dict:
    env = {**os.environ, "CUVIL_CACHE_DIR": str(cache)}
    env.pop("CUVIL_DISABLE_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "specs" / "softmax.cuvil"), json.dumps(list(NOT_IMPORTED))],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_warm_start_imports_nothing_the_cpu_path_does_not_need(tmp_path):
    cache = tmp_path / "cache"
    first = _fresh_process(cache)  # compiles, fills numba's cache and the IR cache
    second = _fresh_process(cache)
    assert first["hits"] == [False] and second["hits"] == [True]
    assert second["y"] == first["y"]  # bit for bit, whichever way numba got the kernel
    assert second["modules"] == [], "\n".join(f"{m}: {NOT_IMPORTED[m]}" for m in second["modules"])


def test_lazy_package_names_still_resolve():
    code = """
import sys
import cuvil_dsl.codegen, cuvil_dsl.compile
assert "cuvil_dsl.codegen.cuda" not in sys.modules and "cuvil_dsl.compile.service" not in sys.modules
import cuvil_dsl.compile.doctor  # the submodule first: the package's `doctor` stays the function
from cuvil_dsl.compile import doctor, compile_units, CompileUnit, BREAKER, cache
from cuvil_dsl.codegen import render_cuda, RenderedKernel, check_barriers_uniform
assert callable(doctor) and callable(compile_units) and callable(render_cuda), doctor
assert set(cuvil_dsl.compile.__all__) <= set(dir(cuvil_dsl.compile))
try:
    from cuvil_dsl.compile import no_such_name
except ImportError:
    pass
else:
    raise AssertionError("no_such_name imported")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _program(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.cuvil"
    path.write_text(text)
    return path


def test_a_checked_file_is_loaded_from_the_ir_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUVIL_DISABLE_CACHE", raising=False)
    path = _program(tmp_path, "pipeline twice(x: f32[N]) -> y: f32[N] { y = x * 2 }")
    first = cuvil_dsl.load(path)
    (entry,) = (tmp_path / "cache" / "ir").glob("*.pickle")

    from cuvil_dsl import frontend

    def no_parse(_path):
        raise AssertionError("parsed again")

    monkeypatch.setattr(frontend, "check_file", no_parse)
    assert cuvil_dsl.load(path).pipeline == first.pipeline
    monkeypatch.undo()
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))

    # a damaged entry is a miss, and is rewritten
    entry.write_bytes(b"not a pickle")
    assert cuvil_dsl.load(path).pipeline == first.pipeline
    assert entry.read_bytes() != b"not a pickle"
    # a changed file is another entry
    path.write_text("pipeline twice(x: f32[N]) -> y: f32[N] { y = x * 3 }")
    assert cuvil_dsl.load(path).pipeline != first.pipeline
    assert len(list((tmp_path / "cache" / "ir").glob("*.pickle"))) == 2


def test_errors_are_never_cached_and_a_planted_symlink_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CUVIL_DISABLE_CACHE", raising=False)
    bad = _program(tmp_path, "pipeline broken(x: f32[N]) -> y: f32[N] { y = x * nowhere }")
    for _ in range(2):
        with pytest.raises(UserError):
            cuvil_dsl.load(bad)
    assert not list((tmp_path / "cache" / "ir").glob("*.pickle"))

    good = _program(tmp_path, "pipeline fine(x: f32[N]) -> y: f32[N] { y = x + 1 }")
    entry, _key = api._ir_cache_entry(good, good.read_bytes())
    entry.parent.mkdir(parents=True, exist_ok=True)
    decoy = tmp_path / "decoy.pickle"
    decoy.write_bytes(b"planted")
    entry.symlink_to(decoy)
    assert cuvil_dsl.load(good).name == "fine"
    assert decoy.read_bytes() == b"planted"


def test_light_cache_load_leaves_an_unknown_numba_alone(monkeypatch):
    """The light cache load patches numba internals; on a numba without them it must patch
    nothing (numba's own cache load is slower but always right)."""
    from numba.core import caching

    from cuvil_dsl.runtime import cpu_modules

    original = caching.Cache.load_overload
    monkeypatch.setattr(cpu_modules, "_light", False)
    monkeypatch.delattr(caching.Cache, "_guard_against_spurious_io_errors")
    monkeypatch.setattr(caching.Cache, "load_overload", original)
    cpu_modules._load_caches_lightly()
    assert caching.Cache.load_overload is original


@pytest.mark.parametrize("preset, want", [(None, "4"), ("30", "30")])
def test_importing_cuvil_dsl_shortens_openblas_spinning_unless_set(preset, want):
    """OpenBLAS's workers spin for about 2^28 cycles after each call and thrash with the numba kernels that follow a
    BLAS GEMM; importing cuvil_dsl (before NumPy, as the command line does) asks for short spins, and a value the
    user set stays. NumPy imported after it sees the variable when its OpenBLAS loads."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if preset is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = preset
    code = ("import sys, os, cuvil_dsl; assert 'numpy' not in sys.modules; import numpy; "
            "print(os.environ['OPENBLAS_THREAD_TIMEOUT'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == want
