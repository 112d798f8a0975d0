"""NVRTC driver: one CUDA C unit to a CUBIN for one exact ``sm_XX``, plus the ptxas report.

We call CuPy's low-level ``cupy_backends.cuda.libs.nvrtc`` because CuPy's high-level
compile path asks the (absent) GPU for its arch; the low-level calls work on a machine
with no driver and release the GIL, so threads compile in parallel.

We always build CUBIN (``-arch=sm_XX``), never PTX for the driver to JIT: PTX from a newer
NVRTC than the driver fails to load (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), SASS does not.

Cancellation: CuPy does not bind ``nvrtcSetFlowCallback`` (NVRTC 12.8+), but the program
handle its ``createProgram`` returns is the raw ``nvrtcProgram`` pointer, so the function is
bound with ctypes from the libnvrtc CuPy already loaded (:func:`flow_callbacks`). Each
compile can carry a :class:`Cancel`; NVRTC polls it through the callback and stops with
NVRTC_ERROR_CANCELLED once it is set. With an older NVRTC, or if the binding fails, compiles
simply cannot be cancelled (the service then abandons them, as it did before).
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Literal

from cuvil_dsl.compile.ptxas import clean_log, resource_errors
from cuvil_dsl.compile.units import ELF_MAGIC

# NVRTC 13 answers repeat compiles from the driver's compute cache when a driver is present,
# and then prints no ptxas report; our own cache is the only one, so NVRTC's is always off.
_NVRTC_ONLY_OPTIONS = ("--no-cache",)
_ARCH = re.compile(r"sm_(\d+)([af]?)")

FailureKind = Literal["resource", "source", "api"]


@dataclass(frozen=True)
class NvrtcResultInfo:
    """One ``nvrtcResult``: what it means, what to do, and whether nvcc is worth a try.

    ``kind`` is ``resource`` (NVRTC or the machine ran out of something: fall back to
    nvcc), ``source`` (the unit or its options are wrong: nvcc would fail too, so report
    it) or ``api`` (cuvil-dsl misused NVRTC: a bug in this package).
    """

    code: int
    name: str
    meaning: str
    action: str
    kind: FailureKind


_BUG = "this is a bug in cuvil-dsl's NVRTC driver; please report it"

RESULT_CODES: dict[int, NvrtcResultInfo] = {
    info.code: info
    for info in (
        NvrtcResultInfo(0, "NVRTC_SUCCESS", "success", "none", "source"),
        NvrtcResultInfo(1, "NVRTC_ERROR_OUT_OF_MEMORY", "host memory allocation failed",
                        "free host memory or lower CUVIL_COMPILE_WORKERS; nvcc is tried", "resource"),
        NvrtcResultInfo(2, "NVRTC_ERROR_PROGRAM_CREATION_FAILURE", "NVRTC could not create the program",
                        "usually memory pressure; nvcc is tried", "resource"),
        NvrtcResultInfo(3, "NVRTC_ERROR_INVALID_INPUT", "an invalid argument reached NVRTC", _BUG, "api"),
        NvrtcResultInfo(4, "NVRTC_ERROR_INVALID_PROGRAM", "the program handle is invalid", _BUG, "api"),
        NvrtcResultInfo(5, "NVRTC_ERROR_INVALID_OPTION", "an option is unknown or has a bad value",
                        "check the options listed below against `nvrtc --help` for this NVRTC version", "source"),
        NvrtcResultInfo(6, "NVRTC_ERROR_COMPILATION", "the CUDA source failed to compile",
                        "read the compiler log below; it names the line", "source"),
        NvrtcResultInfo(7, "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE", "a failure inside libnvrtc-builtins",
                        "reinstall nvidia-cuda-nvrtc so libnvrtc and its builtins match; nvcc is tried", "resource"),
        NvrtcResultInfo(8, "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
                        "a name expression was added after compilation", _BUG, "api"),
        NvrtcResultInfo(9, "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
                        "a lowered name was asked for before compilation", _BUG, "api"),
        NvrtcResultInfo(10, "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID", "a name expression was never added", _BUG, "api"),
        NvrtcResultInfo(11, "NVRTC_ERROR_INTERNAL_ERROR", "an internal NVRTC error",
                        "retry; if it persists report it to NVIDIA with the saved source; nvcc is tried", "resource"),
        NvrtcResultInfo(12, "NVRTC_ERROR_TIME_FILE_WRITE_FAILED", "the --time report file could not be written",
                        "check free space and permissions where --time points; nvcc is tried", "resource"),
        NvrtcResultInfo(13, "NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED", "no precompiled header was attempted", _BUG, "api"),
        NvrtcResultInfo(14, "NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED", "the precompiled-header heap is too small",
                        "drop --pch from the options or raise the PCH heap; nvcc is tried", "resource"),
        NvrtcResultInfo(15, "NVRTC_ERROR_PCH_CREATE", "precompiled header creation failed",
                        "drop --pch from the options; nvcc is tried", "resource"),
        # Only cuvil-dsl's own flow callback cancels, when a compile runs past its limit; the
        # service reports that as a timeout (E602). Kind "source": never retried with nvcc, and
        # not a sign that NVRTC is unhealthy (the breaker does not count it).
        NvrtcResultInfo(16, "NVRTC_ERROR_CANCELLED", "the compile was cancelled by a flow callback",
                        "cuvil-dsl cancels compiles that run past CUVIL_COMPILE_TIMEOUT; "
                        "raise the limit or split the kernel", "source"),
        NvrtcResultInfo(17, "NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED", "the time-trace file could not be written",
                        "check space and permissions where --fdevice-time-trace points; nvcc is tried", "resource"),
        NvrtcResultInfo(18, "NVRTC_ERROR_BUSY", "another process holds NVRTC's bundled-header lock",
                        "retry later; nvcc is tried", "resource"),
    )
}


def result_info(code: int) -> NvrtcResultInfo:
    """The table row for ``code``; codes from a newer NVRTC than this table get a defensive row.

    An unknown failure is treated as a resource problem, because nvcc is the only way
    forward and a real source error will fail there too and be reported with both logs.
    """
    known = RESULT_CODES.get(code)
    if known is not None:
        return known
    return NvrtcResultInfo(code, f"NVRTC_ERROR_UNKNOWN_{code}", "a result code this cuvil-dsl does not know",
                           "upgrade cuvil-dsl or pin nvidia-cuda-nvrtc==13.0.*; nvcc is tried", "resource")


class NvrtcUnavailable(Exception):
    """libnvrtc could not be loaded (the nvidia-cuda-nvrtc wheel is missing or broken)."""


class NvrtcFailure(Exception):
    """A compile that NVRTC refused, with its result code and the program log."""

    def __init__(self, code: int, log: str, options: tuple[str, ...]):
        self.info = result_info(code)
        self.log = log
        self.options = options
        self.ptxas_resource_errors = resource_errors(log)
        super().__init__(f"{self.info.name} ({code}): {self.info.meaning}")

    @property
    def kind(self) -> FailureKind:
        """``resource`` also when ptxas said the kernel does not fit (too much shared/local data)."""
        if self.info.kind == "source" and self.ptxas_resource_errors:
            return "resource"
        return self.info.kind

    @property
    def nvrtc_unhealthy(self) -> bool:
        """True when NVRTC itself failed (a result code), not when the kernel exceeded a hardware limit."""
        return self.info.kind == "resource"


_load_lock = threading.Lock()
_loaded: ModuleType | None = None
_load_error: str | None = None


def library() -> ModuleType:
    """The CuPy NVRTC binding, with libnvrtc loaded once per process; raises :class:`NvrtcUnavailable`."""
    global _loaded, _load_error
    with _load_lock:
        if _loaded is None and _load_error is None:
            try:
                from cupy_backends.cuda.libs import nvrtc as lib

                lib.getVersion()  # CuPy loads libnvrtc lazily; force it here so failure is seen once
                _loaded = lib
            except Exception as exc:  # DynamicLibNotFoundError, ImportError, OSError: all mean "absent"
                _load_error = f"{type(exc).__name__}: {exc}"
        if _loaded is None:
            raise NvrtcUnavailable(
                f"libnvrtc could not be loaded ({_load_error}); install it with "
                "`pip install 'nvidia-cuda-nvrtc==13.0.*'`"
            )
        return _loaded


_facts: dict[str, object] = {}  # what the loaded libnvrtc says of itself; it cannot change in a process


def version() -> str:
    """``"13.0"``: part of every cache key, so a new NVRTC never reuses an old binary."""
    found = _facts.get("version")
    if found is None:
        major, minor = library().getVersion()
        found = _facts["version"] = f"{major}.{minor}"
    return found  # type: ignore[return-value]


def supported_archs() -> tuple[int, ...]:
    found = _facts.get("archs")
    if found is None:
        found = _facts["archs"] = tuple(int(a) for a in library().getSupportedArchs())
    return found  # type: ignore[return-value]


def parse_arch(arch: str) -> tuple[int, str] | None:
    """``"sm_90a"`` → ``(90, "a")``; ``None`` for anything that is not a real ``sm_XX[a|f]``."""
    m = _ARCH.fullmatch(arch)
    return (int(m.group(1)), m.group(2)) if m else None


@functools.cache
def header_dir() -> str | None:
    """Where ``cuda_fp16.h`` and friends live: the nvidia-cuda-runtime wheel, else /usr/local/cuda."""
    try:
        from cuda import pathfinder

        found = pathfinder.find_nvidia_header_directory("cudart")
    except Exception:  # pathfinder absent or raising means "not found"; the fallback decides
        found = None
    if not found and os.path.isdir("/usr/local/cuda/include"):
        found = "/usr/local/cuda/include"
    return found or None


# ------------------------------------------------------------------------------ cancellation
_FLOW_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_FLOW_MIN_VERSION = (12, 8)


class Cancel:
    """A cancel request for one compile, read by NVRTC's flow callback.

    NVRTC calls the callback from the compiling thread a few times a second (about 60 calls
    in a 4 s compile here); it answers 1 once :meth:`set` was called, and NVRTC then stops
    with NVRTC_ERROR_CANCELLED (within about 2.5 s on a slow machine: some phases do not
    poll). The callback is a ctypes function, so each poll takes the GIL briefly.
    """

    __slots__ = ("_flag", "callback")

    def __init__(self) -> None:
        self._flag = [0]
        flag = self._flag
        # The ctypes object must outlive every call NVRTC makes: it is kept here, and the
        # Cancel is held by the compile until its program is destroyed.
        self.callback = _FLOW_CALLBACK(lambda _payload, _reserved: flag[0])

    def set(self) -> None:
        self._flag[0] = 1

    @property
    def requested(self) -> bool:
        return bool(self._flag[0])


def _loaded_libnvrtc_path() -> str | None:
    """The libnvrtc file this process has mapped (CuPy's), from /proc/self/maps."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if re.fullmatch(r"libnvrtc\.so(\.\d+)*", os.path.basename(path)):
                    return path
    except OSError:
        return None
    return None


@functools.cache
def _flow_api() -> tuple[object | None, str]:
    """(``nvrtcSetFlowCallback`` bound with ctypes, "") or (None, why compiles cannot be cancelled)."""
    try:
        library()
    except NvrtcUnavailable as exc:
        return None, str(exc)
    path = _loaded_libnvrtc_path()
    if path is None:
        return None, "the loaded libnvrtc was not found in /proc/self/maps"
    try:
        # RTLD_NOLOAD: the very library CuPy loaded, never a second copy from elsewhere.
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LOCAL)
        major, minor = ctypes.c_int(), ctypes.c_int()
        if lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)) != 0:
            return None, "nvrtcVersion failed"
        if (major.value, minor.value) < _FLOW_MIN_VERSION:
            return None, f"NVRTC {major.value}.{minor.value} has no flow callback (12.8 or newer has)"
        if (major.value, minor.value) != tuple(library().getVersion()):
            return None, f"{path} is not the libnvrtc CuPy uses"
        setter = lib.nvrtcSetFlowCallback
    except (OSError, AttributeError) as exc:
        return None, f"nvrtcSetFlowCallback could not be bound: {exc}"
    setter.argtypes = [ctypes.c_void_p, _FLOW_CALLBACK, ctypes.c_void_p]
    setter.restype = ctypes.c_int
    return setter, ""


def flow_callbacks() -> bool:
    """True when compiles can be cancelled (NVRTC 12.8+ and its flow callback bound)."""
    return _flow_api()[0] is not None


def cannot_cancel_reason() -> str:
    return _flow_api()[1]


def _install(prog: object, cancel: Cancel | None) -> None:
    if cancel is None or not isinstance(prog, int):
        return
    setter = _flow_api()[0]
    if setter is not None:
        setter(prog, cancel.callback, None)  # a failure only means this compile cannot be cancelled


def _compile(source: str, program_name: str, options: tuple[str, ...],
             cancel: Cancel | None = None) -> tuple[ModuleType, object, str]:
    """Create and compile a program; the caller owns (and must destroy) the returned program.

    ``cancel`` (see :class:`Cancel`) must stay referenced until the program is destroyed.
    """
    lib = library()
    try:
        prog = lib.createProgram(source, program_name, (), ())
    except lib.NVRTCError as exc:  # out of memory before there is a program (and a log)
        raise NvrtcFailure(int(exc.status), "", options) from None
    try:
        _install(prog, cancel)
        lib.compileProgram(prog, [*options, *_NVRTC_ONLY_OPTIONS])
    except lib.NVRTCError as exc:
        log = _read_log(lib, prog)
        lib.destroyProgram(prog)
        raise NvrtcFailure(int(exc.status), log, options) from None
    except BaseException:
        lib.destroyProgram(prog)
        raise
    return lib, prog, _read_log(lib, prog)


def _read_log(lib: ModuleType, prog: object) -> str:
    try:
        return clean_log(lib.getProgramLog(prog))
    except lib.NVRTCError as exc:
        return f"(the program log could not be read: {exc})\n"


def compile_cubin(source: str, program_name: str, options: tuple[str, ...],
                  cancel: Cancel | None = None) -> tuple[bytes, str]:
    """CUBIN bytes and the full log (warnings and the ptxas report), or :class:`NvrtcFailure`.

    ``cancel.set()`` from another thread stops the compile (NVRTC_ERROR_CANCELLED) when
    :func:`flow_callbacks` is true. CuPy's ``getCUBIN`` drops the cubin's last byte ("strip
    the trailing NULL"); the driver tolerates that but cuobjdump and nvdisasm do not, so it is
    padded back here.
    """
    lib, prog, log = _compile(source, program_name, options, cancel)
    try:
        cubin = lib.getCUBIN(prog) + b"\x00"
    finally:
        lib.destroyProgram(prog)
    if not cubin.startswith(ELF_MAGIC) or len(cubin) < 64:
        note = f"cuvil-dsl: NVRTC returned {len(cubin)} bytes that are not an ELF CUBIN\n"
        raise NvrtcFailure(11, log + note, options)
    return cubin, log


def compile_ptx(source: str, program_name: str, options: tuple[str, ...]) -> tuple[str, str]:
    """PTX text and log; used only to show humans the PTX, never loaded."""
    lib, prog, log = _compile(source, program_name, options)
    try:
        ptx = lib.getPTX(prog)
    finally:
        lib.destroyProgram(prog)
    text = ptx.decode("utf-8", errors="replace") if isinstance(ptx, bytes) else str(ptx)
    return text.rstrip("\x00"), log
