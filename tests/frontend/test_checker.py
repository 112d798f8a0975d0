"""The checker's typing rules (LANGUAGE.md section 5) on small programs."""

from __future__ import annotations

import pytest

from cuvil_dsl.frontend import check_source
from cuvil_dsl.ir.printer import format_module


def check(body: str, params: str = "x: f32[M, N], h: f16[M, N], i: i32[M, N], b: bool[M, N], v: f32[N]",
          result: str = "y: f32[M, N]"):
    text = f"pipeline f({params}) -> {result} {{\n{body}\n}}\n"
    return check_source(text, "t.cuvil")


def codes(*args, **kw) -> list[str]:
    return [d.code for d in check(*args, **kw).diagnostics if d.is_error]


def only(body: str, result="y: f32[M, N]", params="x: f32[M, N], v: f32[N]"):
    return [d.code for d in check(body, params=params, result=result).diagnostics if d.is_error]


def test_weak_scalar_takes_the_tensor_dtype_and_is_rounded_explicitly():
    m = check("    y = cast(h * 0.1, f32)", params="h: f16[M, N]").module
    text = format_module(m)
    assert "to_tensor" in text and "{dtype=f16}" in text


@pytest.mark.parametrize("expr, code", [
    ("x + h", "E203"), ("i * 1.5", "E203"), ("i / 2", "E203"), ("b + 1", "E203"), ("exp(i)", "E203"),
    ("mean(i, axis=0)", "E203"), ("~x", "E203"), ("x & x", "E203"), ("where(x, x, x)", "E203"),
    ("b < b", "E203"), ("-b", "E203"), ("x ** i", "E203"),
])
def test_illegal_mixes_are_e203(expr, code):
    assert code in codes(f"    t = {expr}\n    y = x")


@pytest.mark.parametrize("expr", ["i + 2", "i * i - 1", "abs(i)", "relu(i)", "maximum(i, 0)", "sum(i, axis=1)",
                                  "where(b, i, 0)", "i > 3", "(x > 0) & b", "~b", "b == b", "cast(i, f32) / 2"])
def test_legal_i32_and_bool_expressions(expr):
    assert codes(f"    t = {expr}\n    u = t\n    y = x", ) == []


def test_symbols_never_broadcast_and_different_symbols_mismatch():
    assert only("    y = x + w", params="x: f32[M, N], w: f32[M, K]") == ["E204"]


def test_literal_one_broadcasts():
    assert only("    y = x + w", params="x: f32[M, N], w: f32[1, N]") == []


def test_symbol_against_literal_becomes_a_constraint():
    m = check("    y = x + w", params="x: f32[M, N], w: f32[M, 8]").module
    assert {(c.symbol, c.size) for c in m.pipelines[0].constraints} == {("N", 8)}


def test_matmul_batch_broadcast_and_transpose_view():
    r = check("    y = a @ b.T", params="a: f16[2, 1, M, K], b: f16[3, N, K]", result="y: f16[2, 3, M, N]")
    assert not r.diagnostics


def test_reduction_shapes_with_keepdims():
    assert only("    y = x - max(x, axis=1, keepdims=true)") == []
    assert only("    y = x - max(x, axis=1)") == ["E204"]  # [M, N] - [M] broadcasts N against M


def test_result_dtype_and_shape_must_match_exactly():
    assert only("    y = cast(x, f16)") == ["E203"]
    assert only("    y = sum(x, axis=0)") == ["E204"]


def test_scalar_only_expressions_stay_weak():
    r = check("    s = alpha * 2 + 1\n    y = x * s", params="x: f32[M, N], alpha: f32 = 0.5")
    assert not r.diagnostics


def test_where_with_two_float_literal_branches_gives_f32():
    r = check("    y = where(x > 0, 1.0, 0.0)")
    assert [d.code for d in r.diagnostics] == ["W601"] or not [d for d in r.diagnostics if d.is_error]


def test_norm_weight_must_match_the_last_axis():
    assert only("    y = layernorm(x, v)") == []
    assert only("    y = layernorm(x, w)", params="x: f32[M, N], w: f32[M]") == ["E204"]
    assert only("    y = rmsnorm(x, eps=-1.0)") == ["E207"]


def test_every_problem_is_reported_in_source_order():
    r = check("    a = q\n    y = x @ x\n    y = x")
    assert [(d.code, d.span.line) for d in r.diagnostics if d.is_error] == [("E201", 2), ("E204", 3), ("E202", 4)]


def test_host_statements_are_legal_between_graphs():
    r = check("    graph g1 {\n        a = x * 2\n    }\n    sync\n    print(a)\n    assert_finite(a)\n"
              "    graph g2 {\n        y = a + 1\n    }")
    assert not [d for d in r.diagnostics if d.is_error]
