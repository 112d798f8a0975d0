"""One bad program per diagnostic code: the right code, line, column and caret."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cuvil_dsl.cli import _check_path
from cuvil_dsl.diagnostics import render

ERRORS = Path(__file__).resolve().parents[2] / "specs" / "errors"
EXPECT = re.compile(r"#\s*expect:\s*([EW]\d{3})\s+at\s+(\d+):(\d+)")
CASES = sorted(p for p in ERRORS.iterdir() if p.suffix in (".cuvil", ".yaml"))


def expectations(path: Path) -> list[tuple[str, int, int]]:
    return [(m[1], int(m[2]), int(m[3])) for m in EXPECT.finditer(path.read_text())]


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_error_file_reports_exactly_what_it_expects(path):
    expected = expectations(path)
    assert expected, f"{path.name} has no `# expect:` line"
    diags, _usable = _check_path(str(path))
    got = [(d.code, d.span.line, d.span.column) for d in diags]
    assert got == expected, "\n".join(render(d) for d in diags)


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.name)
def test_every_diagnostic_renders_a_caret_under_its_line(path):
    diags, _ = _check_path(str(path))
    for d in diags:
        text = render(d)
        assert text.startswith(f"{d.span.file}:{d.span.line}:{d.span.column}: ")
        assert f"[{d.code}]" in text.splitlines()[0]
        caret_lines = [ln for ln in text.splitlines() if ln.strip().startswith("|") and "^" in ln]
        assert caret_lines, text


def test_corpus_covers_every_language_code():
    codes = {c for p in CASES for c, _, _ in expectations(p)}
    language_codes = {
        "E100", "E201", "E202", "E203", "E204", "E205", "E206", "E207", "E208", "E209", "E301", "E302",
        "E401", "E403", "E501", "E502", "E503", "E504", "E505", "E506", "E507", "W601", "W602",
    }
    assert language_codes <= codes, sorted(language_codes - codes)
