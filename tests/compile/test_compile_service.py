"""Compile service behaviour: nvcc fallback, circuit breaker, timeouts, logs, progress,
parallelism and doctor."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from cupy_backends.cuda.libs import nvrtc as cupy_nvrtc

from cuvil_dsl.compile import (
    BREAKER,
    CompileUnit,
    cache_clear,
    capture,
    compile_units,
    doctor,
    export_counters,
    render_doctor,
    stderr_progress,
)
from cuvil_dsl.compile import nvcc as nvcc_mod
from cuvil_dsl.compile import nvrtc as nvrtc_mod
from cuvil_dsl.compile import service
from cuvil_dsl.diagnostics import UserError

pytestmark = pytest.mark.nvrtc

KERNEL = r"""
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

BROKEN = 'extern "C" __global__ void k(float* y) { y[0] = nope; }\n'

needs_nvcc = pytest.mark.skipif(
    shutil.which("nvcc") is None and not shutil.os.access("/usr/local/cuda/bin/nvcc", shutil.os.X_OK),
    reason="nvcc not installed",
)


def unit(tag: str) -> CompileUnit:
    return CompileUnit(f"sum_{tag}", KERNEL.replace("TAG", tag), ("block_sum",))



def nvrtc_failing_with(monkeypatch, code: int) -> list:
    """Make every NVRTC compile fail with ``code`` at the CuPy binding; returns the list of calls."""
    calls = []

    def failing(prog, options):
        calls.append(options)
        raise cupy_nvrtc.NVRTCError(code)

    monkeypatch.setattr(cupy_nvrtc, "compileProgram", failing)
    return calls


@needs_nvcc
@pytest.mark.parametrize("code", [1, 11])
def test_resource_failure_falls_back_to_nvcc(cache_dir, monkeypatch, code):
    calls = nvrtc_failing_with(monkeypatch, code)
    before = export_counters()
    with capture() as records:
        [result] = compile_units([unit(f"fb{code}")], "sm_90")
    name = nvrtc_mod.RESULT_CODES[code].name
    assert len(calls) == 1
    assert result.compiler == "nvcc" and result.fallback == f"nvrtc {name}"
    assert result.cubin.startswith(b"\x7fELF")
    res = result.resources["block_sum"]
    assert res.registers > 0 and res.barriers == 1 and res.shared_bytes == 512 and res.spill_bytes == 0
    [record] = records
    assert record["compiler"] == "nvcc" and record["fallback"] == f"nvrtc {name}"
    assert record["nvrtc_result"] == {"code": code, "name": name, "meaning": nvrtc_mod.RESULT_CODES[code].meaning}
    assert export_counters()["fallbacks"] - before["fallbacks"] == 1
    # The fallback binary is cached under the request's key: NVRTC is not asked again.
    cache_clear(disk=False)
    assert compile_units([unit(f"fb{code}")], "sm_90")[0].cache == "hit-disk"
    assert len(calls) == 1


def test_resource_failure_without_fallback_is_e602(cache_dir, monkeypatch):
    nvrtc_failing_with(monkeypatch, 1)
    with pytest.raises(UserError) as info:
        compile_units([unit("nofb")], "sm_90", fallback="none")
    message = info.value.diagnostics[0].message
    assert "NVRTC_ERROR_OUT_OF_MEMORY (1)" in message and "host memory allocation failed" in message


def test_program_creation_failure_is_reported_with_its_code(cache_dir, monkeypatch):
    def failing(*args):
        raise cupy_nvrtc.NVRTCError(2)

    monkeypatch.setattr(cupy_nvrtc, "createProgram", failing)
    with pytest.raises(UserError) as info:
        compile_units([unit("create")], "sm_90", fallback="none")
    assert "NVRTC_ERROR_PROGRAM_CREATION_FAILURE (2)" in info.value.diagnostics[0].message


def test_source_error_never_falls_back(cache_dir, monkeypatch):
    monkeypatch.setattr(nvcc_mod, "compile_cubin", lambda *a, **k: pytest.fail("nvcc must not run"))
    with pytest.raises(UserError) as info:
        compile_units([CompileUnit("src_err", BROKEN, ("k",))], "sm_90")
    assert info.value.diagnostics[0].code == "E602"
    assert BREAKER.state()["recent_failures"] == 0


@needs_nvcc
def test_both_compilers_failing_reports_both_logs(cache_dir, monkeypatch):
    nvrtc_failing_with(monkeypatch, 11)
    source = 'extern "C" __global__ void big(float* y) { __shared__ float s[100000]; s[threadIdx.x] = 1; y[0] = s[3]; }'
    with pytest.raises(UserError) as info:
        compile_units([CompileUnit("too_big", source, ("big",))], "sm_90")
    message = info.value.diagnostics[0].message
    assert "NVRTC 13." in message and "nvcc 13." in message
    assert "NVRTC_ERROR_INTERNAL_ERROR (11)" in message and "too much shared data" in message


@needs_nvcc
def test_breaker_opens_goes_straight_to_nvcc_and_closes(cache_dir, monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(BREAKER, "clock", lambda: now[0])
    monkeypatch.setenv("CUVIL_BREAKER_THRESHOLD", "2")
    monkeypatch.setenv("CUVIL_BREAKER_WINDOW", "60")
    monkeypatch.setenv("CUVIL_BREAKER_COOLDOWN", "100")
    calls = nvrtc_failing_with(monkeypatch, 11)
    first = compile_units([unit("b1")], "sm_90")[0]
    now[0] += 1
    second = compile_units([unit("b2")], "sm_90")[0]
    assert len(calls) == 2 and first.compiler == second.compiler == "nvcc"
    assert BREAKER.state()["open"]
    now[0] += 50
    third = compile_units([unit("b3")], "sm_90")[0]
    assert len(calls) == 2, "an open breaker must skip NVRTC"
    assert third.compiler == "nvcc" and third.fallback == "breaker-open"
    monkeypatch.undo()  # NVRTC healthy again, real clock and knobs restored ...
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(cache_dir))
    monkeypatch.setattr(BREAKER, "clock", lambda: now[0])
    now[0] += 51  # ... and the cooldown is over
    fourth = compile_units([unit("b4")], "sm_90")[0]
    assert fourth.compiler == "nvrtc" and fourth.fallback is None
    assert not BREAKER.state()["open"]


def test_breaker_counts_only_within_window(monkeypatch):
    now = [0.0]
    breaker = service.BREAKER.__class__(clock=lambda: now[0])
    monkeypatch.setenv("CUVIL_BREAKER_THRESHOLD", "3")
    monkeypatch.setenv("CUVIL_BREAKER_WINDOW", "10")
    assert not breaker.record_failure()
    now[0] = 5
    assert not breaker.record_failure()
    now[0] = 20  # the first two are outside the window now
    assert not breaker.record_failure()
    assert not breaker.is_open()
    assert not breaker.record_failure() and breaker.record_failure()
    assert breaker.is_open()


def test_nvrtc_timeout_is_e602_naming_unit_and_limit(cache_dir, monkeypatch):
    """A compile that honours its cancel request: reported as a timeout, stopped, not abandoned."""
    seen = []

    def slow(source, name, options, cancel):
        seen.append(cancel)
        while not cancel.requested:
            time.sleep(0.01)
        raise nvrtc_mod.NvrtcFailure(16, "", options)  # what NVRTC answers to a cancel

    monkeypatch.setattr(nvrtc_mod, "compile_cubin", slow)
    monkeypatch.setenv("CUVIL_COMPILE_TIMEOUT", "0.2")
    started = time.perf_counter()
    with pytest.raises(UserError) as info:
        compile_units([unit("slow")], "sm_90")
    assert time.perf_counter() - started < 5
    message = info.value.diagnostics[0].message
    assert "sum_slow" in message and "0.2 s" in message and "CUVIL_COMPILE_TIMEOUT" in message
    assert "cancelled" in message and seen and seen[0].requested
    assert not service.abandoned_compiles()
    assert not [t for t in threading.enumerate() if t.name == "cuvil-nvrtc"]
    assert not BREAKER.is_open()
    assert not [p for p in cache_dir.rglob("*") if p.is_file() and p.parent.name == "cubin"]


def test_nvrtc_timeout_that_cannot_be_cancelled_is_abandoned(cache_dir, monkeypatch):
    """A compile deaf to its cancel request (or an NVRTC without flow callbacks) is abandoned
    after the grace period, reported the same way, and recorded for the exit handling."""
    release = threading.Event()

    def stuck(*args):
        release.wait(10)
        raise RuntimeError("abandoned compile finished")

    monkeypatch.setattr(nvrtc_mod, "compile_cubin", stuck)
    monkeypatch.setattr(service, "CANCEL_GRACE", 0.1)
    monkeypatch.setenv("CUVIL_COMPILE_TIMEOUT", "0.2")
    started = time.perf_counter()
    try:
        with pytest.raises(UserError) as info:
            compile_units([unit("deaf")], "sm_90")
        assert service.abandoned_compiles()
    finally:
        release.set()
    assert time.perf_counter() - started < 5
    message = info.value.diagnostics[0].message
    assert "sum_deaf" in message and "CUVIL_COMPILE_TIMEOUT" in message and "abandoned" in message
    for thread in service.abandoned_compiles():
        thread.join(10)
    assert not service.abandoned_compiles()


# Takes NVRTC about 22 s on a slow two-core machine (deep template recursion inside a fully
# unrolled loop, 8 instantiations); cancelled at 0.5 s it returns in about 1.5 s.
SLOW_KERNELS = r"""
template<int N> struct S { __device__ static float f(float x) { return S<N-1>::f(x) * 1.0001f + __sinf(x + N); } };
template<> struct S<0> { __device__ static float f(float x) { return x; } };
template<int K> __global__ void slow(float* y) {
    float x = y[threadIdx.x];
    #pragma unroll
    for (int i = 0; i < 64; ++i) x = S<200>::f(x) + i * K;
    y[threadIdx.x] = x;
}
""" + "".join(f"template __global__ void slow<{k}>(float*);\n" for k in range(1, 9))


@pytest.mark.skipif(not nvrtc_mod.flow_callbacks(), reason="this NVRTC cannot cancel compiles (needs 12.8+)")
def test_a_real_nvrtc_compile_past_the_timeout_is_cancelled_in_parallel(cache_dir, monkeypatch):
    """Two slow units on two pool workers, a 0.5 s limit: both compiles are cancelled through
    NVRTC's flow callback (seconds, not the 20 s and more they need), both are reported as
    timeouts (E602 naming the limit; not retried with nvcc, not counted by the breaker), no
    entry is cached and no compile thread is left running."""
    monkeypatch.setenv("CUVIL_COMPILE_TIMEOUT", "0.5")
    units = [CompileUnit(f"slow_{tag}", SLOW_KERNELS + f"// {tag}\n", ("slow",)) for tag in ("a", "b")]
    started = time.perf_counter()
    with service.clog.capture() as records, pytest.raises(UserError) as info:
        compile_units(units, "sm_90", workers=2)
    elapsed = time.perf_counter() - started
    assert elapsed < 10, elapsed  # 2 s measured; the compiles would take over 20 s each
    messages = [d.message for d in info.value.diagnostics]
    assert len(messages) == 2
    for tag, message in zip("ab", sorted(messages)):
        assert f"slow_{tag}" in message and "0.5 s" in message and "CUVIL_COMPILE_TIMEOUT" in message
        assert "was cancelled" in message and "nvcc" not in message
    assert [r["nvrtc_result"]["name"] for r in records if r.get("error")] == ["NVRTC_ERROR_CANCELLED"] * 2
    assert all(r["fallback"] is None for r in records)
    assert not service.abandoned_compiles()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("cuvil-nvrtc", "cuvil-compile"))]
    assert not BREAKER.is_open()
    assert not [p for p in cache_dir.rglob("*") if p.is_file() and p.parent.name == "cubin"]


@needs_nvcc
def test_nvcc_as_the_compiler_matches_nvrtc_report(cache_dir):
    by_nvcc = compile_units([unit("direct")], "sm_90", compiler="nvcc")[0]
    by_nvrtc = compile_units([unit("direct")], "sm_90")[0]
    assert by_nvcc.compiler == "nvcc" and by_nvcc.fallback is None and by_nvcc.key != by_nvrtc.key
    assert by_nvcc.compiler_version.startswith("13.")
    assert by_nvcc.resources == by_nvrtc.resources


@needs_nvcc
def test_missing_libnvrtc_routes_to_nvcc_or_e601(cache_dir, monkeypatch):
    def absent():
        raise nvrtc_mod.NvrtcUnavailable("libnvrtc could not be loaded (test)")

    monkeypatch.setattr(nvrtc_mod, "library", absent)
    result = compile_units([unit("nolib")], "sm_90")[0]
    assert result.compiler == "nvcc" and result.fallback == "nvrtc-unavailable"
    with pytest.raises(UserError) as info:
        compile_units([unit("nolib")], "sm_90", fallback="none")
    assert info.value.diagnostics[0].code == "E601"


def test_log_file_and_stderr_sinks(cache_dir, tmp_path, monkeypatch, capsys):
    log_file = tmp_path / "compile.jsonl"
    monkeypatch.setenv("CUVIL_COMPILE_LOG", str(log_file))
    compile_units([unit("l1"), unit("l2")], "sm_90", workers=2)
    compile_units([unit("l1")], "sm_90")
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    seen = sorted((r["unit"], r["cache"]) for r in lines)
    assert seen == [("sum_l1", "hit-memory"), ("sum_l1", "miss"), ("sum_l2", "miss")]
    for record in lines:
        assert record["stage"] == "cubin" and record["arch"] == "sm_90" and record["kernels"] == ["block_sum"]
        assert record["compiler"] == "nvrtc" and record["compiler_version"] == nvrtc_mod.version()
        assert record["timestamp"].endswith("+00:00") and record["duration_ms"] >= 0
        assert len(record["key"]) == 64 and record["fallback"] is None and record["nvrtc_result"]["code"] == 0
    monkeypatch.setenv("CUVIL_COMPILE_LOG", "stderr")
    compile_units([unit("l2")], "sm_90")
    assert json.loads(capsys.readouterr().err)["cache"] == "hit-memory"


def test_progress_callback_and_printer(cache_dir, monkeypatch, capsys):
    seen = []
    units = [unit(f"p{i}") for i in range(3)]
    compile_units(units[:1], "sm_90")
    results = compile_units(units, "sm_90", workers=2, progress=lambda *args: seen.append(args))
    assert [r.unit for r in results] == units, "results come back in input order"
    assert [s[0] for s in seen] == [1, 2, 3] and {s[1] for s in seen} == {3}
    assert sorted(s[2] for s in seen) == [u.name for u in units]
    assert [s[3] for s in seen if s[2] == "sum_p0"] == [True]
    compile_units([unit("p0")], "sm_90", progress=stderr_progress)
    assert capsys.readouterr().err == "", "fast, non-terminal runs stay quiet"
    monkeypatch.setattr(service._progress_state, "started", time.perf_counter() - 5)
    stderr_progress(3, 8, "forward_k1", False)
    assert capsys.readouterr().err.startswith("[3/8] compiled forward_k1 (")


_DATA = b"x" * (16 << 20)


def _busy_hashing(rounds: int) -> None:
    for _ in range(rounds):
        digest = hashlib.sha256()
        digest.update(_DATA)  # update() on large data releases the GIL, like NVRTC


def _two_cores_free() -> bool:
    """Whether two threads really run at once right now (shared machines often cannot); best of 3."""
    ratios = []
    with ThreadPoolExecutor(2) as pool:
        for _ in range(3):
            started = time.perf_counter()
            _busy_hashing(8)
            serial = time.perf_counter() - started
            started = time.perf_counter()
            list(pool.map(_busy_hashing, [4, 4]))
            ratios.append((time.perf_counter() - started) / serial)
    return min(ratios) < 0.7


def _timed_batch(tag: str, workers: int) -> float:
    started = time.perf_counter()
    compile_units([heavy(f"{tag}_{i}") for i in range(6)], "sm_90", workers=workers)
    return time.perf_counter() - started


def heavy(tag: str) -> CompileUnit:
    body = f"""
extern "C" __global__ void heavy(const float* __restrict__ x, float* __restrict__ y) {{
  float a = x[threadIdx.x], b = x[threadIdx.x + 1];
  #pragma unroll
  for (int k = 0; k < 250; ++k) {{ a = fmaf(a, b, (float)k); b = __fdividef(b, a + 1.0f) + a * 0.5f; }}
  y[threadIdx.x] = a + b; /* {tag} */
}}"""
    return CompileUnit(f"heavy_{tag}", body, ("heavy",))


@pytest.mark.slow
def test_parallel_compile_beats_serial(cache_dir, monkeypatch):
    if not _two_cores_free():
        pytest.skip("fewer than two idle cores right now (the machine is shared or has one core)")
    monkeypatch.setenv("CUVIL_DISABLE_CACHE", "1")
    compile_units([heavy("warm")], "sm_90")
    serial, parallel = [], []
    for round_ in range(2):  # interleaved, best of two: both see the same background load
        serial.append(_timed_batch(f"s{round_}", workers=1))
        parallel.append(_timed_batch(f"p{round_}", workers=2))
    verdict = f"parallel {min(parallel):.2f} s vs serial {min(serial):.2f} s"
    if min(parallel) >= min(serial) * 0.9 and not _two_cores_free():
        pytest.skip(f"another process took a core during the measurement ({verdict})")
    assert min(parallel) < min(serial) * 0.9, verdict


def test_compiles_overlap_in_threads(cache_dir, monkeypatch):
    """Structural check that holds on a loaded machine: two NVRTC compiles are in flight at once."""
    in_flight, peak, lock = [0], [0], threading.Lock()
    real = nvrtc_mod.compile_cubin

    def tracking(*args):
        with lock:
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
        try:
            time.sleep(0.05)
            return real(*args)
        finally:
            with lock:
                in_flight[0] -= 1

    monkeypatch.setattr(nvrtc_mod, "compile_cubin", tracking)
    compile_units([unit(f"o{i}") for i in range(4)], "sm_90", workers=2)
    assert peak[0] == 2


def test_doctor_rows_and_render(cache_dir):
    compile_units([unit("doc")], "sm_90")
    rows = doctor()
    checks = {row.check: row for row in rows}
    assert {"CUDA driver", "NVRTC", "nvcc", "CuPy", "cuobjdump", "compile cache"} <= set(checks)
    assert all(row.status in {"ok", "warn", "fail"} for row in rows)
    assert checks["NVRTC"].status == "ok" and "sm_90" in checks["NVRTC"].detail
    assert checks["compile cache"].value == str(cache_dir) and "1 entries" in checks["compile cache"].detail
    text = render_doctor(rows)
    assert text.splitlines()[0].startswith("check") and "NVRTC" in text


WGMMA_FENCE = r"""
extern "C" __global__ void fenced(float* y) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");  // sm_90a only
  y[threadIdx.x] = 1.0f;
}
"""


def test_a_unit_may_name_its_own_arch(cache_dir):
    """A kernel that needs arch-specific features (wgmma) carries ``-arch=sm_90a`` in its options:
    it replaces the batch's ``-arch`` (one ``-arch`` reaches the compiler), keys the cache apart,
    and the result says what it was built for; the other units keep the batch's arch."""
    own = CompileUnit("fenced", WGMMA_FENCE, ("fenced",), ("-arch=sm_90a",))
    plain = CompileUnit("fenced_plain", WGMMA_FENCE, ("fenced",))
    plan = service._plan("sm_90", "nvrtc", "none", False, ())
    options = plan.options_for(own)
    assert [o for o in options if o.startswith("-arch=")] == ["-arch=sm_90a"] and options[0] == "-arch=sm_90a"
    assert plan.options_for(plain)[0] == "-arch=sm_90"
    assert plan.key_for(own) != plan.key_for(CompileUnit("fenced", WGMMA_FENCE, ("fenced",), ("-arch=sm_90",)))
    built, other = compile_units([own, unit("beside")], "sm_90", fallback="none")
    assert built.arch == "sm_90a" and built.cubin.startswith(b"\x7fELF") and other.arch == "sm_90"
    with pytest.raises(UserError) as info:  # without it, wgmma does not build for plain sm_90
        compile_units([plain], "sm_90", fallback="none")
    assert info.value.diagnostics[0].code == "E602"
    with pytest.raises(UserError) as info:
        compile_units([CompileUnit("fenced_bad", WGMMA_FENCE, ("fenced",), ("-arch=sm_9x",))], "sm_90")
    assert info.value.diagnostics[0].code == "E504"
