"""benchmarks/ab_stream.py without a GPU: its kernels build for sm_90 (NVRTC needs no GPU), each bulk
variant's stages fit the shared memory it asks of its blocks, the chunks divide the stream, and the
script says it has no GPU to run on with exit status 2."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("ab_stream", ROOT / "benchmarks" / "ab_stream.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_kernels_build_for_sm_90(tmp_path, monkeypatch):
    from cuvil_dsl.compile import CompileUnit, compile_units, nvrtc

    try:
        nvrtc.library()
    except nvrtc.NvrtcUnavailable as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    s = _script()
    names = ("vec2", *s.BULK)
    (unit,) = compile_units([CompileUnit("ab_stream", s.SOURCE, names, ())], "sm_90")
    assert set(names) <= set(unit.resources)
    assert all(unit.resources[n].spill_bytes == 0 for n in names)


def test_bulk_variants_fit_and_divide_the_stream():
    s = _script()
    for name, (chunk, stages, per_sm) in s.BULK.items():
        assert chunk * stages * per_sm <= 227 * 1024, name  # the blocks asked of a multiprocessor fit
        assert (s.N * 4) % chunk == 0 and chunk % (16 * 256) == 0, name  # whole chunks; whole vectors a thread
        assert f"bulk<{chunk}, {stages}, {'true' if 'ldst' in name else 'false'}>" in s.SOURCE


def test_without_a_gpu_it_exits_2(capsys):
    s = _script()
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:
        pass
    assert s.main() == 2
    assert "ab_stream: no GPU to run on" in capsys.readouterr().err
