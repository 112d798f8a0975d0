"""Property tests: random well-typed expressions, random text, random mutations."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuvil_dsl.diagnostics import Diagnostic
from cuvil_dsl.frontend import check_source
from cuvil_dsl.reference import execute

SHAPE = (3, 4)

# Each generator yields (source text, function of the numpy environment). f64 everywhere, so
# the reference and a direct NumPy evaluation must agree bit for bit.
LEAVES = st.sampled_from([
    ("x", lambda e: e["x"]),
    ("w", lambda e: e["w"]),
    ("r", lambda e: e["r"]),  # f64[N] broadcasts along rows
    ("1.5", lambda e: np.float64(1.5)),
    ("2", lambda e: np.float64(2.0)),
    ("alpha", lambda e: np.float64(e["alpha"])),
])

BINARY = [
    ("+", np.add), ("-", np.subtract), ("*", np.multiply), ("/", np.divide),
]
CALLS1 = [
    ("abs", np.abs), ("exp", np.exp), ("tanh", np.tanh), ("relu", lambda a: np.maximum(a, 0.0)),
    ("sin", np.sin), ("sqrt", np.sqrt),
]
CALLS2 = [("maximum", np.maximum), ("minimum", np.minimum)]


def extend(children):
    binary = st.tuples(children, st.sampled_from(BINARY), children).map(
        lambda t: (f"({t[0][0]} {t[1][0]} {t[2][0]})", lambda e, t=t: t[1][1](t[0][1](e), t[2][1](e))))
    call1 = st.tuples(st.sampled_from(CALLS1), children).map(
        lambda t: (f"{t[0][0]}({t[1][0]})", lambda e, t=t: t[0][1](t[1][1](e))))
    call2 = st.tuples(st.sampled_from(CALLS2), children, children).map(
        lambda t: (f"{t[0][0]}({t[1][0]}, {t[2][0]})", lambda e, t=t: t[0][1](t[1][1](e), t[2][1](e))))
    select = st.tuples(children, children, children).map(
        # `+ x * 0` makes the second branch an f64 tensor: two scalar branches would give f32.
        lambda t: (f"where({t[0][0]} > {t[1][0]}, {t[1][0]}, {t[2][0]} + x * 0)",
                   lambda e, t=t: np.where(t[0][1](e) > t[1][1](e), t[1][1](e), t[2][1](e) + e["x"] * 0)))
    neg = children.map(lambda c: (f"-{c[0]}", lambda e, c=c: -c[1](e)))
    return st.one_of(binary, call1, call2, select, neg)


EXPRS = st.recursive(LEAVES, extend, max_leaves=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=EXPRS, seed=st.integers(0, 2**32 - 1))
def test_reference_equals_direct_numpy(expr, seed):
    text, fn = expr
    src = (
        "pipeline f(x: f64[M, N], w: f64[M, N], r: f64[N], alpha: f64 = 0.25) -> y: f64[M, N] {\n"
        f"    t = {text}\n"
        "    y = t + x * 0 + w * 0 + r * 0 + alpha * 0\n"
        "}\n"
    )
    checked = check_source(src, "prop.cuvil")
    assert checked.ok, [str(d) for d in checked.diagnostics]
    rng = np.random.default_rng(seed)
    env = {"x": rng.normal(size=SHAPE), "w": rng.normal(size=SHAPE), "r": rng.normal(size=SHAPE[1:]), "alpha": 0.25}
    with np.errstate(all="ignore"):
        expected = np.broadcast_to(fn(env), SHAPE).astype(np.float64)
        expected = expected + env["x"] * 0 + env["w"] * 0 + env["r"] * 0 + 0.25 * 0
        got = execute(checked.module.pipelines[0], env, {"alpha": 0.25})["y"]
    np.testing.assert_array_equal(got, expected)


VALID = (
    "pipeline attention(q: f16[B, M, D], k: f16[B, N, D], scale: f32 = 0.125) -> p: f16[B, M, N] {\n"
    "    graph forward {\n"
    "        kernel qk {\n"
    "            s = (q @ k.T) * scale\n"
    "            p = softmax(s, axis=-1)\n"
    "        }\n"
    "    }\n"
    "    sync\n"
    "    print(p)\n"
    "}\n"
)
ALPHABET = st.sampled_from(list("pipeline graph kernel sync()[]{},;:=+-*/@<>!&|~.T#0123456789eE\n\t axyzf16[]_\r") +
                           ["\u00e9", "\x00", "**", "->", "==", "true", "false", "softmax", "print"])


def _assert_only_diagnostics(text: str) -> None:
    result = check_source(text, "fuzz.cuvil")
    for d in result.diagnostics:
        assert isinstance(d, Diagnostic)
        assert d.span.line >= 1 and d.span.column >= 1


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=80).map("".join))
def test_random_text_only_yields_diagnostics(text):
    _assert_only_diagnostics(text)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_programs_only_yield_diagnostics(data):
    text = VALID
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(text)))
        action = data.draw(st.sampled_from(["insert", "delete", "replace"]))
        piece = data.draw(ALPHABET)
        if action == "insert":
            text = text[:pos] + piece + text[pos:]
        elif action == "delete":
            text = text[:pos] + text[pos + 1:]
        else:
            text = text[:pos] + piece + text[pos + len(piece):]
    _assert_only_diagnostics(text)
