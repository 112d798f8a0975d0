"""The quick numba start (issue 5): deferred modules, the paused collector, the direct kernel call.

What must hold whatever the timing: a cold process, a warm one, and a warm one that must then
compile a kernel it has never seen (a miss after hits) all work and give the same bits; the
deferred modules run exactly once, when first used; the collector's state is restored.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import types
import uuid
from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl.runtime import numba_light

ROOT = Path(__file__).resolve().parents[2]

# -- whole processes ---------------------------------------------------------------------------

SECOND = "pipeline scaled_rows(x: f32[R, C], s: f32) -> y: f32[R, C] { y = softmax(x * s) + s }\n"

CHILD = r"""
import gc, json, sys
before = {m: m in sys.modules for m in ("importlib.metadata", "yaml", "numba")}
import numpy as np
import cuvil_dsl
from cuvil_dsl.runtime import numba_light
if "--unknown-numba" in sys.argv:  # initialize_nrt meets a numba it was not written for
    numba_light._NRT_VERSIONS = ("no such version",)

def state():
    return {m: (m in sys.modules and numba_light.is_deferred(sys.modules[m])) for m in numba_light.DEFERRED}

out = {"before": before, "runs": []}
for which in sys.argv[2].split(","):
    if which == "softmax":
        compiled = cuvil_dsl.load(sys.argv[1] + "/specs/softmax.cuvil").compile(backend="cpu")
        x = (np.arange(5 * 96, dtype=np.float32).reshape(5, 96) / 7 - 20).astype(np.float16)
        y = compiled(x)
        again = compiled(x)
        bits = y.view(np.uint16).tolist()
    else:
        compiled = cuvil_dsl.load(sys.argv[3]).compile(backend="cpu")
        x = np.linspace(-3, 3, 6 * 40, dtype=np.float32).reshape(6, 40)
        y = compiled(x, s=np.float32(1.75))
        again = compiled(x, s=1.75)
        bits = y.view(np.uint32).tolist()
    assert np.array_equal(y, again, equal_nan=True)
    executor = next(iter(compiled.executors.values()))
    out["runs"].append({"which": which, "bits": bits, "hits": [k.cache_hit for k in executor.kernel_reports()],
                        "deferred": state(), "gc": gc.isenabled()})
import numba
out["threading_layer"] = numba.threading_layer()
out["frozen"] = gc.get_freeze_count()
# the deferred modules still work when something uses them at last
import yaml
from importlib import metadata
out["yaml"] = yaml.safe_load("a: [1, 2]")
out["numpy_version"] = metadata.version("numpy") == np.__version__
out["after_use"] = state()
out["nrt"] = numba_light.nrt_source
print(json.dumps(out))
"""


def _process(cache: Path, which: str, second: Path, *flags: str) -> dict:
    env = {**os.environ, "CUVIL_CACHE_DIR": str(cache)}
    env.pop("CUVIL_DISABLE_CACHE", None)
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), which, str(second), *flags], env=env,
                          capture_output=True, text=True, cwd=cache.parent)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_cold_warm_and_a_miss_after_hits_give_the_same_bits(tmp_path):
    second = tmp_path / "scaled.cuvil"
    second.write_text(SECOND)
    shared, other = tmp_path / "shared", tmp_path / "other"

    cold = _process(shared, "softmax", second)  # empty cache: compiles (a parallel kernel)
    warm_then_miss = _process(shared, "softmax,scaled", second)  # loads softmax, then must compile
    cold_scaled = _process(other, "scaled", second)  # the new kernel, compiled in a process of its own
    warm_both = _process(shared, "softmax,scaled", second)  # both from the cache now

    (c,) = cold["runs"]
    s1, s2 = warm_then_miss["runs"]
    (o,) = cold_scaled["runs"]
    w1, w2 = warm_both["runs"]
    assert [c["hits"], s1["hits"], s2["hits"], o["hits"], w1["hits"], w2["hits"]] == \
        [[False], [True], [False], [False], [True], [True]]
    assert c["bits"] == s1["bits"] == w1["bits"]
    assert o["bits"] == s2["bits"] == w2["bits"]

    for process in (cold, warm_then_miss, cold_scaled, warm_both):
        assert all(run["gc"] for run in process["runs"])  # the collector is back on after every build
        assert process["frozen"] == 0  # nothing left frozen
        assert process["threading_layer"] in ("tbb", "omp", "workqueue")
        assert process["yaml"] == {"a": [1, 2]} and process["numpy_version"]
        assert not any(process["after_use"].values())  # ran when used

    # numba's runtime: compiled once, then from the cache (a compile links the cached one: same bits above)
    nrt_sources = [p["nrt"] for p in (cold, warm_then_miss, cold_scaled, warm_both)]
    assert nrt_sources == ["compiled", "cache", "compiled", "cache"]
    (nrt,) = (shared / "numba").glob(numba_light.NRT_PREFIX + "*")
    good = nrt.read_bytes()
    nrt.write_bytes(good[:-9] + b"truncated")  # a damaged file is compiled again, and replaced
    damaged = _process(shared, "softmax", second)
    assert damaged["nrt"] == "compiled" and damaged["runs"][0]["bits"] == c["bits"] and nrt.read_bytes() == good
    unknown = _process(shared, "softmax", second, "--unknown-numba")  # numba initialises its runtime itself
    assert unknown["nrt"] == "" and unknown["runs"][0]["bits"] == c["bits"] and unknown["runs"][0]["hits"] == [True]

    fresh = {m: not was for m, was in warm_then_miss["before"].items()}  # not imported at interpreter start
    if fresh["numba"]:
        # a load from the cache never runs them; a compile scans numba's entry points
        assert s1["deferred"]["importlib.metadata"] == fresh["importlib.metadata"]
        assert s1["deferred"]["yaml"] == fresh["yaml"] == w2["deferred"]["yaml"]
        assert not s2["deferred"]["importlib.metadata"] and not c["deferred"]["importlib.metadata"]


# -- deferred modules ---------------------------------------------------------------------------


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """A package on sys.path whose code counts its runs, with a submodule; removed afterwards."""
    name = f"cvl_probe_{uuid.uuid4().hex[:8]}"
    package = tmp_path / name
    package.mkdir()
    counter = types.ModuleType(name + "_counter")
    counter.runs = 0
    monkeypatch.setitem(sys.modules, counter.__name__, counter)
    (package / "__init__.py").write_text(textwrap.dedent(f"""
        import sys, time
        import {counter.__name__} as counter
        counter.started = True
        time.sleep(counter.delay if hasattr(counter, "delay") else 0)
        if getattr(counter, "fail", False):
            raise RuntimeError("probe failed")
        counter.runs += 1
        VALUE = 42
        sys.modules[__name__].SELF = sys.modules[__name__].VALUE  # its own code reads and sets it freely
    """))
    (package / "sub.py").write_text("SUB = 7\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name, counter
    for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[key]


def test_a_deferred_module_runs_once_at_first_use(probe):
    name, counter = probe
    assert numba_light._defer(name)
    module = sys.modules[name]
    assert numba_light.is_deferred(module) and counter.runs == 0
    exec(f"import {name}")  # what numba does: the statement binds it, nothing runs
    assert importlib.import_module(name) is module and importlib.util.find_spec(name).name == name
    assert counter.runs == 0 and numba_light.is_deferred(module)
    namespace: dict = {}
    exec(f"from {name} import VALUE", namespace)
    assert namespace["VALUE"] == 42 and counter.runs == 1 and not numba_light.is_deferred(module)
    assert module.SELF == 42 and type(module) is types.ModuleType
    exec(f"from {name} import sub", namespace)
    assert namespace["sub"].SUB == 7 and counter.runs == 1
    assert not numba_light._defer(name)  # imported: left alone


def test_a_submodule_import_runs_the_deferred_package_first(probe):
    name, counter = probe
    assert numba_light._defer(name)
    sub = importlib.import_module(f"{name}.sub")
    assert sub.SUB == 7 and counter.runs == 1 and sys.modules[name].VALUE == 42


def test_threads_wait_for_the_one_run(probe):
    name, counter = probe
    counter.delay = 0.2
    assert numba_light._defer(name)
    module = sys.modules[name]
    seen: list = []
    threads = [threading.Thread(target=lambda: seen.append(module.VALUE)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [42] * 6 and counter.runs == 1


def test_an_import_meanwhile_waits_for_the_run(probe):
    name, counter = probe
    counter.delay = 0.3
    assert numba_light._defer(name)
    module = sys.modules[name]
    seen: list = []
    runner = threading.Thread(target=lambda: seen.append(module.VALUE))
    runner.start()
    while not counter.__dict__.get("started") and runner.is_alive():
        threading.Event().wait(0.01)
    sub = importlib.import_module(f"{name}.sub")  # needs the package's __path__: waits for the run
    runner.join()
    assert sub.SUB == 7 and seen == [42] and counter.runs == 1


def test_a_failing_deferred_module_fails_its_first_user_and_leaves_sys_modules(probe):
    name, counter = probe
    counter.fail = True
    assert numba_light._defer(name)
    module = sys.modules[name]
    with pytest.raises(RuntimeError, match="probe failed"):
        module.VALUE
    assert name not in sys.modules
    with pytest.raises(RuntimeError, match="probe failed"):  # a new import runs it again, as usual
        importlib.import_module(name)
    counter.fail = False
    sys.modules.pop(name, None)
    assert importlib.import_module(name).VALUE == 42


def test_only_plain_source_modules_are_deferred(monkeypatch):
    assert not numba_light._defer("sys")  # imported already
    assert not numba_light._defer("_cvl_no_such_module")
    assert not numba_light._defer("_cvl_no_such_package.sub")  # its parent is never imported here
    if "_json" not in sys.modules:
        assert not numba_light._defer("_json")  # an extension module
    monkeypatch.setitem(sys.modules, "numba", sys.modules.get("numba") or types.ModuleType("numba"))
    assert numba_light.defer_modules() == []  # numba imported: nothing left to save


# -- the collector ------------------------------------------------------------------------------


def test_the_collector_is_paused_and_restored(monkeypatch):
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    with numba_light.gc_paused():
        assert not gc.isenabled()
        with numba_light.gc_paused():
            kept = [object()]
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    if frozen == 0:
        assert any(o is kept for o in gc.get_objects(generation=2))  # promoted, not frozen

    gc.disable()
    try:
        with numba_light.gc_paused():
            pass
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        gc.enable()

    with pytest.raises(ValueError):
        with numba_light.gc_paused():
            raise ValueError
    assert gc.isenabled()


def test_a_miss_resumes_the_collector_at_once():
    with numba_light.gc_paused():
        with numba_light.gc_paused():
            numba_light.resume_gc()  # every pause of this thread ends
            assert gc.isenabled()
        assert gc.isenabled()
    assert gc.isenabled()


def test_what_others_froze_stays_frozen():
    if gc.get_freeze_count():
        pytest.skip("this process froze objects already")
    sentinel = [object()]  # tracked by the collector until frozen
    gc.freeze()
    try:
        with numba_light.gc_paused():
            pass
        # still frozen: in no generation. (Not the freeze count: another thread of the process may free frozen
        # objects meanwhile, which lowers it.)
        assert gc.get_freeze_count() and gc.isenabled()
        assert not any(o is sentinel for o in gc.get_objects())
    finally:
        gc.unfreeze()
    assert any(o is sentinel for o in gc.get_objects())  # (the test can tell: unfrozen, it is in a generation)


def test_an_unknown_numba_never_compiles_with_the_collector_paused(monkeypatch):
    from numba.core import caching

    from cuvil_dsl.runtime import cpu_modules

    monkeypatch.setattr(cpu_modules, "_light", False)
    monkeypatch.delattr(caching.Cache, "_load_overload")
    monkeypatch.setattr(caching.Cache, "load_overload", caching.Cache.load_overload)
    with numba_light.gc_paused():
        cpu_modules._load_caches_lightly()
        assert gc.isenabled()


# -- the direct kernel call ------------------------------------------------------------------------


def test_the_compiled_function_is_called_only_for_exact_argument_types():
    import numba

    from cuvil_dsl.runtime.cpu_executor import _compiled_entry

    @numba.njit("void(uint16[::1], float32[::1], float32)")
    def kernel(bits, out, scale):
        for i in range(bits.size):
            out[i] = bits[i] * scale

    (overload,) = kernel.overloads.values()
    bits, out = np.arange(8, dtype=np.uint16), np.zeros(8, np.float32)
    entry = _compiled_entry(kernel, (bits, out, np.float32(0.5)))
    assert entry is overload.entry_point
    entry(bits, out, np.float32(0.5))
    expected = out.copy()
    kernel(bits, out, np.float32(0.5))
    assert np.array_equal(out, expected) and out[3] == 1.5

    class Sub(np.ndarray):
        pass

    readonly = bits.copy()
    readonly.flags.writeable = False
    for args in [(bits.astype(np.int16), out, np.float32(1)),  # another dtype
                 (np.arange(16, dtype=np.uint16)[::2], out, np.float32(1)),  # not contiguous
                 (readonly, out, np.float32(1)),  # read-only
                 (bits.view(Sub), out, np.float32(1)),  # a subclass
                 (bits, out, 0.5), (bits, out, np.float64(0.5)),  # scalars the dispatcher converts
                 (bits, out)]:  # too few
        assert _compiled_entry(kernel, args) is kernel, args
    lazy = numba.njit(lambda a: a)  # no overload yet
    assert _compiled_entry(lazy, (bits,)) is lazy
