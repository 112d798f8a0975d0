"""Hypothesis strategies for the hardening fuzzers: near-valid inputs, not just random bytes.

Random bytes are rejected by the first character of the lexer; the interesting failures live
deeper (the checker, the planner, the spec binding, the .npy reader). So:

- :func:`programs` builds *typed* ``.cuvil`` programs from the grammar: parameters with real
  dtypes and symbolic shapes, statements drawn from every expression form (operators, `.T`,
  `@`, reductions with axes, softmax, norms, where, cast, host statements, graph and kernel
  blocks), so a good share check clean and reach the reference executor; :func:`mutated`
  then breaks them token by token (delete, duplicate, swap, replace with a keyword, a huge or
  malformed number, a stray brace, a unicode character, a truncation).
- :func:`specs` builds spec mappings from the real schema (every section and key of
  LANGUAGE.md section 7) whose values are plausible or hostile (wrong types, huge and
  negative numbers, NaN and infinities, unicode, deep nesting), and :func:`yaml_text` renders
  them, sometimes with YAML-level damage (tags, aliases, tabs, BOMs, binary junk, long lines).
- :func:`npy_bytes` builds ``.npy`` files with wrong magic, bad versions, truncated headers,
  huge or negative declared shapes, object, structured, unicode and big-endian dtypes,
  Fortran order, and truncated or oversized data.
"""

from __future__ import annotations

import ast
import struct

import numpy as np
import yaml
from hypothesis import strategies as st

# ---------------------------------------------------------------------------- programs
FLOATS = ("f16", "bf16", "f32", "f64")
DTYPES = FLOATS + ("i32", "bool")
UNARY = ("abs", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sin", "cos", "tanh", "erf", "sigmoid",
         "relu", "gelu", "gelu_tanh", "silu")
BINARY_OPS = ("+", "-", "*", "/", "**", "<", "<=", ">", ">=", "==", "!=", "&", "|", "@")
KEYWORDS = ("pipeline", "graph", "kernel", "true", "false", "sync")
# Names a user may pick that collide with something: C, C++, CUDA and Python keywords and
# builtins, the generated names of the renderers (b0, u0, t1, cvl_*), reserved identifiers.
HOSTILE_NAMES = (
    "int", "float", "double", "half", "__half", "__nv_bfloat16", "float4", "threadIdx", "blockIdx",
    "__syncthreads", "return", "if", "for", "while", "const", "volatile", "extern", "static",
    "goto", "auto", "register", "restrict", "__restrict__", "template", "class", "namespace",
    "main", "printf", "malloc", "None", "True", "False", "lambda", "def", "import", "yield",
    "await", "nonlocal", "global", "del", "pass", "np", "numba", "math", "cvl", "prange",
    "b0", "b1", "u0", "u1", "t1", "t2", "i", "n", "row", "acc", "smem", "cvl_main_k1", "main_k1",
    "forward_k1", "_", "__", "___init__", "__class__", "__import__", "_Z3foo", "x" * 300,
    "A" * 64 + "_" * 40, "__launch_bounds__", "asm", "__device__", "__global__", "sizeof", "typeof",
)
NUMBERS = ("0", "1", "2", "0.5", ".5", "1e-5", "3.0E+2", "2147483647", "2147483648", "99999999999999999999",
           "1e999", "1e-999", "0.0", "65504.0", "65520.0", "3.4e38", "1.8e308")
BAD_TOKENS = ("2.", "1.e5", "{", "}", "(", ")", "[", "]", ",", ";", "=", "->", ":", ".T", "..", "#", "\n",
              "\t", "\r", "\x00", "\u00e9", "\u200b", "\U0001F600", "\ufeff", "'", '"', "\\", "$", "`", "?",
              "**", "-", "~", "@", "&&", "||", "!", "<<", "!=", "==", "*/", "/*", "//", '"""')

NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True).filter(lambda s: s not in KEYWORDS)


@st.composite
def expressions(draw, names: list[str], depth: int = 0) -> str:
    """A random expression over ``names``: every form of LANGUAGE.md section 5."""
    leaf = st.one_of(st.sampled_from(names), st.sampled_from(NUMBERS[:8]), st.sampled_from(("true", "false")))
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return draw(leaf)
    sub = expressions(names, depth + 1)
    form = draw(st.integers(0, 11))
    if form == 0:
        return f"({draw(sub)} {draw(st.sampled_from(BINARY_OPS))} {draw(sub)})"
    if form == 1:
        return f"{draw(st.sampled_from(UNARY))}({draw(sub)})"
    if form == 2:
        return f"{draw(st.sampled_from(('sum', 'max', 'min', 'mean')))}({draw(sub)}, axis={draw(st.integers(-3, 2))}" \
               f"{', keepdims=true' if draw(st.booleans()) else ''})"
    if form == 3:
        func = draw(st.sampled_from(("softmax", "log_softmax")))
        return f"{func}({draw(sub)}{', axis=' + str(draw(st.integers(-2, 1))) if draw(st.booleans()) else ''})"
    if form == 4:
        return f"where({draw(sub)} > {draw(sub)}, {draw(sub)}, {draw(sub)})"
    if form == 5:
        return f"cast({draw(sub)}, {draw(st.sampled_from(DTYPES))})"
    if form == 6:
        return f"{draw(sub)}.T"
    if form == 7:
        norm = draw(st.sampled_from(("layernorm", "rmsnorm")))
        return f"{norm}({draw(sub)}{', eps=1e-5' if draw(st.booleans()) else ''})"
    if form == 8:
        return f"{draw(st.sampled_from(('maximum', 'minimum')))}({draw(sub)}, {draw(sub)})"
    if form == 9:
        return f"-{draw(sub)}"
    if form == 10:
        return f"({draw(sub)} @ {draw(sub)}.T)"
    return f"~({draw(sub)} < {draw(sub)})"


@st.composite
def programs(draw) -> str:
    """A typed program: most check clean (f32/f64 over [N, N] and [N]), the rest fail in the checker."""
    dtype = draw(st.sampled_from(("f32", "f64", "f32", "f64", "f16", "bf16", "i32")))
    params = [("x", f"{dtype}[N, N]"), ("v", f"{dtype}[N]")]
    if draw(st.booleans()):
        params.append(("w", f"{draw(st.sampled_from(DTYPES))}[{draw(st.sampled_from(('N', '1', '4', 'M')))}, N]"))
    if draw(st.booleans()):
        default = draw(st.sampled_from(("", " = 0.5", " = -2", " = 1e-3")))
        params.append(("alpha", f"{'i32' if dtype == 'i32' else 'f32'}{default}"))
    names = [p for p, _ in params]
    body: list[str] = []
    bound: list[str] = []
    for i in range(draw(st.integers(0, 4))):
        target = f"t{i}"
        body.append(f"{target} = {draw(expressions(names + bound))}")
        bound.append(target)
    # the result: a well-typed final expression most of the time
    final = draw(st.sampled_from((
        "x * 2", "exp(x) + v", "softmax(x, axis=-1)", "x @ x.T", "layernorm(x) * v", "relu(x - v)",
        "sum(x, axis=1, keepdims=true) + x", "where(x > v, x, v)", "cast(x, f32)" if dtype != "f32" else "x.T",
    )))
    if bound and draw(st.booleans()):
        final = f"{draw(st.sampled_from(bound))} + x * 0" if dtype != "bool" else final
    body.append(f"y = {final}")
    if draw(st.booleans()):
        body.append(draw(st.sampled_from(("print(y)", "assert_finite(y)", "sync", "print(x)"))))
    wrap = draw(st.sampled_from(("none", "graph", "kernel", "graph_kernel")))
    indent = "    "
    lines = [indent + s for s in body]
    if wrap in ("kernel", "graph_kernel"):
        kernel_part = [s for s in lines if not any(h in s for h in ("print(", "assert_finite(", "sync"))]
        host_part = [s for s in lines if s not in kernel_part]
        lines = [indent + "kernel k0 {", *[indent + s for s in kernel_part], indent + "}", *host_part]
    if wrap in ("graph", "graph_kernel"):
        inner = [s for s in lines if not any(h in s for h in ("print(", "assert_finite(", "sync"))]
        host_part = [s for s in lines if s not in inner]
        lines = [indent + "graph g0 {", *[indent + s for s in inner], indent + "}", *host_part]
    header = f"pipeline p({', '.join(f'{n}: {t}' for n, t in params)}) -> y: {dtype if dtype != 'i32' else 'i32'}[N, N] {{"
    return "\n".join([header, *lines, "}"]) + "\n"


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    word = ""
    for ch in text:
        if ch.isalnum() or ch in "_.":
            word += ch
            continue
        if word:
            out.append(word)
            word = ""
        out.append(ch)
    if word:
        out.append(word)
    return out


@st.composite
def mutated(draw, base: st.SearchStrategy[str] | None = None) -> str:
    """A program with a few token-level edits: near-valid input that reaches every recovery path."""
    text = draw(base if base is not None else programs())
    toks = _tokens(text)
    replacements = st.one_of(st.sampled_from(KEYWORDS), st.sampled_from(NUMBERS), st.sampled_from(BAD_TOKENS),
                             st.sampled_from(HOSTILE_NAMES[:30]), st.sampled_from(UNARY), st.text(max_size=3))
    for _ in range(draw(st.integers(1, 4))):
        if not toks:
            break
        i = draw(st.integers(0, len(toks) - 1))
        edit = draw(st.integers(0, 5))
        if edit == 0:
            del toks[i]
        elif edit == 1:
            toks.insert(i, toks[i])
        elif edit == 2 and i + 1 < len(toks):
            toks[i], toks[i + 1] = toks[i + 1], toks[i]
        elif edit == 3:
            toks[i] = draw(replacements)
        elif edit == 4:
            toks.insert(i, draw(replacements))
        else:
            toks = toks[:i]
    return "".join(toks)


# ---------------------------------------------------------------------------- values
HUGE_INTS = (2**31, 2**31 - 1, -(2**31) - 1, 2**62, 2**63, 2**64, 10**30, -(10**30), 10**400, -1, 0)
ODD_FLOATS = (float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 5e-324, 1e30, -0.0, 0.5, 1e-30)
ODD_STRINGS = ("", " ", "auto", "sm_90", "sm_999", "sm_90a", "all", "none", "numpy", "../x.npy", "/etc/passwd",
               "\u00e9\u00e8", "\U0001F600", "a" * 5000, "\x00", "!!python/object", "${HOME}", "~", "-", "null",
               "1e999", "0x1F", "normal", "zeros", "uniform", "arange", "ones", "file.npy", "x\ny", "'\"")

hostile_scalars = st.one_of(
    st.sampled_from(HUGE_INTS), st.sampled_from(ODD_FLOATS), st.sampled_from(ODD_STRINGS), st.booleans(), st.none(),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
)


def hostile_values(depth: int = 2) -> st.SearchStrategy:
    """Any YAML value: scalars, lists and mappings, nested a few levels."""
    if depth <= 0:
        return hostile_scalars
    inner = hostile_values(depth - 1)
    return st.one_of(hostile_scalars, st.lists(inner, max_size=3),
                     st.dictionaries(st.one_of(st.text(max_size=8), st.sampled_from(("N", "x", "init", "file"))),
                                     inner, max_size=3))


def _maybe(plausible: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly a plausible value, sometimes a hostile one."""
    return st.one_of(plausible, plausible, plausible, hostile_values(1))


SMALL_SIZES = st.integers(1, 6)
ABSURD_SIZES = st.sampled_from((0, -1, -(2**63), 2**31, 2**40, 2**62, 2**64, 10**30, 1e30, 2.5, "8", None, True))

INPUT_SOURCES = st.one_of(
    st.fixed_dictionaries({"init": st.just("normal")}, optional={
        "mean": _maybe(st.floats(-10, 10)), "std": _maybe(st.floats(0, 10)), "seed": _maybe(st.integers(0, 2**70))}),
    st.fixed_dictionaries({"init": st.just("uniform")}, optional={
        "low": _maybe(st.floats(-10, 0)), "high": _maybe(st.floats(0, 10)), "seed": _maybe(st.integers(0, 10))}),
    st.fixed_dictionaries({"init": st.sampled_from(("zeros", "ones", "arange", "bogus"))}),
    st.fixed_dictionaries({"file": st.sampled_from(("x.npy", "missing.npy", "../x.npy", "/etc/passwd", "sub", ""))}),
    st.fixed_dictionaries({"file": st.just("x.npy"), "init": st.just("normal")}),
    hostile_values(1),
)

KERNEL_SETTINGS = st.fixed_dictionaries({}, optional={
    "launch_bounds": _maybe(st.fixed_dictionaries({"max_threads": st.sampled_from((32, 256, 1024, 33, 2048, 0))},
                                                  optional={"min_blocks": st.integers(-1, 40)})),
    "block": _maybe(st.sampled_from((32, 64, 128, 256, 1024, 0, 31, 4096))),
    "tile": _maybe(st.fixed_dictionaries({}, optional={k: st.sampled_from((1, 16, 64, 256, 3, 512, 0)) for k in "mnk"})),
    "max_registers": _maybe(st.integers(0, 300)),
})


@st.composite
def specs(draw, run_sized: bool = True) -> dict:
    """A spec mapping over the real schema, for a program with symbol ``N`` and inputs x, v, w.

    With ``run_sized``, sizes and iteration counts are either small or absurd, never in the
    range that is valid but slow (a 10 GB run is not a hang, it is a big run).
    """
    sizes = st.one_of(SMALL_SIZES, SMALL_SIZES, ABSURD_SIZES) if run_sized else st.one_of(SMALL_SIZES, ABSURD_SIZES)
    counts = st.one_of(st.integers(0, 2), st.sampled_from((-1, 10**12, 2**63, 1.5, "10", None)))
    spec: dict = {"pipeline": draw(st.one_of(st.just("prog.cuvil"), st.just("prog.cuvil"),
                                             st.sampled_from(ODD_STRINGS), hostile_values(1)))}
    optional = {
        "entry": _maybe(st.sampled_from(("p", "q", ""))),
        "shapes": _maybe(st.dictionaries(st.sampled_from(("N", "M", "Q", "x", "")), sizes, max_size=3)),
        "params": _maybe(st.dictionaries(st.sampled_from(("alpha", "beta", "x")),
                                         st.one_of(st.floats(-4, 4), st.sampled_from(HUGE_INTS), st.booleans()),
                                         max_size=2)),
        "target": _maybe(st.fixed_dictionaries({}, optional={
            "backend": _maybe(st.sampled_from(("auto", "cuda", "cpu", "reference", "tpu"))),
            "arch": _maybe(st.sampled_from(("auto", "sm_80", "sm_90a", "sm_70", "sm_1000", "compute_90"))),
            "compiler": _maybe(st.sampled_from(("nvrtc", "nvcc", "gcc"))),
            "fallback": _maybe(st.sampled_from(("nvcc", "none", "yes"))),
            "fast_math": _maybe(st.booleans()), "tf32": _maybe(st.booleans()),
            "options": _maybe(st.lists(st.sampled_from(("-O3", "--use_fast_math", "-DX=1", ";rm -rf /", "")), max_size=3)),
            "devices": _maybe(st.sampled_from(([0], [0, 0], [-1], "all", [], [2**40]))),
        })),
        "kernels": _maybe(st.dictionaries(st.sampled_from(("main_k1", "k0", "g0_k1", "nope")), KERNEL_SETTINGS, max_size=2)),
        "inputs": _maybe(st.dictionaries(st.sampled_from(("x", "v", "w", "y", "alpha", "zz")), INPUT_SOURCES, max_size=3)),
        "check": _maybe(st.fixed_dictionaries({}, optional={
            "reference": _maybe(st.sampled_from(("numpy", "none", "torch"))),
            "rtol": _maybe(st.floats(0, 1)), "atol": _maybe(st.floats(0, 1))})),
        "run": _maybe(st.fixed_dictionaries({}, optional={"warmup": counts, "iterations": counts})),
        "budget": _maybe(st.fixed_dictionaries({}, optional={
            "backend": st.sampled_from(("cuda", "cpu", "reference", "x")), "p50_us": _maybe(st.floats(0, 1e6)),
            "p99_us": _maybe(st.floats(0, 1e6)), "max_spill_bytes": _maybe(st.integers(-1, 10)),
            "max_registers": _maybe(st.integers(0, 300)), "regress_pct": _maybe(st.floats(-1, 100))})),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(strategy)
    if draw(st.integers(0, 9)) == 0:
        spec[draw(st.sampled_from(("pipline", "shape", "Inputs", "extra", "")))] = draw(hostile_values(1))
    return spec


YAML_DAMAGE = (
    "!!python/object/new:os.system ['echo pwned']", "!!python/name:os.system", "!!python/object/apply:os.getcwd []",
    "!!binary aGVsbG8=", "!custom x", "&a [*a]", "*undefined", "<<: {x: 1}", "\t", "\ufeff", "\x00", "\x1b[31m",
    "? [complex, key]\n: 1", "%YAML 1.1\n---", "---\n---", "...", "{", "[", "'", '"', "|\n  block", "- - - -",
    "2001-12-14t21:59:43.10-05:00", "0o777", "0x_ff", ".nan", "-.inf", "~",
)


@st.composite
def yaml_text(draw, spec_strategy: st.SearchStrategy | None = None) -> bytes:
    """A spec as YAML bytes, sometimes damaged at the text or byte level."""
    data = draw(spec_strategy if spec_strategy is not None else specs())
    try:
        text = yaml.safe_dump(data, default_flow_style=draw(st.sampled_from((None, True, False))), allow_unicode=True,
                              width=draw(st.sampled_from((80, 10**6))))
    except (yaml.YAMLError, ValueError, OverflowError):
        text = repr(data)
    damage = draw(st.integers(0, 6))
    if damage == 1:
        lines = text.splitlines()
        i = draw(st.integers(0, len(lines)))
        lines.insert(i, draw(st.sampled_from(YAML_DAMAGE)))
        text = "\n".join(lines)
    elif damage == 2:
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(YAML_DAMAGE)) + text[i:]
    elif damage == 3:
        text = text[: draw(st.integers(0, len(text)))]
    raw = text.encode("utf-8", "surrogatepass")
    if damage == 4:
        i = draw(st.integers(0, len(raw)))
        raw = raw[:i] + draw(st.binary(min_size=1, max_size=16)) + raw[i:]
    elif damage == 5:
        raw = draw(st.sampled_from((b"", b"\n", b"\xef\xbb\xbf", b"\xff\xfe\x00", b"null", b"[]", b"42", b"pipeline",
                                    b"pipeline: " + b"a" * 200_000, b"\x00" * 64)))
    return raw


# ---------------------------------------------------------------------------- .npy files
def _npy_header(descr: str, fortran: bool, shape: str, version: tuple[int, int] = (1, 0), pad: bool = True) -> bytes:
    header = f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"
    prefix_len = 10 if version == (1, 0) else 12
    if pad:
        header += " " * ((64 - (prefix_len + len(header) + 1) % 64) % 64)
    header += "\n"
    data = header.encode("latin1")
    magic = b"\x93NUMPY" + bytes(version)
    length = struct.pack("<H", len(data)) if version == (1, 0) else struct.pack("<I", len(data))
    return magic + length + data


DESCRS = ("'<f4'", "'>f4'", "'<f8'", "'<f2'", "'<i4'", "'>i4'", "'|b1'", "'<u2'", "'|O'", "'<U5'", "'|V16'",
          "'<c8'", "'<i8'", "[('a', '<f4'), ('b', '|O')]", "[('a', '<f4')]", "('<f4', (2,))", "('<f4', (100000, 100000))",
          "'<M8[s]'", "'float32'", "'bogus'", "42", "None", "'<f4' + '<f4'", "__import__('os').getcwd()")
SHAPES = ("(3, 3)", "(3,)", "()", "(0, 3)", "(3, 0)", "(-1, 3)", "(2**62, 2)", "(4611686018427387904, 4)",
          "(1, 1, 1, 1)", "(3, 3.0)", "('3', 3)", "(True, 3)", "[3, 3]", "None", "(10**30,)", "(3, 3, 3)")


@st.composite
def npy_bytes(draw) -> bytes:
    """A file that claims to be .npy: from valid to broken in each part of the format."""
    kind = draw(st.integers(0, 5))
    if kind == 0:  # a real array, maybe of an odd dtype or order
        dtype = draw(st.sampled_from(("<f4", ">f4", "<f8", "<f2", "<i4", "|b1", "<u2", "<i8", ">f8")))
        shape = draw(st.sampled_from(((3, 3), (3,), (1, 3), (0, 3), (3, 3, 1), ())))
        arr = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)
        if draw(st.booleans()) and arr.ndim == 2:
            arr = np.asfortranarray(arr)
        import io

        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        raw = buf.getvalue()
    else:
        descr = draw(st.sampled_from(DESCRS))
        shape = draw(st.sampled_from(SHAPES))
        version = draw(st.sampled_from(((1, 0), (2, 0), (3, 0), (0, 0), (255, 255))))
        raw = _npy_header(descr, draw(st.booleans()), shape, version, pad=draw(st.booleans()))
        try:
            count = int(np.prod(ast.literal_eval(shape))) if shape not in ("None",) else 0
        except (ValueError, TypeError, SyntaxError, OverflowError):
            count = 0
        raw += b"\x00" * min(max(count, 0) * 4, draw(st.sampled_from((0, 4, 36, 1 << 12))))
    damage = draw(st.integers(0, 4))
    if damage == 1:
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif damage == 2:
        raw = draw(st.sampled_from((b"\x93NUMPX", b"PK\x03\x04", b"\x80\x04\x95", b"", b"\x93NUMPY"))) + raw[6:]
    elif damage == 3:
        i = draw(st.integers(0, len(raw)))
        raw = raw[:i] + draw(st.binary(min_size=1, max_size=8)) + raw[i + 1:]
    elif damage == 4 and len(raw) > 10:
        raw = raw[:8] + struct.pack("<H", draw(st.sampled_from((0, 1, 0xFFFF, 70)))) + raw[10:]
    return raw
