"""The Python API: load a ``.cuvil`` file, compile one pipeline, call it on arrays.

::

    import cuvil_dsl

    softmax = cuvil_dsl.load("specs/softmax.cuvil").compile()
    y = softmax(x)                      # x: NumPy, CuPy or PyTorch; y: the same kind
    p, lse = cuvil_dsl.load("specs/multi_result.cuvil").compile(backend="reference")(x)

Tensors bind by parameter order or name, scalar parameters by name (defaults apply); symbol
sizes come from the arrays (plus any ``shapes`` given to :meth:`Program.compile`). Each shape
signature gets its own executor, built on first use and kept. Device arrays never travel through
the host: on the CUDA backend they are bound by pointer (graphs updated in place) or copied
device to device.

A repeated call with the same array objects (same shapes and dtypes) and the same scalars takes
a fast path: no binding, no validation, only the copies host data needs and the launches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from cuvil_dsl.diagnostics import Span, UserError, error, raise_if_errors
from cuvil_dsl.ir import nodes as ir
from cuvil_dsl.passes.plan import FusionPlan
from cuvil_dsl.reference.executor import HostHooks
from cuvil_dsl.runtime.base import Executor, Target
from cuvil_dsl.runtime.binding import infer_sizes, resolve_params
from cuvil_dsl.runtime.device import device_arch, gpu_available
from cuvil_dsl.runtime.interop import HOST_KINDS, Normalized, caller_stream, from_device, from_host, kind_of, normalize, to_host
from cuvil_dsl.types import DType

BACKENDS = ("auto", "cuda", "cpu", "reference")
TARGET_OPTIONS = ("compiler", "fallback", "fast_math", "tf32", "options", "device")


def load(path: str | Path, entry: str | None = None) -> "Program":
    """Parse and check ``path``; ``entry`` names the pipeline when the file holds several.

    Raises :class:`UserError` with every diagnostic when the file has errors.
    """
    module, diagnostics = checked_module(Path(path))
    pipeline = module.pipeline(entry)
    if pipeline is None:
        names = ", ".join(p.name for p in module.pipelines)
        message = (f"`{path}` holds {len(module.pipelines)} pipelines ({names}); pass entry=" if entry is None
                   else f"no pipeline `{entry}` in `{path}` (it holds: {names})")
        span = module.pipelines[0].span if module.pipelines else Span.whole_file(str(path))
        raise UserError([error("E508", message, span)])
    return Program(Path(path), module, pipeline, tuple(d for d in diagnostics if not d.is_error))


# -- checked modules, cached ---------------------------------------------------------------------
#
# A file that checks clean is kept as a pickle of its typed IR module and warnings in the cache
# directory, keyed by its bytes, the path as given (spans carry it), and the sources of the
# front end, the IR and the grammar. A hit skips importing Lark and the front end and parsing:
# 60-100 ms of a warm start. Trust is the Lark grammar cache's: the directory is the user's own
# (checked by ``disk_cache``) and only a regular file of this user is unpickled.

_IR_CACHE_FORMAT = b"cuvil-ir 1"


def _frontend_fingerprint() -> bytes:
    """What the checker's output depends on besides the file: its own sources and the grammar."""
    import hashlib

    import cuvil_dsl

    package = Path(cuvil_dsl.__file__).resolve().parent
    digest = hashlib.sha256(_IR_CACHE_FORMAT + cuvil_dsl.__version__.encode())
    files = [*sorted((package / "frontend").glob("*.py")), *sorted((package / "ir").glob("*.py")),
             package / "types.py", package / "diagnostics.py"]
    files += [p for p in (package / "grammars" / "cuvil.lark", package.parent / "grammars" / "cuvil.lark") if p.is_file()]
    for f in files:
        digest.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.digest()


def checked_module(path: Path) -> tuple[ir.Module, tuple]:
    """The checked module of ``path`` and its diagnostics (warnings only); UserError on errors.

    From the IR cache when the file, the path and the front end are unchanged."""
    from cuvil_dsl.diagnostics import read_source_bytes

    entry = None
    raw = read_source_bytes(path)
    if isinstance(raw, bytes):
        entry = _ir_cache_entry(path, raw)
        found = _ir_cache_load(entry) if entry is not None else None
        if found is not None:
            from cuvil_dsl.diagnostics import SOURCES

            SOURCES.add(str(path), raw.decode("utf-8", "replace"))  # warnings show their line, as after a parse
            return found
    from cuvil_dsl.frontend import check_file

    checked = check_file(path)
    if not checked.ok:
        raise UserError(checked.diagnostics)
    if entry is not None:
        _ir_cache_store(entry, (checked.module, checked.diagnostics))
    return checked.module, checked.diagnostics


def _ir_cache_entry(path: Path, raw: bytes) -> tuple[Path, bytes] | None:
    import hashlib

    from cuvil_dsl.compile.cache import disk_cache

    cache = disk_cache()
    if cache is None:
        return None
    key = hashlib.sha256(_frontend_fingerprint() + str(path).encode("utf-8", "surrogateescape") + b"\0" + raw).digest()
    return cache.root / "ir" / f"{key.hex()[:40]}.pickle", key


def _ir_cache_load(entry: tuple[Path, bytes]):
    import pickle

    from cuvil_dsl.compile.cache import _read_own_file

    data = _read_own_file(entry[0])
    if not isinstance(data, bytes):
        return None
    try:
        key, module, diagnostics = pickle.loads(data)
    except Exception:  # a torn or foreign file: a miss, rewritten below
        return None
    if key != entry[1] or not isinstance(module, ir.Module) or any(d.is_error for d in diagnostics):
        return None
    return module, tuple(diagnostics)


def _ir_cache_store(entry: tuple[Path, bytes], value: tuple) -> None:
    import pickle

    from cuvil_dsl.compile.cache import atomic_write

    try:
        data = pickle.dumps((entry[1], *value), protocol=pickle.HIGHEST_PROTOCOL)
        entry[0].parent.mkdir(mode=0o700, exist_ok=True)
        atomic_write(entry[0], data, durable=False)
    except Exception:  # an unpicklable value or an unwritable folder: no entry, nothing else changes
        pass


@dataclass(frozen=True)
class Program:
    """A checked pipeline, ready to compile for a backend."""

    path: Path
    module: ir.Module
    pipeline: ir.Pipeline
    warnings: tuple = ()

    @property
    def name(self) -> str:
        return self.pipeline.name

    def compile(self, shapes: Mapping[str, int] | None = None, backend: str = "auto", arch: str | None = None, *,
                kernels: Mapping[str, object] | None = None, device_inputs: str = "bind",
                **options) -> "CompiledPipeline":
        """A callable for ``backend`` (``auto``: cuda with a GPU, else cpu).

        ``shapes`` fixes symbol sizes ahead of the arrays; ``kernels`` overrides per-kernel
        settings as a spec's ``kernels`` section does; ``options`` are the spec's ``target`` keys
        (compiler, fallback, fast_math, tf32, options, device). ``device_inputs="copy"`` copies
        caller device arrays into the arena on every call instead of binding them by pointer:
        cheaper when every call passes new arrays (a new pointer means a graph re-capture).
        """
        unknown = sorted(set(options) - set(TARGET_OPTIONS))
        if unknown:
            raise TypeError(f"unknown target option(s) {unknown}; expected some of {list(TARGET_OPTIONS)}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        if device_inputs not in ("bind", "copy"):
            raise ValueError(f"device_inputs must be 'bind' or 'copy', not {device_inputs!r}")
        if backend == "auto":
            backend = "cuda" if gpu_available() else "cpu"
        device = int(options.get("device", 0))
        if backend == "cuda":
            if not gpu_available():
                raise UserError([error("E601", "the cuda backend needs a CUDA GPU, and none is available here",
                                       self.pipeline.span, hint="use backend='cpu' or 'reference'")])
            if arch in (None, "auto"):
                arch = device_arch(device)
        else:
            arch = None
        if "options" in options:
            options["options"] = tuple(options["options"])
        target = Target(backend=backend, arch=arch, **{**options, "device": device})
        return CompiledPipeline(self.pipeline, target, dict(shapes or {}), dict(kernels or {}), device_inputs)


@dataclass
class _Call:
    """One call's bound state, reused while the caller passes the same arrays and scalars."""

    args: tuple
    named: tuple[str, ...]
    named_values: tuple
    arrays: tuple  # the array objects among args and named values
    fingerprints: tuple
    inputs: dict[str, Normalized]
    params: dict[str, object]
    executor: Executor
    kind: str  # the caller's array kind, for the results
    on_device: bool  # some input or the results live on the device
    cacheable: bool  # every input is an array object whose changes the fingerprints see
    copied: set[str] = field(default_factory=set)  # device inputs copied into the arena: again on every call
    rebind: bool = True  # a repeat call must bind inputs again (some are copied, not bound by pointer)
    repeat: object = None  # the CUDA repeat call's short path (CompiledPipeline._repeat_cuda), once it applies

    def matches(self, args: tuple, named: dict) -> bool:
        if len(args) != len(self.args) or tuple(named) != self.named:
            return False
        for a, b in zip(args, self.args):
            if a is not b:
                return False
        if named:
            for value, old in zip(named.values(), self.named_values):
                if value is not old and not (_is_scalar(value) and value == old):
                    return False
        return _fingerprints(self.arrays) == self.fingerprints


def _is_scalar(value: object) -> bool:
    return isinstance(value, (bool, int, float)) or type(value).__module__ == "numpy" and getattr(value, "ndim", 1) == 0


def _fingerprints(arrays: tuple) -> tuple:
    """What may change in an array object without its identity changing: shape, dtype, storage."""
    return tuple((tuple(a.shape), a.dtype, a.data_ptr()) if type(a).__module__.startswith("torch") else (a.shape, a.dtype)
                 for a in arrays)


class CompiledPipeline:
    """Call it with arrays; it builds and caches one executor per shape signature."""

    def __init__(self, pipeline: ir.Pipeline, target: Target, shapes: dict[str, int], kernels: dict[str, object],
                 device_inputs: str):
        self.pipeline = pipeline
        self.target = target
        self.shapes = shapes
        self.hooks: HostHooks | None = HostHooks()  # host statements run on every call; None skips them
        self._graphs = None  # the CUDA backend's graph cache, made on first use (not imported for cpu)
        self._overrides = kernels
        self._copy_device = device_inputs == "copy"
        self._plan: FusionPlan | None = None
        self._executors: dict[tuple, Executor] = {}
        self._tensors = [p.name for p in pipeline.tensor_params]
        self._results = [r.name for r in pipeline.results]
        self._bf16 = {r.name: r.type.dtype is DType.BF16 for r in pipeline.results}
        self._last: _Call | None = None

    @property
    def backend(self) -> str:
        return self.target.backend

    @property
    def graphs(self):
        """The :class:`~cuvil_dsl.runtime.graphs.GraphCache` the CUDA executors share."""
        if self._graphs is None:
            from cuvil_dsl.runtime.graphs import GraphCache

            self._graphs = GraphCache()
        return self._graphs

    @property
    def plan(self) -> FusionPlan:
        """The fusion plan (planned once: it does not depend on sizes)."""
        if self._plan is None:
            from cuvil_dsl.passes.fusion import plan_pipeline

            plan, diagnostics = plan_pipeline(self.pipeline, self._overrides, self.target.arch)
            raise_if_errors(diagnostics)
            self._plan = plan
        return self._plan

    @property
    def executors(self) -> dict[tuple, Executor]:
        """The executors built so far, by shape signature (sorted ``(symbol, size)`` pairs)."""
        return dict(self._executors)

    def executor(self, sizes: Mapping[str, int]) -> Executor:
        """The executor for one shape signature, built on first use."""
        key = tuple(sorted(sizes.items()))
        found = self._executors.get(key)
        if found is None:
            found = self._executors[key] = self._build(dict(sizes))
        return found

    def _build(self, sizes: dict[str, int]) -> Executor:
        backend = self.target.backend
        if backend == "reference":
            from cuvil_dsl.runtime.reference_executor import ReferenceExecutor

            return ReferenceExecutor(self.pipeline, sizes)
        if backend == "cpu":
            try:
                from cuvil_dsl.runtime.cpu_executor import CpuExecutor
            except ImportError as exc:
                raise UserError([error("E601", f"the cpu backend is not available: {exc}", self.pipeline.span,
                                       hint="use backend='reference'")]) from None
            return CpuExecutor.build(self.pipeline, self.plan, sizes, self.target)
        from cuvil_dsl.runtime.cuda_executor import CudaExecutor

        return CudaExecutor.build(self.pipeline, self.plan, sizes, self.target, graphs=self.graphs)

    def __call__(self, *arrays, **named):
        call = self._last
        if call is not None and call.matches(arrays, named):
            if call.repeat is not None:
                return call.repeat()
            return self._run(call, fresh=False)
        call = self._bind(arrays, named)
        self._last = call if call.cacheable else None
        return self._run(call, fresh=True)

    def _bind(self, arrays: tuple, named: dict) -> _Call:
        if len(arrays) > len(self._tensors):
            raise TypeError(f"{self.pipeline.name}() takes {len(self._tensors)} tensor argument(s) by position, "
                            f"{len(arrays)} were given (scalar parameters go by name)")
        given = dict(zip(self._tensors, arrays))
        scalars = {}
        for name, value in named.items():
            param = self.pipeline.param(name)
            if param is None:
                raise TypeError(f"{self.pipeline.name}() has no parameter `{name}`")
            if not param.is_tensor:
                scalars[name] = value
            elif name in given:
                raise TypeError(f"{self.pipeline.name}() got two values for `{name}`")
            else:
                given[name] = value
        missing = [n for n in self._tensors if n not in given]
        if missing:
            raise TypeError(f"{self.pipeline.name}() is missing tensor argument(s) {missing}")
        inputs = {name: normalize(given[name]) for name in self._tensors}
        sizes = infer_sizes(self.pipeline, self.shapes, {n: tuple(i.array.shape) for n, i in inputs.items()},
                            {n: i.dtype for n, i in inputs.items()})
        params = resolve_params(self.pipeline, scalars)
        executor = self.executor(sizes)
        kind = inputs[self._tensors[0]].kind if self._tensors else "numpy"
        watched = tuple(given[name] for name in self._tensors)
        # Lists and other non-array inputs are converted afresh on every call: such a call is never reused.
        cacheable = all(kind_of(a) != "other" for a in watched)
        on_device = kind not in HOST_KINDS or any(i.on_device for i in inputs.values())
        return _Call(arrays, tuple(named), tuple(named.values()), watched, _fingerprints(watched) if cacheable else (),
                     inputs, params, executor, kind, on_device, cacheable)

    def _run(self, call: _Call, fresh: bool):
        executor = call.executor
        if executor.backend != "cuda":
            # Device inputs are read back on every call: their contents may have changed.
            results = executor.run({n: to_host(i) for n, i in call.inputs.items()}, call.params, self.hooks)
            outs = [from_host(results[name], call.kind) for name in self._results]
        else:
            outs = self._run_cuda(call, fresh)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _run_cuda(self, call: _Call, fresh: bool) -> list:
        executor = call.executor
        with executor.device:
            # Device callers: work on their stream, so results are ordered with their work for free.
            executor.use_stream(caller_stream(call.kind) if call.on_device else executor.stream)
            if fresh or call.rebind:
                for name, item in call.inputs.items():
                    if not item.on_device:
                        executor.bind_host(name, item.array)  # host data may have changed in place: copy every call
                    elif fresh:
                        if not executor.bind_device(name, item.array, copy=self._copy_device):
                            call.copied.add(name)
                    elif name in call.copied:
                        executor.bind_device(name, item.array, copy=True)
                # A repeat call binds again only when some input is copied (host data, unbindable arrays).
                call.rebind = bool(call.copied) or not all(i.on_device for i in call.inputs.values())
            executor.set_params(call.params)
            executor.execute(self.hooks)
            if call.kind in HOST_KINDS:
                return [from_host(executor.fetch(name), call.kind) for name in self._results]
            outs = [from_device(executor.fetch_device(name), call.kind, self._bf16[name]) for name in self._results]
            if call.kind == "cupy" and not call.rebind and self._last is call:
                call.repeat = self._repeat_cuda(call)
            return outs

    def _repeat_cuda(self, call: _Call):
        """The short path of a repeat call with the same CuPy arrays and scalars (the common loop):
        nothing to bind or evaluate again, so it checks the device, joins the caller's stream,
        queues the steps and copies the results out, as ``_run_cuda`` would."""
        from cupy.cuda import get_current_stream, runtime

        executor = call.executor
        device = executor.device.id
        names = tuple(self._results)
        fetch = executor.fetch_device_on
        use_stream, execute = executor.use_stream, executor.execute

        def repeat():
            if runtime.getDevice() != device:  # another current device: the general path switches
                outs = self._run_cuda(call, False)
                return outs[0] if len(outs) == 1 else tuple(outs)
            stream = get_current_stream()
            use_stream(stream)
            execute(self.hooks)
            if len(names) == 1:
                return fetch(names[0], stream)
            return tuple(fetch(name, stream) for name in names)

        return repeat

    def close(self) -> None:
        """Release every executor's device memory, modules and graphs."""
        for executor in self._executors.values():
            executor.close()
        self._executors.clear()
        self._last = None

