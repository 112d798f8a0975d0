"""Compile service scheduling and the in-process hit: longest compiles start first (recorded
durations, else an estimate from the source), results keep input order, and a repeated
all-hit batch is answered with the same objects without planning again."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from cuvil_dsl.compile import CompileUnit, cache_clear, capture, compile_units, export_counters
from cuvil_dsl.compile import cache as cache_mod
from cuvil_dsl.compile import service
from cuvil_dsl.compile.units import estimated_compile_ms
from cuvil_dsl.diagnostics import UserError

SMALL = r"""
extern "C" __global__ void block_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float s[128];
  int t = threadIdx.x;
  s[t] = t < n ? x[t] : 0.0f;
  __syncthreads();
  if (t < 64) s[t] += s[t + 64];
  __syncthreads();
  if (t == 0) out[blockIdx.x] = s[0] + s[1] /* TAG */;
}
"""


def small(tag: str) -> CompileUnit:
    return CompileUnit(f"small_{tag}", SMALL.replace("TAG", tag), ("block_sum",))


def heavy(tag: str, trips: int = 64) -> CompileUnit:
    source = f"""
extern "C" __global__ void heavy(const float* __restrict__ x, float* __restrict__ y) {{
  float a = x[threadIdx.x], b = x[threadIdx.x + 1];
  #pragma unroll
  for (int k = 0; k < {trips}; ++k) {{ a = fmaf(a, b, (float)k); b = expf(b) + a * 0.5f; }}
  y[threadIdx.x] = a + b; /* {tag} */
}}"""
    return CompileUnit(f"heavy_{tag}", source, ("heavy",))



@pytest.fixture
def submissions(monkeypatch):
    """The unit names in the order compile_units hands them to its thread pool."""
    names: list[str] = []

    class Recording(ThreadPoolExecutor):
        def submit(self, fn, *args, **kwargs):
            if fn is service._compile_one:
                names.append(args[0].name)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(service, "ThreadPoolExecutor", Recording)
    return names


# ----------------------------------------------------------------------------- the estimate

def _kernel(body: str, helpers: str = "") -> str:
    return helpers + 'extern "C" __global__ void k(float* y) {\n  float a = y[threadIdx.x];\n' + body + \
        "\n  y[threadIdx.x] = a;\n}\n"


def test_estimate_counts_unrolled_work_and_heavy_math():
    plain = _kernel("  a = a * 2.0f + 1.0f;")
    unrolled = _kernel("  #pragma unroll\n  for (int i = 0; i < 32; ++i) a = a * 2.0f + 1.0f;")
    rolled = _kernel("  #pragma unroll 1\n  for (int i = 0; i < 32; ++i) a = a * 2.0f + 1.0f;")
    nested = _kernel("  #pragma unroll\n  for (int i = 0; i < 4; ++i)\n  #pragma unroll\n"
                     "    for (int j = 0; j < 8; ++j) { a = a * 2.0f + j; a = a - i; }")
    assert estimated_compile_ms(unrolled) > estimated_compile_ms(rolled) == estimated_compile_ms(plain)
    assert estimated_compile_ms(nested) > estimated_compile_ms(unrolled)  # 4 x 8 x 2 statements against 32
    f64 = _kernel("  double d = a;\n  #pragma unroll\n  for (int i = 0; i < 16; ++i) d = pow(d, 1.5);\n  a = d;")
    f32 = _kernel("  #pragma unroll\n  for (int i = 0; i < 16; ++i) a = a * 1.5f;\n  a = a;")
    assert estimated_compile_ms(f64) > 2 * estimated_compile_ms(f32)
    # a helper is weighed where it is defined and charged at each call, times the unroll around it
    helper = "__device__ __forceinline__ float slow(float x) { return powf(x, 1.5f) + sinf(x); }\n"
    called = _kernel("  #pragma unroll\n  for (int i = 0; i < 16; ++i) a = slow(a);", helper)
    inline = _kernel("  #pragma unroll\n  for (int i = 0; i < 16; ++i) a = a + 1.0f;", helper)
    assert estimated_compile_ms(called) > estimated_compile_ms(inline) + 16 * 0.3 * 30
    assert estimated_compile_ms(heavy("x", 128).source) > estimated_compile_ms(heavy("x").source) > \
        estimated_compile_ms(small("x").source)


@pytest.mark.parametrize("source", ["", "}}}{{{", "for (", "#pragma unroll\n", "__global__ void k( {",
                                    'extern "C" __global__ void k() { asm("%0 %%r" :: "r"(1)); for (;;) {} }',
                                    "__device__ int f(int x) { return f(x); }\n__global__ void k() { f(1); }",
                                    "__device__ float h0(float x) { return x; }\n" + "".join(
                                        f"__device__ float h{i}(float x) {{ return h{i - 1}(x); }}\n"
                                        for i in range(1, 3000)) + "__global__ void k(float* y) { h2999(1); }",
                                    "__global__ void k() {\n#pragma unroll " + "9" * 5000 + "\nfor (;;) {}\n}",
                                    "__global__ void k() {\n#pragma unroll\nfor (int i = 0; i < " + "9" * 40 +
                                    "; ++i) { a(); }\n}"])
def test_estimate_never_fails_on_odd_sources(source):
    assert estimated_compile_ms(source) > 0


# ----------------------------------------------------------------------------- scheduling

@pytest.mark.nvrtc
def test_longest_compile_starts_first_and_results_keep_input_order(cache_dir, submissions):
    units = [small("a"), small("b"), heavy("h1"), small("c"), heavy("h2", 128)]
    seen = []
    results = compile_units(units, "sm_90", workers=2, progress=lambda *args: seen.append(args))
    assert submissions == ["heavy_h2", "heavy_h1", "small_a", "small_b", "small_c"]
    assert [r.unit for r in results] == units, "results come back in input order"
    assert all(r.cache == "miss" and r.cubin.startswith(b"\x7fELF") for r in results)
    assert [s[0] for s in seen] == [1, 2, 3, 4, 5] and {s[1] for s in seen} == {5}
    assert sorted(s[2] for s in seen) == sorted(u.name for u in units)


@pytest.mark.nvrtc
def test_order_is_kept_when_every_unit_gets_a_worker(cache_dir, submissions):
    units = [small("w1"), heavy("w2"), small("w3")]
    compile_units(units, "sm_90", workers=3)
    assert submissions == [u.name for u in units]  # all start at once: nothing to reorder


@pytest.mark.nvrtc
def test_recorded_durations_order_the_next_batch(cache_dir, submissions):
    """What a compile took is kept by unit name and arch (in the cache folder, for the next
    process) and outranks the estimate; a unit already on disk is a load and goes last."""
    first = [small("r1"), heavy("r2")]
    compile_units(first, "sm_90", workers=1)
    saved = json.loads((cache_dir / cache_mod.DURATIONS_FILE).read_text())["units"]
    assert set(saved) == {"sm_90 small_r1", "sm_90 heavy_r2"}
    assert all(ms > 0 and size > 0 for ms, size in saved.values())
    assert cache_mod.Durations(cache_dir / cache_mod.DURATIONS_FILE).lookup(["sm_90 heavy_r2"])[0][1] == \
        len(first[1].source)

    durations = service.disk_cache().durations
    durations.record("sm_90 small_r3", 900.0, len(small("r3").source))  # say it took long last time
    durations.record("sm_90 heavy_r4", 5.0, len(heavy("r4").source))  # and this one did not
    cache_clear(disk=False)
    units = [small("r1"), heavy("r4"), small("r3"), heavy("r2")]
    results = compile_units(units, "sm_90", workers=2)
    assert submissions == ["small_r3", "heavy_r4", "small_r1", "heavy_r2"]
    assert [r.unit for r in results] == units
    assert [r.cache for r in results] == ["hit-disk", "miss", "miss", "hit-disk"]


@pytest.mark.nvrtc
def test_estimates_join_recorded_times_on_their_scale(cache_dir, monkeypatch):
    """A record for a unit whose source changed size by more than 2x is not used; units without
    a usable record are estimated and scaled by how recorded times compare with estimates."""
    monkeypatch.setenv("CUVIL_DISABLE_CACHE", "1")
    plan = service._plan("sm_90", "nvrtc", "none", False, ())
    units = (small("s1"), heavy("s2"), heavy("s3", 16))
    service._LOCAL_DURATIONS.record("sm_90 small_s1", 1000.0, len(units[0].source))  # ~11x the estimate
    service._LOCAL_DURATIONS.record("sm_90 heavy_s3", 5.0, 3 * len(units[2].source))  # another source: ignored
    keys = [plan.key_for(u) for u in units]
    assert service._longest_first(units, [0, 1, 2], keys, plan) == [1, 2, 0]


@pytest.mark.nvrtc
def test_a_damaged_durations_file_is_ignored(cache_dir, submissions):
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (cache_dir / cache_mod.DURATIONS_FILE).write_text('{"units": {"sm_90 small_d1": ["x", 3]}')
    units = [small("d1"), heavy("d2"), small("d3")]
    assert [r.unit for r in compile_units(units, "sm_90", workers=2)] == units
    assert submissions[0] == "heavy_d2"
    assert "sm_90 small_d3" in json.loads((cache_dir / cache_mod.DURATIONS_FILE).read_text())["units"]


# ----------------------------------------------------------------------------- the in-process hit

@pytest.mark.nvrtc
def test_all_hit_batch_is_answered_with_the_same_objects(cache_dir, monkeypatch):
    units = [small("m1"), small("m2")]
    first = compile_units(units, "sm_90")
    second = compile_units(units, "sm_90")  # all in memory: planned, keyed, and remembered
    assert [r.cache for r in first] == ["miss", "miss"] and [r.cache for r in second] == ["hit-memory"] * 2

    def no_planning(*args, **kwargs):
        raise AssertionError("an all-hit batch seen before must not be planned again")

    with monkeypatch.context() as patch:
        patch.setattr(service, "_plan", no_planning)
        before = export_counters()["memory_hits"]
        seen = []
        third = compile_units(units, "sm_90", progress=lambda *args: seen.append(args))
        again = compile_units([CompileUnit(u.name, u.source, u.kernels, u.options) for u in units], "sm_90")
        assert export_counters()["memory_hits"] - before == 4
    assert all(a is b for a, b in zip(third, second)) and all(a is b for a, b in zip(again, second))
    assert third is not second, "a new list each time"
    assert seen == [(1, 2, "small_m1", True), (2, 2, "small_m2", True)]
    for hit, miss in zip(third, first):
        assert (hit.unit, hit.arch, hit.cubin, hit.resources, hit.key, hit.log, hit.compiler) == \
            (miss.unit, miss.arch, miss.cubin, miss.resources, miss.key, miss.log, miss.compiler)
        assert hit.cache_hit and hit.cache == "hit-memory" and hit.compile_ms < 5

    with capture() as records:  # someone listens: every unit is logged, as before
        logged = compile_units(units, "sm_90")
    assert [(r["unit"], r["cache"]) for r in records] == [("small_m1", "hit-memory"), ("small_m2", "hit-memory")]
    assert [r.cache for r in logged] == ["hit-memory"] * 2

    monkeypatch.setenv("CUVIL_LINEINFO", "1")  # changes the binary: another key, never the remembered answer
    assert [r.cache for r in compile_units(units, "sm_90")] == ["miss", "miss"]
    monkeypatch.delenv("CUVIL_LINEINFO")
    assert compile_units(units, "sm_90")[0] is logged[0]
    monkeypatch.setenv("CUVIL_COMPILE_TIMEOUT", "soon")  # a bad knob is still reported
    with pytest.raises(UserError) as info:
        compile_units(units, "sm_90")
    assert info.value.diagnostics[0].code == "E508"
    monkeypatch.delenv("CUVIL_COMPILE_TIMEOUT")
    assert compile_units(units, "sm_90", fast_math=True)[0].cache == "miss"  # other options, other answer
    cache_clear(disk=False)  # a new process: the remembered answers go with the memory layer
    assert [r.cache for r in compile_units(units, "sm_90")] == ["hit-disk", "hit-disk"]


def test_remembered_answer_needs_all_its_keys_in_memory():
    memory = cache_mod.MemoryCache(capacity=2)
    artifact = object()
    memory.put("a", artifact)
    memory.put("b", artifact)
    memory.put_batch(("batch",), ("a", "b"), ("ra", "rb"))
    assert memory.get_batch(("batch",)) == ("ra", "rb")
    memory.put("c", artifact)  # evicts "a"
    assert memory.get_batch(("batch",)) is None
    memory.put_batch(("other",), ("b", "missing"), ("rb", "r?"))  # never remembered without its keys
    assert memory.get_batch(("other",)) is None
    memory.put_batch(("late",), ("b", "c"), ("rb", "rc"))
    assert memory.clear() == 2 and memory.get_batch(("late",)) is None
