"""The grammar and parser: LALR without conflicts, lexical rules, precedence, recovery."""

from __future__ import annotations

import pytest

from cuvil_dsl.frontend import ast, check_source
from cuvil_dsl.frontend.parser import grammar_text, make_parser, parse_source


def parse_ok(text: str) -> ast.SourceFile:
    result = parse_source(text, "t.cuvil")
    assert not result.diagnostics, result.diagnostics
    return result.source


def codes(text: str) -> list[tuple[str, int, int]]:
    return [(d.code, d.span.line, d.span.column) for d in check_source(text, "t.cuvil").diagnostics]


def body(text: str):
    return parse_ok(f"pipeline f(x: f32[N], y: f32[N]) -> z: f32[N] {{\n{text}\n}}\n").pipelines[0].body


def test_grammar_builds_with_no_conflicts():
    make_parser.cache_clear()
    make_parser(strict=True)  # interegular + strict: any shift/reduce conflict raises
    make_parser.cache_clear()


def test_grammar_is_loaded_from_the_package_not_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "pipeline" in grammar_text()


def test_newlines_inside_brackets_continue_the_statement():
    (stmt,) = body("    z = maximum(x,\n        y) + (x\n  * 2)")
    assert isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Binary)


def test_semicolons_separate_and_may_trail():
    stmts = body("    a = x; b = a + y;\n    z = b;")
    assert [s.target for s in stmts] == ["a", "b", "z"]


def test_crlf_tabs_and_comments_are_whitespace():
    text = "pipeline f(x: f32[N]) -> z: f32[N] {\r\n\t# comment\r\n\tz = x * 2  # trailing\r\n}\r\n"
    assert parse_ok(text).pipelines[0].body[0].target == "z"


def test_power_binds_tighter_than_unary_minus_and_takes_a_negative_exponent():
    (stmt,) = body("    z = -x ** -0.5")
    v = stmt.value
    assert isinstance(v, ast.Unary) and v.op == "-"
    assert isinstance(v.operand, ast.Binary) and v.operand.op == "**"
    assert isinstance(v.operand.right, ast.Unary)


def test_power_is_right_associative():
    (stmt,) = body("    z = x ** y ** x")
    assert stmt.value.op == "**" and isinstance(stmt.value.right, ast.Binary)


def test_matmul_shares_the_precedence_of_multiplication():
    (stmt,) = body("    z = x + y * x @ y")
    assert stmt.value.op == "+" and stmt.value.right.op == "@" and stmt.value.right.left.op == "*"


@pytest.mark.parametrize("number, is_float", [("2", False), ("0.5", True), (".5", True), ("1e-5", True),
                                              ("3.0E+2", True)])
def test_numbers(number, is_float):
    (stmt,) = body(f"    z = x * {number}")
    assert stmt.value.right.is_float is is_float


@pytest.mark.parametrize("bad", ["2.", "1.e5"])
def test_malformed_numbers_are_e100_at_the_number(bad):
    diags = codes(f"pipeline f(x: f32[N]) -> z: f32[N] {{\n    z = x * {bad}\n}}\n")
    assert diags == [("E100", 2, 13)]


def test_integer_literals_must_fit_in_i32():
    text = "pipeline f(x: i32[N]) -> z: i32[N] {\n    z = x * 2147483648\n}\n"
    assert codes(text) == [("E100", 2, 13)]


def test_keywords_are_reserved():
    assert codes("pipeline f(sync: f32[N]) -> z: f32[N] {\n    z = sync\n}\n")[0][0] == "E100"


def test_a_brace_must_end_its_header_line():
    assert codes("pipeline f(x: f32[N]) -> z: f32[N]\n{\n    z = x\n}\n")[0] == ("E100", 1, 35)


def test_recovery_reports_one_error_per_bad_statement_and_no_cascade():
    text = (
        "pipeline f(x: f32[N]) -> z: f32[N] {\n"
        "    a = x +\n"
        "    b = (x * 2\n"
        "    c = a + b\n"
        "    z = c\n"
        "}\n"
    )
    got = codes(text)
    assert [g[:2] for g in got] == [("E100", 2), ("E100", 4)]


def test_unclosed_block_points_at_its_brace():
    text = "pipeline f(x: f32[N]) -> z: f32[N] {\n    graph g {\n        z = x\n}\n"
    assert codes(text) == [("E100", 2, 13)]


def test_bare_call_is_not_a_statement():
    assert codes("pipeline f(x: f32[N]) -> z: f32[N] {\n    exp(x)\n    z = x\n}\n") == [("E100", 2, 5)]


def test_invalid_utf8_is_reported(tmp_path):
    from cuvil_dsl.frontend import check_file

    p = tmp_path / "bad.cuvil"
    p.write_bytes(b"pipeline f(x: f32[N]) -> z: f32[N] {\n    z = x \xff\n}\n")
    (d,) = check_file(p).diagnostics
    assert (d.code, d.span.line, d.span.column) == ("E100", 2, 11)
