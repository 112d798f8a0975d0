"""Starting numba quickly when the kernels come from its cache (issue 5).

A warm start of the CPU backend is mostly ``import numba`` and numba's cache load. Three
things here take time out of it without changing what numba computes, in the process or in
the kernels. All three act only during the process's first CPU build (:func:`first_import`,
entered before ``import numba``; a no-op once numba is imported, by us or by anyone).

**Deferred modules.** ``import numba`` imports two modules that a cached load never uses:
``importlib.metadata`` (with ``email``, ``zipfile``, ``csv``...: ~40 ms), used by
``numba.core.entrypoints.init_all``, which numba 0.68 calls only before it *compiles*
(``BaseContext.refresh``, a lazy dispatcher's first call), never on a cache load; and ``yaml``
(~17 ms), used by ``numba.core.config`` only when a ``.numba_config.yaml`` file exists.
:func:`defer_modules` puts each in ``sys.modules`` as a *deferred module*: the module object
the import would have made (same spec, loader, ``__file__``, ``__path__``) whose code runs the
first time any attribute other than ``__spec__`` is read, set or deleted. The import
statements (``import yaml``, ``from importlib import metadata``) find it in ``sys.modules``
and bind it without running it, as the import system reads only its ``__spec__`` (the
stdlib's ``importlib.util.LazyLoader`` cannot serve: on Python 3.11 that very read runs the
module). A compile, a config file, or any other user runs the module then, exactly once: other
threads wait on a lock, and the module's own code reads it as an ordinary module while it runs;
a module that fails leaves ``sys.modules`` and raises to its first user, as a failed import
would. Nothing is deferred when the module is imported already, when numba is, or when it is
not a plain source module (``SourceFileLoader``): the normal import happens. Only these two
non-numba modules are deferred. numba's own modules register typing and lowering templates
as they are imported, so deferring any of them could change the order, hence possibly the
outcome, of a later compile; it would also save little: with every ``numba.*`` module made
lazy, the ``from ... import`` statements between them still ran 126 of 146.

**No collection during the first load.** Importing numba and rebuilding a cached function
allocate some 60 000 long-lived objects; the collector ran ~170 young collections and one full
one over them (30-50 ms). :func:`gc_paused` switches automatic collection off inside and back
on after; it then moves every tracked object into the oldest generation (``gc.freeze()`` and
``gc.unfreeze()`` at once: O(1) list moves, nothing stays frozen), where two young collections
would have moved these objects anyway. Nothing is lost, collection is only later: the next
full collection sees everything. Switched back on at once when numba misses its cache
(:func:`resume_gc`), so a compile, which makes much cyclic garbage, runs with the collector on;
nested and concurrent pauses restore the state of before the first; a collector switched off
by the program stays off; a program's own frozen objects are never unfrozen (then nothing is
moved).

**numba's runtime from a cache.** Before numba loads or compiles anything it initialises its
runtime (NRT): it registers the C helpers' symbols and compiles a small LLVM module (atomic
reference counts, ``NRT_incref``/``NRT_decref``...) with the full optimisation pipeline and
MCJIT: ~25 ms, every process. :func:`initialize_nrt` does what numba 0.68's
``_Runtime.initialize`` does (replayed, so only on the numba versions in ``_NRT_VERSIONS``
with the attributes it uses; on any other, numba initialises its runtime itself), except
that the module's object code is kept next to the generated modules (``nrt-<key>.bin``) and
loaded from there by the next process, as numba loads a cached function
(``codegen.unserialize_library``, ~4 ms). The key covers numba, llvmlite, LLVM and Python
versions and the codegen's ``magic_tuple`` (target triple, CPU name and features), as numba's
own cache index does; the file carries a SHA-256 of its contents, and a missing, damaged or
refused file is compiled again (and rewritten). The code is the same either way: the same IR
through the same passes (object caching only keeps the object), and a later compile links the
library's bitcode, which the file keeps, as it links a freshly compiled one.

Results cannot change: the same kernels come from the same cache, and a compile runs after
every deferred module it uses has run, with numba's modules imported in numba's order.
"""

from __future__ import annotations

import gc
import hashlib
import importlib._bootstrap
import importlib.machinery
import importlib.util
import sys
import threading
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# modules ``import numba`` imports that a load from numba's cache never uses
DEFERRED = ("importlib.metadata", "yaml")


class _Deferred(types.ModuleType):
    """A module whose code has not run yet: it runs at the first use of the module."""

    def __getattribute__(self, attr: str):
        if attr == "__spec__":  # what the import system reads of a module found in sys.modules
            return types.ModuleType.__getattribute__(self, attr)
        _run(self)
        return types.ModuleType.__getattribute__(self, attr)

    def __setattr__(self, attr: str, value) -> None:
        _run(self)
        types.ModuleType.__setattr__(self, attr, value)

    def __delattr__(self, attr: str) -> None:
        _run(self)
        types.ModuleType.__delattr__(self, attr)


class _Pending:
    __slots__ = ("module", "lock", "running")

    def __init__(self, module: types.ModuleType) -> None:
        self.module = module
        self.lock = threading.RLock()
        self.running = False


_pending: dict[int, _Pending] = {}  # id(module) -> its state, while the module is deferred
_pending_lock = threading.Lock()


def _run(module: types.ModuleType) -> None:
    """Run a deferred module's code: once; as the import system runs a module, under its lock."""
    with _pending_lock:
        state = _pending.get(id(module))
    if state is None or state.module is not module:  # it ran already
        return
    spec = types.ModuleType.__getattribute__(module, "__spec__")
    # The import system's lock for this name (re-entrant, with its deadlock detection): a thread
    # importing the module or a submodule meanwhile waits for the run as for an import in progress.
    manager = getattr(importlib._bootstrap, "_ModuleLockManager", None)
    lock = manager(spec.name) if manager is not None else state.lock
    try:
        lock.__enter__()
    except RuntimeError:  # a deadlock the import system detected: as it does, use the module as it is
        return
    try:
        if state.running or type(module) is not _Deferred:  # the running thread itself, or done
            return
        state.running = True
        spec._initializing = True
        try:
            spec.loader.exec_module(module)
        except BaseException:
            _forget(module, spec.name)  # as a failed import; the error reaches the module's first user
            raise
        finally:
            spec._initializing = False
            object.__setattr__(module, "__class__", types.ModuleType)
            with _pending_lock:
                _pending.pop(id(module), None)
    finally:
        lock.__exit__(None, None, None)


def _forget(module: types.ModuleType, name: str) -> None:
    if sys.modules.get(name) is module:
        del sys.modules[name]
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent is not None and parent.__dict__.get(child) is module:
        delattr(parent, child)


def _defer(name: str) -> bool:
    """Put ``name`` in sys.modules as a deferred module; False where the normal import must happen."""
    if name in sys.modules:
        return False
    parent_name, _, child = name.rpartition(".")
    parent = sys.modules.get(parent_name) if parent_name else None
    if parent_name and (parent is None or is_deferred(parent)):
        return False  # never import a parent package here
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    if spec is None or type(spec.loader) is not importlib.machinery.SourceFileLoader:
        return False
    module = importlib.util.module_from_spec(spec)
    with _pending_lock:
        _pending[id(module)] = _Pending(module)
    object.__setattr__(module, "__class__", _Deferred)
    sys.modules[name] = module
    if parent is not None:
        setattr(parent, child, module)
    return True


def is_deferred(module: types.ModuleType) -> bool:
    """Whether ``module`` is deferred still (its code has not run)."""
    return type(module) is _Deferred


def defer_modules() -> list[str]:
    """Before the process's first ``import numba``: defer the modules in DEFERRED (the names deferred)."""
    if "numba" in sys.modules:
        return []
    return [name for name in DEFERRED if _defer(name)]


@contextmanager
def first_import() -> Iterator[None]:
    """Around the process's first ``import numba`` and the cache loads that follow it.

    Defers :data:`DEFERRED` and pauses the collector inside; does nothing once numba is
    imported (a later load allocates little, and the collector is left alone).
    """
    if "numba" in sys.modules:
        yield
        return
    with gc_paused():
        defer_modules()
        yield


# -- the collector -------------------------------------------------------------------------

_gc_lock = threading.Lock()
_gc_pauses = 0  # pauses in progress, all threads
_gc_was_enabled = False  # the collector's state before the first of them


class _Pause:
    __slots__ = ("released",)

    def __init__(self) -> None:
        self.released = False


_local = threading.local()  # .pauses: this thread's pauses in progress, innermost last


def _pauses() -> list[_Pause]:
    pauses = getattr(_local, "pauses", None)
    if pauses is None:
        pauses = _local.pauses = []
    return pauses


@contextmanager
def gc_paused() -> Iterator[None]:
    """Automatic garbage collection off inside, restored after (see the module's docstring)."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
        _gc_pauses += 1
        gc.disable()
    pause = _Pause()
    _pauses().append(pause)
    try:
        yield
    finally:
        _pauses().pop()
        _release(pause)


def resume_gc() -> None:
    """Inside :func:`gc_paused`: what follows is a compile; this thread's pauses end now."""
    for pause in _pauses():
        _release(pause)


def _release(pause: _Pause) -> None:
    global _gc_pauses
    if pause.released:
        return
    pause.released = True
    with _gc_lock:
        _gc_pauses -= 1
        if _gc_pauses == 0 and _gc_was_enabled:
            if gc.get_freeze_count() == 0:  # (never unfreeze what someone else froze)
                # what the pause allocated is long-lived: into the oldest generation it goes, as
                # surviving two young collections would have put it, without the two collections
                gc.freeze()
                gc.unfreeze()
            gc.enable()


# -- numba's runtime, from a cache ----------------------------------------------------------------

# numba versions whose ``_Runtime.initialize`` is the one replayed by :func:`initialize_nrt`
_NRT_VERSIONS = ("0.68.",)
NRT_PREFIX = "nrt-"
nrt_source = ""  # how initialize_nrt got the NRT's functions in this process: "cache", "compiled" (or "")


def initialize_nrt(directory: Path) -> None:
    """numba's ``rtsys.initialize`` with the NRT's compiled functions kept in ``directory``.

    See "numba's runtime" in the module's docstring. Does nothing when the NRT is initialised
    already, or on a numba it was not written for (numba initialises its runtime itself then,
    before its first cache load or compile). A missing, damaged or refused file: compiled, as
    numba compiles it, and saved.
    """
    global nrt_source
    try:
        import llvmlite
        import numba
        from llvmlite import binding as ll
        from numba.core import config
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target
        from numba.core.runtime import _nrt_python, nrtdynmod, rtsys
    except ImportError:
        return
    if getattr(rtsys, "_init", True):
        return
    supported = (numba.__version__.startswith(_NRT_VERSIONS)
                 and isinstance(getattr(type(rtsys), "library", None), property)
                 and hasattr(nrtdynmod, "create_nrt_module")
                 and isinstance(getattr(_nrt_python, "c_helpers", None), dict))
    with global_compiler_lock:  # as rtsys.initialize (and every compile and cache load) holds it
        if rtsys._init:
            return
        if not supported:
            return  # numba initialises it itself, before its first cache load or compile
        context = cpu_target.target_context
        codegen = context.codegen()
        key = hashlib.sha256(repr((numba.__version__, llvmlite.__version__, ll.llvm_version_info, sys.version_info[:2],
                                   codegen.magic_tuple())).encode()).hexdigest()[:32]
        path = directory / f"{NRT_PREFIX}{key}.bin"
        # replayed from numba 0.68's _Runtime.initialize: the C helpers' symbols, then the library
        if config.NRT_STATS:
            _nrt_python.memsys_enable_stats()
        for py_name, c_address in _nrt_python.c_helpers.items():
            ll.add_symbol(py_name if py_name.startswith("_") else "NRT_" + py_name, c_address)
        try:
            library = _load_nrt(codegen, path)
        except Exception:  # (the file's checksum was right: llvmlite refused it) compile instead
            library = None
        if library is not None:
            nrt_source = "cache"
        else:
            ir_module, library = nrtdynmod.create_nrt_module(context)  # as nrtdynmod.compile_nrt_functions,
            library.enable_object_caching()  # keeping the object code (the same code) to save it
            library.add_ir_module(ir_module)
            library.finalize()
            nrt_source = "compiled"
            _save_nrt(library, path)
        rtsys._library = library
        rtsys._init = True


def _load_nrt(codegen, path: Path):
    """The NRT library saved at ``path``, or None (no file, a damaged one, an unexpected layout)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    digest, body = data[:32], data[32:]
    if len(data) < 40 or hashlib.sha256(body).digest() != digest:
        return None
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        return None
    return codegen.unserialize_library(("nrt", "object", (body[8:8 + size], body[8 + size:])))


def _save_nrt(library, path: Path) -> None:
    try:
        _name, kind, (object_code, bitcode) = library.serialize_using_object_code()
        if kind != "object":
            return
        body = len(object_code).to_bytes(8, "little") + object_code + bitcode
        from cuvil_dsl.compile.cache import atomic_write

        atomic_write(path, hashlib.sha256(body).digest() + body, durable=False)
    except Exception:  # a cache that cannot be written is only slower next time
        return
