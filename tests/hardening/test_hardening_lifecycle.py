"""Lifecycle on the host: a long-lived process (a notebook, a test runner, a server compiling
pipelines on demand) must not leak file descriptors, memory or NVRTC programs.

- 1,000 cycles of parse + check + plan + render + compile (a disk-cache hit: the memory LRU is
  cleared each cycle, so the cache file, its lock and the counters are opened every time):
  the open descriptors (``/proc/self/fd``) are the same after as before, the live objects and RSS
  do not grow with the cycles, and the Python heap (tracemalloc) grows by less than 1 KB a cycle.
- Fresh NVRTC compiles of distinct tiny kernels with ``CUVIL_DISABLE_CACHE=1``: every program
  NVRTC created is destroyed (create/destroy counted at the binding) and RSS stays bounded.
  The default run does 200 (about 4 s on 2 cores); ``CUVIL_FUZZ=1`` also does 1,000 (about 20 s).

The GPU side (modules, device memory, graphs at shutdown) is tests/gpu/test_lifecycle_gpu.py.
"""

from __future__ import annotations

import gc
import os
import tracemalloc

import pytest
from hardening_support import LONG_FUZZ

from cuvil_dsl.codegen import render_cuda
from cuvil_dsl.compile import BREAKER, CompileUnit, cache_clear, compile_units
from cuvil_dsl.compile import nvrtc as nvrtc_mod
from cuvil_dsl.frontend import check_file
from cuvil_dsl.passes import plan_pipeline

pytestmark = [pytest.mark.nvrtc, pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")]

PROGRAM = """\
pipeline lifecycle(x: f32[N, N], v: f32[N]) -> y: f32[N, N] {
    graph forward {
        t = exp(x) * 0.5 + v
        y = relu(t) - x
    }
}
"""


# tracemalloc triples a cycle's cost: the default run traces the last 200 of the 1,000 cycles (a
# per-cycle leak shows in any window; descriptors, objects and RSS are compared over all 1,000);
# CUVIL_FUZZ=1 traces all of them.
TRACED_CYCLES = 1000 if LONG_FUZZ else 200


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(root))
    for var in ("CUVIL_COMPILE_LOG", "CUVIL_DISABLE_CACHE", "CUVIL_LINEINFO", "CUVIL_COMPILE_TIMEOUT"):
        monkeypatch.delenv(var, raising=False)
    cache_clear(disk=False)
    BREAKER.reset()
    yield root
    cache_clear(disk=False)


def _cycle(path) -> None:
    checked = check_file(path)
    assert checked.ok
    plan, _ = plan_pipeline(checked.module.pipelines[0])
    kernels = render_cuda(plan, {"N": 256}, "sm_90")
    units = [CompileUnit(k.entry, k.source, (k.entry,), k.options) for k in kernels]
    cache_clear(disk=False)  # the next compile reads the disk entry again
    results = compile_units(units, "sm_90", workers=1)
    assert all(r.cache == "hit-disk" for r in results)


def test_a_thousand_cached_cycles_leak_no_descriptors_and_no_memory(cache_dir, tmp_path):
    path = tmp_path / "lifecycle.cuvil"
    path.write_text(PROGRAM)
    checked = check_file(path)
    plan, _ = plan_pipeline(checked.module.pipelines[0])
    units = [CompileUnit(k.entry, k.source, (k.entry,), k.options) for k in render_cuda(plan, {"N": 256}, "sm_90")]
    compile_units(units, "sm_90")  # the one real compile: fills the disk cache
    for _ in range(20):  # warm every lazy import, lru_cache and logger
        _cycle(path)
    gc.collect()
    fds_before, objects_before, rss_before = open_fds(), len(gc.get_objects()), rss_bytes()
    traced = TRACED_CYCLES
    for _ in range(1000 - traced):
        _cycle(path)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(traced):
            _cycle(path)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert open_fds() == fds_before
    assert len(gc.get_objects()) - objects_before < 2000  # a leaked object per cycle would be 1,000+
    assert rss_bytes() - rss_before < 32 << 20
    growth = sum(s.size_diff for s in after.compare_to(before, "filename"))
    top = "\n".join(str(s) for s in after.compare_to(before, "lineno")[:8])
    assert growth < 1_000_000 * traced / 1000, f"heap grew by {growth} bytes over {traced} cycles:\n{top}"


class _CountingBinding:
    """The CuPy NVRTC module, with createProgram/destroyProgram counted."""

    def __init__(self, lib):
        self._lib = lib
        self.created = 0
        self.destroyed = 0

    def __getattr__(self, name):
        return getattr(self._lib, name)

    def createProgram(self, *args):
        prog = self._lib.createProgram(*args)
        self.created += 1
        return prog

    def destroyProgram(self, prog):
        self._lib.destroyProgram(prog)
        self.destroyed += 1


def _fresh_compiles(count: int, monkeypatch) -> tuple[int, int, _CountingBinding]:
    monkeypatch.setenv("CUVIL_DISABLE_CACHE", "1")
    counting = _CountingBinding(nvrtc_mod.library())
    monkeypatch.setattr(nvrtc_mod, "library", lambda: counting)
    source = 'extern "C" __global__ void k{i}(float* y) {{ y[threadIdx.x] = {i}.0f * threadIdx.x; }}\n'

    def batch(start: int, n: int) -> None:
        units = [CompileUnit(f"tiny{i}", source.format(i=i), (f"k{i}",)) for i in range(start, start + n)]
        compile_units(units, "sm_90", workers=2)
        cache_clear(disk=False)  # the memory LRU would otherwise keep every CUBIN (legitimately)

    batch(0, 20)  # warm: libnvrtc's own arenas, builtins, headers
    gc.collect()
    baseline = rss_bytes()
    done = 20
    while done < count:
        n = min(20, count - done)
        batch(done, n)
        done += n
    gc.collect()
    return baseline, rss_bytes(), counting


def _assert_no_program_leak(count, monkeypatch):
    baseline, final, counting = _fresh_compiles(count, monkeypatch)
    assert counting.created == count and counting.destroyed == count
    growth = final - baseline
    # a leaked program keeps its source, PTX, CUBIN and log (hundreds of KB): 1,000 would be 100s of MB
    assert growth < 64 << 20, f"RSS grew by {growth / 2**20:.1f} MiB over {count} NVRTC compiles"


def test_fresh_nvrtc_programs_are_destroyed(cache_dir, monkeypatch):
    _assert_no_program_leak(200, monkeypatch)


@pytest.mark.slow
@pytest.mark.skipif(not LONG_FUZZ, reason="1,000 NVRTC compiles take about 20 s: set CUVIL_FUZZ=1")
def test_a_thousand_fresh_nvrtc_programs_are_destroyed(cache_dir, monkeypatch):
    _assert_no_program_leak(1000, monkeypatch)
