"""The values that cross the compile service's boundary: what goes in, what comes out.

They are plain frozen dataclasses so a unit can be hashed into a cache key, pickled to a
worker process, and compared in tests without any compiler loaded.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Literal

ELF_MAGIC = b"\x7fELF"  # every CUBIN is an ELF file; anything else is never accepted as one

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Compiler = Literal["nvrtc", "nvcc"]
CacheOutcome = Literal["miss", "hit-memory", "hit-disk"]


@dataclass(frozen=True)
class CompileUnit:
    """One CUDA C translation unit with one or more ``extern "C" __global__`` kernels.

    ``name`` becomes the NVRTC program name (``<name>.cu``), so compiler errors point at a
    file the user can find under the cache's ``failed/`` folder; it must be a C identifier
    because it is also used in file names and logs.
    """

    name: str
    source: str
    kernels: tuple[str, ...]
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _IDENT.fullmatch(self.name):
            raise ValueError(f"compile unit name {self.name!r} is not a C identifier")
        if not self.kernels:
            raise ValueError(f"compile unit {self.name!r} declares no kernels")
        for kernel in self.kernels:
            if not _IDENT.fullmatch(kernel):
                raise ValueError(f"kernel name {kernel!r} in unit {self.name!r} is not a C identifier")
        if not all(isinstance(opt, str) for opt in self.options):
            raise ValueError(f"options of unit {self.name!r} must be strings")


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one entry function (bytes and counts, all per thread/block as ptxas says)."""

    name: str
    registers: int
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0
    shared_bytes: int = 0
    barriers: int = 0

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "registers": self.registers,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "stack_bytes": self.stack_bytes,
            "shared_bytes": self.shared_bytes,
            "barriers": self.barriers,
        }

    @staticmethod
    def from_json(data: dict) -> "KernelResources":
        return KernelResources(
            name=str(data["name"]),
            registers=int(data["registers"]),
            spill_store_bytes=int(data["spill_store_bytes"]),
            spill_load_bytes=int(data["spill_load_bytes"]),
            stack_bytes=int(data["stack_bytes"]),
            shared_bytes=int(data["shared_bytes"]),
            barriers=int(data["barriers"]),
        )


@dataclass(frozen=True)
class BuildArtifact:
    """A compiled binary and what is known about how it was made; this is what the cache stores.

    It carries no :class:`CompileUnit`, so one artifact can serve every caller that asks
    for the same key.
    """

    cubin: bytes
    resources: dict[str, KernelResources]
    log: str
    compiler: Compiler
    compiler_version: str
    compile_ms: float
    nvrtc_result: int | None = None
    fallback: str | None = None


@dataclass(frozen=True)
class CompiledUnit:
    """The result for one unit: CUBIN bytes for ``arch`` plus ptxas's report per kernel.

    ``compile_ms`` is what this request cost (a cache hit is microseconds); ``cache`` says
    which layer answered; ``fallback`` names why nvcc built it instead of NVRTC, if it did.
    """

    unit: CompileUnit
    arch: str
    cubin: bytes = field(repr=False)
    resources: dict[str, KernelResources]
    compiler: Compiler
    compiler_version: str
    cache_hit: bool
    compile_ms: float
    log: str = field(repr=False)
    key: str
    cache: CacheOutcome = "miss"
    fallback: str | None = None


# ------------------------------------------------------------------ expected compile time
# The compile service starts the longest compiles first (see ``compile_units``). Before a unit
# has ever been compiled, how long it will take is estimated from its source: NVRTC's time
# follows the code it has to generate, which is the statements *after* ``#pragma unroll``
# loops are unrolled (a 4x8 mma tile is 32 inlined mma per k-step where a 2x2 tile is 4), with
# libdevice math weighing far more than arithmetic (one f64 ``pow`` inlines hundreds of
# instructions). Measured on the example pipelines (23 units, NVRTC 13.0, sm_90): rank
# correlation 0.8 with the real times, against 0.56 for source length, and the three longest
# units ranked first. Only the order matters; the scale is roughly milliseconds on a 2020s
# x86 core and is recalibrated by recorded times when there are any.

_MATH_WEIGHT = {
    # double precision, inlined from libdevice
    "pow": 60, "tanh": 25, "exp": 20, "exp2": 15, "exp10": 20, "expm1": 20, "log": 20, "log2": 20, "log10": 20,
    "log1p": 20, "sin": 30, "cos": 30, "tan": 35, "sincos": 40, "sinh": 25, "cosh": 25, "asinh": 25, "acosh": 25,
    "atanh": 25, "erf": 25, "erfc": 25, "erfinv": 30, "asin": 25, "acos": 25, "atan": 25, "atan2": 30, "cbrt": 15,
    "hypot": 10, "fmod": 15, "sqrt": 4, "rsqrt": 4,
    # single precision (``__expf`` and friends are one instruction and weigh nothing extra)
    "powf": 20, "sinf": 12, "cosf": 12, "tanf": 14, "sincosf": 16, "erff": 8, "erfcf": 8, "erfinvf": 10,
    "tanhf": 6, "expf": 4, "exp2f": 3, "exp10f": 4, "expm1f": 6, "logf": 5, "log2f": 4, "log10f": 5, "log1pf": 6,
    "sinhf": 6, "coshf": 6, "asinf": 8, "acosf": 8, "atanf": 8, "atan2f": 10, "cbrtf": 5, "hypotf": 4, "fmodf": 8,
    "sqrtf": 1, "rsqrtf": 1,
}
_ASM_OPERAND_WEIGHT = 0.25  # inline PTX: per %operand (a 64-register wgmma is one statement of 70 operands)
_BASE_MS, _MS_PER_WEIGHT = 90.0, 0.3  # fitted on the example pipelines; see above
_MULT_LIMIT = 1 << 20  # nested unrolled loops multiply; cap so a pathological source cannot overflow
_ATTRIBUTES = frozenset({"__launch_bounds__", "__align__", "__attribute__", "__cluster_dims__", "__declspec",
                         "alignas", "decltype", "sizeof", "static_assert"})


@functools.cache
def _patterns() -> tuple[re.Pattern, re.Pattern]:
    # findall gives (the token, unroll count, for header, called name). No ``\b`` before the names:
    # it costs half the time, and scanning left to right a match cannot start inside a word
    # (one that ends before "(" matched from its first letter; one that does not, never matches).
    token = re.compile(
        r'("(?:\\.|[^"\\\n])*"'        # string literal: inline PTX, its %operands counted
        r"|'(?:\\.|[^'\\\n])*'"       # character literal
        r"|//[^\n]*|/\*.*?\*/"           # comments
        r"|#[ \t]*pragma[ \t]+unroll(?:[ \t]+\(?(\d+)\)?)?"  # the unroll count, if any
        r"|#[^\n]*"                       # any other preprocessor line
        r"|for\s*\(([^;(){}]*;[^;(){}]*;[^(){}]*)\)"  # a for header without parentheses inside
        r"|([A-Za-z_]\w*)(?=\s*\()"         # a name followed by "(": a call, a keyword, a definition
        r"|[(){};])",
        re.S,
    )
    header = re.compile(r"\s*(?:(?:unsigned|const|int|long|size_t)\s+)*([A-Za-z_]\w*)\s*=\s*(-?\d+)[uUlL]*\s*;"
                        r"\s*\1\s*(<=?)\s*(-?\d+)[uUlL]*\s*;"
                        r"\s*(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*(\d+))\s*")
    return token, header


def _trips(header: str) -> int | None:
    """Trip count of ``for (int i = 0; i < 8; ++i)`` and the like; None when not a constant."""
    m = _patterns()[1].fullmatch(header)
    if m is None:
        return None
    low, op, high, step = int(m.group(2)), m.group(3), int(m.group(4)), int(m.group(5) or 1)
    if step <= 0:
        return None
    return max(0, (high - low + (op == "<=") + step - 1) // step)


_BRACES = re.compile(r"[{}]")


def _definitions(preamble: str, name: str) -> list[str]:
    """Bodies of the functions called ``name`` defined in ``preamble`` (every overload)."""
    bodies = []
    at = preamble.find(name)
    while at >= 0:
        end = at + len(name)
        before = preamble[at - 1] if at else " "
        after = preamble[end:end + 1]
        at = preamble.find(name, end)
        if before.isalnum() or before == "_" or after.isalnum() or after == "_":
            continue
        paren = preamble.find("(", end)
        if paren < 0 or preamble[end:paren].strip():
            continue
        close = preamble.find(")", paren)  # helpers' parameter lists hold no parentheses
        brace = preamble.find("{", close)
        if close < 0 or brace < 0 or preamble.find(";", close, brace) >= 0 or preamble[close + 1:brace].strip() not in (
                "", "const"):
            continue  # a call or a declaration, not a definition
        depth = 0
        for b in _BRACES.finditer(preamble, brace):
            depth += 1 if b.group(0) == "{" else -1
            if not depth:
                bodies.append(preamble[brace + 1:b.start()])
                break
    return bodies


class _Helpers:
    """Weights of the helper functions a kernel calls, looked up in the unit's preamble on demand."""

    def __init__(self, preamble: str):
        self.preamble = preamble
        self.weights: dict[tuple[str, bool], float] = {}

    def weight(self, name: str, heavy: bool) -> float:
        """The heaviest overload of ``name`` (``heavy``) or the lightest; 0 for names defined elsewhere."""
        found = self.weights.get((name, heavy))
        if found is None:
            self.weights[name, heavy] = 0.0  # a recursive helper counts its own calls as nothing
            each = [_weigh(body, self, heavy) for body in _definitions(self.preamble, name)] or [0.0]
            found = self.weights[name, heavy] = max(each) if heavy else min(each)
        return found


def _weigh(text: str, helpers: _Helpers, heavy: bool) -> float:
    """Statements, math calls and helper calls in ``text``, each counted once per unrolled copy."""
    total = 0.0
    frames: list[tuple[bool, int]] = []  # (a braced block, its multiplier); unbraced loop bodies are False
    mult = 1
    unroll: int | None = None  # a pending ``#pragma unroll``: 0 = fully, n = by n
    skip_header = 0  # inside a ``for ( ... )`` header the pattern could not take whole: parenthesis depth
    expect_header = False  # just saw such a ``for``
    loop_factor: int | None = None  # a for header just closed: how many copies its body makes

    def pop() -> None:
        nonlocal mult
        mult = max(1, mult // frames.pop()[1])

    def end_statement() -> None:  # an unbraced loop body ends with the statement or block it holds
        while frames and not frames[-1][0]:
            pop()

    for tok, count, header, called in _patterns()[0].findall(text):
        if skip_header:
            skip_header += (tok == "(") - (tok == ")")
            if not skip_header:
                loop_factor, unroll = 1, None  # bounds we cannot read: counted once
            continue
        if expect_header:
            expect_header = False
            if tok == "(":
                skip_header = 1
                continue
        if loop_factor is not None:
            frames.append((tok == "{", loop_factor))
            mult = min(_MULT_LIMIT, mult * loop_factor)
            loop_factor = None
            if tok == "{":
                continue
        first = tok[0]
        if header:
            trips = _trips(header)
            loop_factor = 1
            if unroll is not None and unroll != 1 and trips:
                loop_factor = trips if unroll == 0 else min(trips, unroll)
            unroll = None
        elif called:
            if called == "for":
                expect_header = True
            elif called in _MATH_WEIGHT:
                total += mult * _MATH_WEIGHT[called]
            elif called not in _NOT_HELPERS:
                total += mult * helpers.weight(called, heavy)
        elif first == ";":
            total += mult
            end_statement()
        elif first == "{":
            frames.append((True, 1))
        elif first == "}":
            end_statement()
            if frames:
                pop()
            end_statement()
        elif first == '"':
            total += mult * _ASM_OPERAND_WEIGHT * (tok.count("%") - 2 * tok.count("%%"))
        elif first == "#" and "unroll" in tok:
            unroll = int(count) if count else 0
    return total


_NOT_HELPERS = _ATTRIBUTES | {"if", "while", "switch", "return", "asm", "volatile", "__asm__", "__volatile__"}


@functools.lru_cache(maxsize=256)
def estimated_compile_ms(source: str) -> float:
    """How long NVRTC should take to compile ``source``, judged from the source alone (see above).

    Only the kernels are read (from the first line that says ``__global__``); the helpers they
    call are looked up before it, weighed once and charged at every call. Of overloads
    (``float``/``double``) the heavier counts when the kernels mention ``double``, else the lighter.
    """
    start = source.rfind("\n", 0, max(0, source.find("__global__"))) + 1  # that line, or the whole source
    kernels = source[start:]
    try:
        return _BASE_MS + _MS_PER_WEIGHT * _weigh(kernels, _Helpers(source[:start]), "double" in kernels)
    except (RecursionError, ValueError):  # helpers nested thousands deep; a number too long for int()
        return _BASE_MS + _MS_PER_WEIGHT * len(source) / 20  # about one statement per 20 characters
