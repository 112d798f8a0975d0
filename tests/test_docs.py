"""Every example in the user documentation and the README is checked.

```cuvil blocks must check clean; ```cuvil-error blocks must report exactly their
`# expect: CODE at LINE:COL` lines; ```yaml blocks must be valid specs (their `pipeline:`
names a file in specs/).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from cuvil_dsl.cli import _check_program
from cuvil_dsl.diagnostics import UserError
from cuvil_dsl.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
FENCE = re.compile(r"^```([\w-]+)[^\n]*\n(.*?)^```", re.S | re.M)
EXPECT = re.compile(r"#\s*expect:\s*([EW]\d{3})\s+at\s+(\d+):(\d+)")


def blocks(kind: str):
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == kind:
                line = text.count("\n", 0, m.start()) + 2
                out.append(pytest.param(m.group(2), id=f"{doc.name}:{line}"))
    return out


def check(source: str, tmp_path: Path):
    path = tmp_path / "example.cuvil"
    path.write_text(source)
    return _check_program(path)


@pytest.mark.parametrize("source", blocks("cuvil"))
def test_cuvil_examples_check_clean(source, tmp_path):
    diags = check(source, tmp_path)
    assert not diags, [f"{d.span}: {d.code} {d.message}" for d in diags]


@pytest.mark.parametrize("source", blocks("cuvil-error"))
def test_error_examples_report_what_they_say(source, tmp_path):
    expected = [(m[1], int(m[2]), int(m[3])) for m in EXPECT.finditer(source)]
    assert expected
    got = [(d.code, d.span.line, d.span.column) for d in check(source, tmp_path)]
    assert got == expected


@pytest.mark.parametrize("source", blocks("yaml"))
def test_yaml_examples_are_valid_specs(source, tmp_path):
    folder = tmp_path / "specs"
    shutil.copytree(ROOT / "specs", folder)
    spec = folder / "example.yaml"
    spec.write_text(source)
    if "pipeline:" not in source:
        pytest.skip("a fragment of a spec")
    try:
        load_spec(spec)
    except UserError as exc:
        pytest.fail(str(exc))


@pytest.mark.parametrize("source", blocks("python"))
def test_python_examples_run(source, monkeypatch):
    monkeypatch.chdir(ROOT)
    exec(compile(source, "<docs example>", "exec"), {})
