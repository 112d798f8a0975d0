"""Generated numba modules on disk: written by hash, imported, compiled or loaded from numba's cache.

numba caches only functions defined in a real file (``exec`` of a string has no cache
locator), and it finds a cached function in the next process through the module's name. So
each module is written to ``<cache dir>/numba/<hash>.py`` and imported under the name
``cuvil_dsl_cpu_<hash>``, registered in ``sys.modules`` *before* it runs. The file is
rewritten only when its bytes differ from the source: numba's cache index checks the
file's modification time, and touching an intact file would throw its cache away.

The cache directory is the compile cache's, trusted the same way (owned by you, not
writable by others: these files are imported as code); with the cache disabled or refused,
modules go to a private temporary directory that lives as long as the executor.

The process's first load imports numba; ``numba_light`` makes that import and the cache loads
after it quicker (deferred modules, the collector paused, numba's runtime from a cache file
``nrt-<key>.bin`` kept in the same directory).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuvil_dsl import knobs
from cuvil_dsl.codegen.cpu import CpuModule
from cuvil_dsl.compile.cache import atomic_write, disk_cache
from cuvil_dsl.diagnostics import InternalError
from cuvil_dsl.runtime import numba_light

MODULE_PREFIX = "cuvil_dsl_cpu_"


@dataclass(frozen=True)
class LoadedModule:
    module: CpuModule
    entry: Callable
    path: Path
    compile_ms: float  # compiling, or loading numba's cache, when the module was imported
    cache_hit: bool  # numba loaded every function from its cache (or this process already had it)


class ModuleDirectory:
    """Where generated modules are written: ``<cache dir>/numba``, or a private temporary folder."""

    def __init__(self) -> None:
        self._temporary: tempfile.TemporaryDirectory | None = None
        if disk_cache() is None:  # disabled, or the directory is not trusted (a warning said why)
            self._temporary = tempfile.TemporaryDirectory(prefix="cuvil-numba-")
            self.path = Path(self._temporary.name)
        else:
            self.path = knobs.values.cache_dir / "numba"
            self.path.mkdir(mode=0o700, exist_ok=True)

    def close(self) -> None:
        if self._temporary is not None:
            self._temporary.cleanup()
            self._temporary = None


def load_module(module: CpuModule, directory: Path) -> LoadedModule:
    """Import ``module`` from ``directory``; numba compiles its functions now, or loads them from its cache."""
    digest = hashlib.sha256(module.source.encode("utf-8")).hexdigest()[:32]
    name = MODULE_PREFIX + digest
    path = directory / f"{digest}.py"
    loaded = sys.modules.get(name)
    if loaded is not None:  # the same source, compiled earlier in this process
        return LoadedModule(module, getattr(loaded, module.entry), Path(loaded.__file__), 0.0, True)
    data = module.source.encode("utf-8")
    if not path.is_file() or path.read_bytes() != data:
        atomic_write(path, data, durable=False)  # a torn file is caught by the comparison above
    with numba_light.first_import():  # a no-op once numba is imported
        _load_caches_lightly()
        numba_light.initialize_nrt(directory)  # a no-op once the NRT is initialised
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        code = importlib.util.module_from_spec(spec)
        sys.modules[name] = code
        started = time.perf_counter()
        try:
            spec.loader.exec_module(code)
        except Exception as exc:
            del sys.modules[name]
            raise InternalError(f"kernel `{module.name}`: numba could not compile the generated module {path}: "
                                f"{type(exc).__name__}: {exc}") from exc
        compile_ms = (time.perf_counter() - started) * 1e3
    return LoadedModule(module, getattr(code, module.entry), path, compile_ms, _from_cache(code, name))


def _from_cache(code, name: str) -> bool:
    """Whether numba loaded every jitted function of the module from its cache, none compiled."""
    from numba.core.dispatcher import Dispatcher

    jitted = [v for v in vars(code).values() if isinstance(v, Dispatcher) and v.py_func.__module__ == name]
    return bool(jitted) and all(sum(f.stats.cache_hits.values()) and not f.stats.cache_misses for f in jitted)


_light = False


def _load_caches_lightly() -> None:
    """Let numba load our generated functions from its cache without initialising its compiler.

    numba's ``Cache.load_overload`` first calls ``target_context.refresh()``, which imports
    and installs every typing and lowering registry numba has (about 250 modules' worth of
    declarations: 0.3-0.5 s, most of a warm start). Rebuilding a cached function needs none of
    them: it links the cached object code (NRT, the helper library and the threading layer
    provide its symbols; the NRT is initialised here, by ``numba_light.initialize_nrt`` before
    the module runs or else by numba's ``rtsys.initialize``, the threading layer by the
    function's own ``reload_init``) and wraps the entry point. A miss still compiles as before:
    numba's compiler refreshes both contexts itself before it types anything (and the
    collector, paused for the first load, runs again: ``numba_light.resume_gc``). Only the
    functions of our generated modules (``cuvil_dsl_cpu_*``) take this path.
    """
    global _light
    if _light:
        return
    from numba.core import caching
    from numba.core.runtime import rtsys

    _light = True
    internals = ("load_overload", "_load_overload", "_guard_against_spurious_io_errors")
    if not all(hasattr(caching.Cache, name) for name in internals) or not hasattr(rtsys, "initialize"):
        numba_light.resume_gc()  # a miss would go unseen: never compile with the collector paused
        return  # another numba: its own (slower) cache load is always correct

    load_overload = caching.Cache.load_overload

    def light_load_overload(self, sig, target_context):
        module = getattr(getattr(self, "_py_func", None), "__module__", None) or ""
        if not module.startswith(MODULE_PREFIX):
            return load_overload(self, sig, target_context)
        rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors():
            loaded = self._load_overload(sig, target_context)
        if loaded is None:  # numba compiles it next: with the garbage collector on
            numba_light.resume_gc()
        return loaded

    light_load_overload.__wrapped__ = load_overload
    caching.Cache.load_overload = light_load_overload
