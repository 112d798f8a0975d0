"""Shared fixtures: every test gets its own compile cache, never the user's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.getbasetemp() / "cuvil-cache"
    cache.mkdir(mode=0o700, exist_ok=True)
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(cache))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh compile cache folder, no compile-affecting knobs set, in-memory caches and the nvcc
    circuit breaker cleared before and after (the compile service's tests)."""
    from cuvil_dsl.compile import BREAKER, cache_clear

    root = tmp_path / "cache"
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(root))
    for var in ("CUVIL_COMPILE_LOG", "CUVIL_DISABLE_CACHE", "CUVIL_NVCC", "CUVIL_LINEINFO", "CUVIL_COMPILE_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    cache_clear(disk=False)
    BREAKER.reset()
    yield root
    cache_clear(disk=False)
    BREAKER.reset()


def gpu_available() -> bool:
    try:
        from cuvil_dsl.runtime.device import gpu_available as probe
    except ImportError:
        return False
    return probe()


def pytest_collection_modifyitems(config, items):
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        shared = pytest.mark.skip(reason="measures time or device-wide memory, which the other pytest-xdist "
                                         "workers disturb: run it without -n (benchmarks/gpu_session.py does)")
        for item in items:
            if "alone" in item.keywords:
                item.add_marker(shared)
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
