"""The compile service: units in, CUBIN plus a ptxas report per kernel out, cached and in parallel.

Order of work for one unit: in-memory LRU → (single flight per key within the process) →
disk entry → (``flock`` per key across processes) → disk entry again → compile → store.
Compiles run on a thread pool because NVRTC releases the GIL; nothing global is held
while a compile runs, only a per-key future that other requesters of the same key wait on.

Routing on a miss: NVRTC, unless the breaker is open or libnvrtc is absent. An NVRTC
failure of kind ``resource`` (out of memory, internal error, ptxas "too much shared data",
…) is retried with nvcc unless ``fallback="none"``; a source error never is, because nvcc
would say the same thing 0.3 s later. A fallback result is stored under the request's key,
so the next request gets it from the cache without touching NVRTC again.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Literal

from cuvil_dsl import knobs
from cuvil_dsl.compile import log as clog
from cuvil_dsl.compile import nvcc, nvrtc
from cuvil_dsl.compile.breaker import BREAKER
from cuvil_dsl.compile.cache import MEMORY, DiskCache, Durations, cache_key, disk_cache
from cuvil_dsl.compile.failures import Attempt, compile_error
from cuvil_dsl.compile.ptxas import parse_report
from cuvil_dsl.compile.units import (BuildArtifact, CacheOutcome, CompiledUnit, CompileUnit, Compiler,
                                     estimated_compile_ms)
from cuvil_dsl.diagnostics import InternalError, Span, UserError, error

Progress = Callable[[int, int, str, bool], None]
_TARGET = Span.whole_file("<compile>")


@dataclass(frozen=True)
class _Plan:
    """Everything about one ``compile_units`` call that does not depend on the unit."""

    arch: str
    compiler: Compiler
    key_version: str  # what identifies the compiler build in the key (full ``nvcc --version`` text)
    version: str  # what people read: "13.0" or "13.0.88"
    fallback: Literal["nvcc", "none"]
    route_reason: str | None
    options: tuple[str, ...]  # everything but ``-arch=``, which is per unit (see :func:`unit_arch`)
    timeout: float
    disk: DiskCache | None
    supported: tuple[int, ...] = ()
    who: str = ""

    def arch_for(self, unit: CompileUnit) -> str:
        return unit_arch(unit, self.arch)

    def options_for(self, unit: CompileUnit) -> tuple[str, ...]:
        own = tuple(o for o in unit.options if not o.startswith(ARCH_OPTION))
        return (f"{ARCH_OPTION}{self.arch_for(unit)}",) + self.options + own

    def key_for(self, unit: CompileUnit) -> str:
        return cache_key(unit, self.arch_for(unit), self.compiler, self.key_version, self.options_for(unit))


ARCH_OPTION = "-arch="


def unit_arch(unit: CompileUnit, arch: str) -> str:
    """The arch ``unit`` is built for: the batch's, unless the unit names its own with an
    ``-arch=`` option. A kernel that needs arch-specific features (wgmma: ``sm_90a``) does so;
    its option replaces the batch's ``-arch`` (a CUBIN for sm_90a loads on every sm_90 device),
    and the arch is part of its cache key like any other."""
    return _own_arch(unit.options) or arch


@functools.lru_cache(maxsize=1024)
def _own_arch(options: tuple[str, ...]) -> str | None:
    own = [o[len(ARCH_OPTION):] for o in options if o.startswith(ARCH_OPTION)]
    return own[-1] if own else None


def _unavailable(message: str, hint: str) -> UserError:
    return UserError([error("E601", message, _TARGET, hint)])


def _validate_arch(arch: str, supported: tuple[int, ...], who: str) -> None:
    """E504 unless ``arch`` is ``sm_XX`` (``a``/``f`` suffix allowed iff ``sm_XX`` is) and ``who`` builds it."""
    parsed = nvrtc.parse_arch(arch)
    if parsed is not None and parsed[0] in supported:
        return
    listing = ", ".join(f"sm_{a}" for a in supported)
    if parsed is None:
        raise UserError([error("E504", f"{arch!r} is not a GPU architecture; expected sm_<number> such as sm_90",
                               _TARGET, f"{who} builds: {listing}")])
    raise UserError([error("E504", f"{who} cannot build for {arch}", _TARGET,
                           f"{who} builds: {listing} (CUDA 13 dropped sm_70 and older)")])


def _plan(arch: str, compiler: str, fallback: str, fast_math: bool, options: Iterable[str]) -> _Plan:
    if compiler not in ("nvrtc", "nvcc"):
        raise ValueError(f"compiler must be 'nvrtc' or 'nvcc', not {compiler!r}")
    if fallback not in ("nvcc", "none"):
        raise ValueError(f"fallback must be 'nvcc' or 'none', not {fallback!r}")
    route_reason = None
    if compiler == "nvrtc":
        try:
            nvrtc.library()
        except nvrtc.NvrtcUnavailable as exc:
            if fallback == "none":
                raise _unavailable(str(exc), "or pass fallback='nvcc' to build with nvcc") from None
            route_reason = "nvrtc-unavailable"
            compiler = "nvcc"
    if compiler == "nvrtc":
        key_version = version = nvrtc.version()
        supported = nvrtc.supported_archs()
        who = f"NVRTC {version}"
    else:
        try:
            path = nvcc.find_nvcc()
            key_version, version, supported = nvcc.version_text(path), nvcc.version(path), nvcc.supported_archs(path)
        except nvcc.NvccUnavailable as exc:
            hint = "install nvidia-cuda-nvrtc==13.0.* or a CUDA toolkit"
            raise _unavailable(f"no compiler available: {exc}", hint) from None
        who = f"nvcc {version}"
    _validate_arch(arch, supported, who)
    base = ["-std=c++17", "-Xptxas=-v"]
    headers = nvrtc.header_dir()
    if headers:
        base.append(f"-I{headers}")
    if fast_math:
        base.append("--use_fast_math")
    if knobs.values.lineinfo:
        base.append("-lineinfo")
    return _Plan(arch, compiler, key_version, version, fallback, route_reason,  # type: ignore[arg-type]
                 tuple(base) + tuple(options), knobs.values.compile_timeout, disk_cache(), supported, who)


class _SingleFlight:
    """One compile per key at a time in this process; later askers wait for the first one's result."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[str, Future] = {}

    def run(
        self, key: str, work: Callable[[], tuple[BuildArtifact, CacheOutcome]]
    ) -> tuple[BuildArtifact, CacheOutcome]:
        with self._lock:
            flight = self._flights.get(key)
            leader = flight is None
            if leader:
                flight = self._flights[key] = Future()
        if not leader:
            artifact, _ = flight.result()
            return artifact, "hit-memory"  # served from another thread's fresh result
        try:
            result = work()
        except BaseException as exc:
            flight.set_exception(exc)
            raise
        else:
            flight.set_result(result)
            return result
        finally:
            with self._lock:
                del self._flights[key]


_FLIGHTS = _SingleFlight()


_abandoned_lock = threading.Lock()
_abandoned: list[threading.Thread] = []

# How long a timed-out NVRTC compile may take to stop once cancelled. NVRTC polls its flow
# callback a few times a second but not in every phase: a cancel took up to 2.5 s here.
CANCEL_GRACE = 10.0


class CompileTimeout(concurrent.futures.TimeoutError):
    """An NVRTC compile ran past CUVIL_COMPILE_TIMEOUT; ``stopped``: it was cancelled and has ended."""

    def __init__(self, stopped: bool):
        self.stopped = stopped
        super().__init__("cancelled" if stopped else "abandoned")


def _with_timeout(work: Callable[[nvrtc.Cancel], tuple[bytes, str]], timeout: float) -> tuple[bytes, str]:
    """Run an NVRTC compile on its own thread and wait at most ``timeout`` seconds.

    Past the limit the compile is cancelled through NVRTC's flow callback
    (:class:`nvrtc.Cancel`): the thread destroys its program and ends, normally within a
    second or two, and :class:`CompileTimeout` (``stopped=True``) is raised once it has; its
    result, even a late success, is dropped. A compile that cannot be cancelled (NVRTC older
    than 12.8, the callback not bound) or that does not stop within :data:`CANCEL_GRACE` is
    abandoned instead, as before flow callbacks: its thread keeps one core busy until NVRTC
    returns. Such a thread must not still be inside libnvrtc when the process exits
    (interpreter teardown and libnvrtc's destructors would run beside it: the process aborted
    with "munmap_chunk(): invalid pointer" instead of exiting 2), so abandoned threads are
    recorded: at exit the interpreter waits for them (:func:`_join_abandoned_at_exit`), and the
    command line, which has already reported the timeout, ends the process at once instead
    (:func:`abandoned_compiles`).
    """
    box: Future = Future()
    cancel = nvrtc.Cancel()

    def run() -> None:
        try:
            box.set_result(work(cancel))
        except BaseException as exc:
            box.set_exception(exc)

    thread = threading.Thread(target=run, name="cuvil-nvrtc", daemon=True)
    thread.start()
    try:
        concurrent.futures.wait([box], timeout=timeout)
    except BaseException:  # KeyboardInterrupt while waiting: stop the compile too
        cancel.set()
        raise
    if box.done():
        return box.result()
    cancel.set()
    if nvrtc.flow_callbacks():
        thread.join(CANCEL_GRACE)
        if not thread.is_alive():
            raise CompileTimeout(stopped=True)
    with _abandoned_lock:
        if not _abandoned:
            atexit.register(_join_abandoned_at_exit)
        _abandoned.append(thread)
    raise CompileTimeout(stopped=False)


def abandoned_compiles() -> list[threading.Thread]:
    """NVRTC compiles that ran past CUVIL_COMPILE_TIMEOUT and are still running."""
    with _abandoned_lock:
        _abandoned[:] = [t for t in _abandoned if t.is_alive()]
        return list(_abandoned)


def _join_abandoned_at_exit() -> None:
    """Wait for abandoned NVRTC compiles before the interpreter tears down (see _with_timeout)."""
    running = abandoned_compiles()
    if running:
        print(f"cuvil-dsl: waiting for {len(running)} abandoned NVRTC compile(s) to finish before exiting",
              file=sys.stderr)
    for thread in running:
        thread.join()


def _nvrtc_fields(code: int | None) -> dict | None:
    if code is None:
        return None
    info = nvrtc.result_info(code)
    return {"code": info.code, "name": info.name, "meaning": info.meaning}


def _record(unit: CompileUnit, plan: _Plan, key: str, duration_ms: float, cache: str, compiler: str,
            version: str, nvrtc_code: int | None, fallback: str | None, failure: str | None = None) -> None:
    if not clog.wanted():
        return
    clog.emit({
        "stage": "cubin", "unit": unit.name, "kernels": list(unit.kernels), "compiler": compiler,
        "compiler_version": version, "arch": plan.arch_for(unit), "duration_ms": round(duration_ms, 3), "cache": cache,
        "nvrtc_result": _nvrtc_fields(nvrtc_code), "fallback": fallback, "key": key, "error": failure,
    })


def _artifact(unit: CompileUnit, cubin: bytes, log: str, compiler: Compiler, version: str, started: float,
              nvrtc_code: int | None, fallback: str | None) -> BuildArtifact:
    resources = parse_report(log)
    missing = [k for k in unit.kernels if k not in resources]
    if missing:
        absent = [k for k in missing if f"\0{k}\0".encode() not in cubin]
        raise InternalError(
            f"unit {unit.name!r} declares kernels {absent} that the compiled CUBIN does not contain; "
            "the code generator and the unit disagree" if absent else
            f"{compiler} printed no ptxas report for kernels {missing} of unit {unit.name!r}; "
            "its log was:\n" + log
        )
    return BuildArtifact(cubin, {k: resources[k] for k in unit.kernels}, log, compiler, version,
                         (time.perf_counter() - started) * 1e3, nvrtc_code, fallback)


def _build(unit: CompileUnit, key: str, plan: _Plan) -> BuildArtifact:
    """Compile on a miss, falling back to nvcc when that is allowed and useful; raises E602."""
    options = plan.options_for(unit)
    program = f"{unit.name}.cu"
    started = time.perf_counter()
    attempts: list[Attempt] = []
    nvrtc_code: int | None = None
    reason = plan.route_reason
    failed_dir = plan.disk.failed_dir if plan.disk else None
    use_nvrtc = plan.compiler == "nvrtc"
    if use_nvrtc and plan.fallback == "nvcc" and BREAKER.is_open():
        use_nvrtc, reason = False, "breaker-open"
    try:
        if use_nvrtc:
            try:
                cubin, text = _with_timeout(
                    lambda cancel: nvrtc.compile_cubin(unit.source, program, options, cancel), plan.timeout)
                return _artifact(unit, cubin, text, "nvrtc", plan.version, started, 0, None)
            except CompileTimeout as late:
                nvrtc_code = 16 if late.stopped else None
                fate = ("it was cancelled" if late.stopped else
                        "it could not be cancelled and was abandoned: " + (nvrtc.cannot_cancel_reason() or
                                                                           f"it did not stop within {CANCEL_GRACE:g} s"))
                outcome = f"did not finish within {plan.timeout:g} s (CUVIL_COMPILE_TIMEOUT); {fate}"
                attempts.append(Attempt("nvrtc", plan.version, outcome, ""))
                raise compile_error(unit, plan.arch_for(unit), key, options, attempts, failed_dir,
                                    "raise CUVIL_COMPILE_TIMEOUT or split the kernel") from None
            except nvrtc.NvrtcFailure as failure:
                nvrtc_code = failure.info.code
                outcome = f"{failure} ({failure.info.action})"
                attempts.append(Attempt("nvrtc", plan.version, outcome, failure.log))
                if failure.kind == "api":
                    raise InternalError(f"NVRTC rejected cuvil-dsl's call for unit {unit.name!r}: {outcome}") from None
                if failure.kind == "source" or plan.fallback == "none":
                    raise compile_error(unit, plan.arch_for(unit), key, options, attempts, failed_dir) from None
                if failure.nvrtc_unhealthy:
                    BREAKER.record_failure()
                    reason = f"nvrtc {failure.info.name}"
                else:
                    reason = "ptxas resource error: " + failure.ptxas_resource_errors[0]
        return _build_nvcc(unit, key, plan, options, attempts, started, nvrtc_code, reason, failed_dir)
    except UserError:
        clog.COUNTERS.add("failures")
        last = attempts[-1] if attempts else Attempt(plan.compiler, plan.version, "", "")
        _record(unit, plan, key, (time.perf_counter() - started) * 1e3, "miss", last.compiler, last.version,
                nvrtc_code, reason, "E602")
        raise


def _build_nvcc(unit: CompileUnit, key: str, plan: _Plan, options: tuple[str, ...], attempts: list[Attempt],
                started: float, nvrtc_code: int | None, reason: str | None, failed_dir: Path | None) -> BuildArtifact:
    try:
        path = nvcc.find_nvcc()
        version = nvcc.version(path)
    except nvcc.NvccUnavailable as exc:
        attempts.append(Attempt("nvcc", "", f"fallback impossible: {exc}", ""))
        raise compile_error(unit, plan.arch_for(unit), key, options, attempts, failed_dir) from None
    try:
        cubin, text = nvcc.compile_cubin(unit.source, f"{unit.name}.cu", options, plan.timeout)
    except nvcc.NvccFailure as failure:
        attempts.append(Attempt("nvcc", version, str(failure), failure.log))
        hint = "raise CUVIL_COMPILE_TIMEOUT or split the kernel" if failure.timed_out else None
        raise compile_error(unit, plan.arch_for(unit), key, options, attempts, failed_dir, hint) from None
    return _artifact(unit, cubin, text, "nvcc", version, started, nvrtc_code, reason)


def _load_or_build(unit: CompileUnit, key: str, plan: _Plan) -> tuple[BuildArtifact, CacheOutcome]:
    disk = plan.disk
    if disk is not None:
        found = disk.load(key)
        if found is None:
            with disk.key_lock(key, plan.timeout):
                found = disk.load(key)  # another process may have built it while we waited
                if found is None:
                    artifact = _build(unit, key, plan)
                    disk.store(key, artifact)
                    MEMORY.put(key, artifact)
                    return artifact, "miss"
        MEMORY.put(key, found)
        return found, "hit-disk"
    artifact = _build(unit, key, plan)
    MEMORY.put(key, artifact)
    return artifact, "miss"


def _compile_one(unit: CompileUnit, plan: _Plan, key: str | None = None) -> CompiledUnit:
    started = time.perf_counter()
    key = key or plan.key_for(unit)
    artifact = MEMORY.get(key)
    outcome: CacheOutcome = "hit-memory"
    if artifact is None:
        artifact, outcome = _FLIGHTS.run(key, lambda: _load_or_build(unit, key, plan))
    elapsed = (time.perf_counter() - started) * 1e3
    if outcome == "miss":
        clog.COUNTERS.add("compiles", artifact.compile_ms)
        if artifact.fallback:
            clog.COUNTERS.add("fallbacks")
        _durations(plan).record(_duration_name(unit, plan), artifact.compile_ms, len(unit.source))
    else:
        clog.COUNTERS.add("memory_hits" if outcome == "hit-memory" else "disk_hits")
    _record(unit, plan, key, elapsed, outcome, artifact.compiler, artifact.compiler_version,
            artifact.nvrtc_result, artifact.fallback)
    return CompiledUnit(
        unit=unit, arch=plan.arch_for(unit), cubin=artifact.cubin, resources=dict(artifact.resources),
        compiler=artifact.compiler, compiler_version=artifact.compiler_version, cache_hit=outcome != "miss",
        compile_ms=elapsed, log=artifact.log, key=key, cache=outcome, fallback=artifact.fallback,
    )


_progress_state = threading.local()
_exit_lock = threading.Lock()
_exit_roots: set[Path] = set()


def _flush_counters_at_exit() -> None:
    with _exit_lock:
        roots = sorted(_exit_roots)
    for root in roots:
        clog.persist_counters(root)


def _persist_at_exit(root: Path) -> None:
    """Batches answered from memory skip the counters file (writing it costs more than the hits);
    their counts go out with the next batch that reads the disk, or at exit."""
    with _exit_lock:
        if not _exit_roots:
            atexit.register(_flush_counters_at_exit)
        _exit_roots.add(root)


_LOCAL_DURATIONS = Durations(None)  # compile times when there is no disk cache to keep them in


def _durations(plan: _Plan) -> Durations:
    return plan.disk.durations if plan.disk is not None else _LOCAL_DURATIONS


def _duration_name(unit: CompileUnit, plan: _Plan) -> str:
    return f"{plan.arch_for(unit)} {unit.name}"


def _longest_first(units: tuple[CompileUnit, ...], pending: list[int], keys: list[str], plan: _Plan) -> list[int]:
    """``pending`` (indexes into ``units``) in the order to start them: longest expected compile first.

    With more units than workers the last long compile to start bounds the batch, so it must
    not wait behind short ones (LPT scheduling). Expected time: the duration recorded for the
    same unit name and arch (:class:`Durations`) while its source length is within a factor 2
    of the one measured, else :func:`estimated_compile_ms` from the source (scaled to the
    recorded ones when a batch has both). A unit whose entry is already on disk is a load, not
    a compile, and goes last. Ties keep input order.
    """
    expected: dict[int, float] = {}
    guess: list[int] = []
    disk = plan.disk
    todo = [i for i in pending if disk is None or not os.path.isfile(disk.path_for(keys[i]))]
    recorded = _durations(plan).lookup([_duration_name(units[i], plan) for i in todo]) if todo else []
    for i, found in zip(todo, recorded):
        if found is not None and 0.5 <= len(units[i].source) / max(found[1], 1) <= 2:
            expected[i] = found[0]
        else:
            guess.append(i)
    if guess:
        scale = 1.0
        if expected:  # recorded times are this machine's (and this load's): put the estimates on their scale
            ratios = sorted(expected[i] / estimated_compile_ms(units[i].source) for i in expected)
            scale = ratios[len(ratios) // 2]
        for i in guess:
            expected[i] = estimated_compile_ms(units[i].source) * scale
    return sorted(pending, key=lambda i: -expected.get(i, 0.0))


_ENV_NAMES: tuple[str, ...] = ()


def _environment() -> tuple[str | None, ...]:
    """The environment a batch's all-hit answer depends on, read raw: every knob that goes into
    the cache key (``affects_binary``) and everything :func:`_plan` reads (the timeout, whose bad
    value is an error, and where the disk cache is, whose counters the hits add to). The log
    knob is not here: whether records are wanted is asked on every call."""
    global _ENV_NAMES
    if not _ENV_NAMES:
        binary = {k.env for k in knobs.all_knobs().values() if k.affects_binary}
        planned = {knobs.compile_timeout.env, knobs.disable_cache.env, knobs.cache_dir.env}
        _ENV_NAMES = (*sorted(binary | planned), "XDG_CACHE_HOME", "HOME")
    return tuple(map(os.environ.get, _ENV_NAMES))


def _answer(results: tuple[CompiledUnit, ...], units: tuple[CompileUnit, ...],
            progress: Progress | None) -> list[CompiledUnit]:
    """A batch that was answered from memory before, answered again: the same results, counted and
    reported as the all-hit path does (progress in input order)."""
    _progress_state.started = time.perf_counter()
    add = clog.COUNTERS.add
    for _ in results:
        add("memory_hits")
    if progress is not None:
        total = len(results)
        for done, (unit, result) in enumerate(zip(units, results), 1):
            _progress_state.last = result
            progress(done, total, unit.name, True)
    _progress_state.last = results[-1]
    return list(results)


def compile_units(
    units: Iterable[CompileUnit],
    arch: str,
    *,
    compiler: str = "nvrtc",
    fallback: str = "nvcc",
    fast_math: bool = False,
    options: Iterable[str] = (),
    workers: int | None = None,
    progress: Progress | None = None,
) -> list[CompiledUnit]:
    """Compile every unit for ``arch`` (``sm_90``); results come back in input order.

    Every unit is attempted; all E602 failures are raised together as one :class:`UserError`.
    A compile running past ``CUVIL_COMPILE_TIMEOUT`` is one of them (NVRTC's compile is
    cancelled through its flow callback, nvcc's process group killed). ``progress(done, total, unit_name, cache_hit)``
    is called on this thread after each unit.

    With more units to compile than workers, the longest expected compiles start first
    (:func:`_longest_first`). A call that repeats one whose units were all in memory gets the
    same :class:`CompiledUnit` objects back without planning or hashing again (see
    :meth:`MemoryCache.get_batch`); their ``compile_ms`` is that earlier hit's.
    """
    units = tuple(units)
    if not units:
        return []
    options = tuple(options)
    try:
        memo: tuple | None = (units, arch, compiler, fallback, fast_math, options, _environment())
        answer = MEMORY.get_batch(memo)
    except TypeError:  # something unhashable among the arguments: take the long way, which reports it
        memo = answer = None
    if answer is not None and not clog.wanted():
        return _answer(answer, units, progress)
    plan = _plan(arch, compiler, fallback, fast_math, options)
    for own in sorted({plan.arch_for(u) for u in units} - {arch}):
        _validate_arch(own, plan.supported, plan.who)
    results: list[CompiledUnit | None] = [None] * len(units)
    failures: list[UserError] = []
    _progress_state.started = time.perf_counter()
    done = 0
    touched_disk = False

    def finish(index: int, run: Callable[[], CompiledUnit]) -> None:
        nonlocal done, touched_disk
        try:
            results[index] = run()
            touched_disk |= results[index].cache != "hit-memory"
        except UserError as exc:
            failures.append(exc)
        done += 1
        _progress_state.last = results[index]
        if progress is not None:
            progress(done, len(units), units[index].name, results[index] is not None and results[index].cache_hit)

    keys = [plan.key_for(u) for u in units]
    pending = [i for i, k in enumerate(keys) if MEMORY.get(k) is None]
    for i in sorted(set(range(len(units))) - set(pending)):
        finish(i, lambda i=i: _compile_one(units[i], plan, keys[i]))
    try:
        count = min(workers or knobs.values.compile_workers, len(pending)) if pending else 0
        if count <= 1:
            for i in pending:
                finish(i, lambda i=i: _compile_one(units[i], plan, keys[i]))
        elif pending:
            order = _longest_first(units, pending, keys, plan) if len(pending) > count else pending
            with ThreadPoolExecutor(count, thread_name_prefix="cuvil-compile") as pool:
                futures = {pool.submit(_compile_one, units[i], plan, keys[i]): i for i in order}
                try:
                    for future in as_completed(futures):
                        finish(futures[future], future.result)
                except BaseException:
                    for future in futures:
                        future.cancel()
                    raise
    finally:
        if plan.disk is not None:
            if touched_disk or failures:
                clog.persist_counters(plan.disk.root)
                plan.disk.durations.save()
            else:
                _persist_at_exit(plan.disk.root)
    if failures:
        raise UserError([d for exc in failures for d in exc.diagnostics])
    answered = tuple(r for r in results if r is not None)
    # Remember only answers that came straight from memory (not a wait on another thread's
    # compile, whose compile_ms is that wait), and only NVRTC's: nvcc is found on PATH, which the
    # memo does not cover.
    if memo is not None and not pending and plan.compiler == "nvrtc" and all(r.cache == "hit-memory" for r in answered):
        MEMORY.put_batch(memo, tuple(keys), answered)
    return list(answered)


def emit_ptx(unit: CompileUnit, arch: str, *, fast_math: bool = False, options: Iterable[str] = ()) -> str:
    """PTX text of ``unit`` for ``arch``'s virtual arch, for ``cuvil-dsl compile --emit ptx``.

    For people to read only: what runs is always the CUBIN from :func:`compile_units`.
    """
    try:
        nvrtc.library()
    except nvrtc.NvrtcUnavailable as exc:
        raise _unavailable(str(exc), "PTX output needs NVRTC") from None
    version = nvrtc.version()
    arch = unit_arch(unit, arch)
    _validate_arch(arch, nvrtc.supported_archs(), f"NVRTC {version}")
    opts = [f"-arch={arch.replace('sm_', 'compute_', 1)}", "-std=c++17"]
    headers = nvrtc.header_dir()
    if headers:
        opts.append(f"-I{headers}")
    if fast_math:
        opts.append("--use_fast_math")
    if knobs.values.lineinfo:
        opts.append("-lineinfo")
    full = tuple(opts) + tuple(options) + tuple(o for o in unit.options if not o.startswith(ARCH_OPTION))
    try:
        ptx, _ = nvrtc.compile_ptx(unit.source, f"{unit.name}.cu", full)
    except nvrtc.NvrtcFailure as failure:
        disk = disk_cache()
        key = cache_key(unit, arch, "nvrtc-ptx", version, full)
        attempt = Attempt("nvrtc", version, f"{failure} ({failure.info.action})", failure.log)
        raise compile_error(unit, arch, key, full, [attempt], disk.failed_dir if disk else None) from None
    return ptx


def stderr_progress(done: int, total: int, unit_name: str, cache_hit: bool) -> None:
    """Default progress printer: ``[3/8] compiled forward_k1 (142 ms)``.

    Prints on a terminal, and elsewhere (CI logs) only once the batch has run for over a
    second, so fast, cached runs stay silent.
    """
    started = getattr(_progress_state, "started", None)
    elapsed = time.perf_counter() - started if started is not None else 0.0
    if not (sys.stderr.isatty() or elapsed > 1.0):
        return
    last: CompiledUnit | None = getattr(_progress_state, "last", None)
    if last is None:
        sys.stderr.write(f"[{done}/{total}] failed {unit_name}\n")
    else:
        verb = "cached" if cache_hit else "compiled"
        sys.stderr.write(f"[{done}/{total}] {verb} {unit_name} ({last.compile_ms:.0f} ms)\n")
    sys.stderr.flush()
