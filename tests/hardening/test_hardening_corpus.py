"""Regression corpus: every nasty input found or written while hardening, one test each.

``corpus/programs/*.cuvil`` start with ``# corpus: <what it once did>`` and
``# expect: <CODE>|clean``. ``corpus/specs/<case>/`` hold ``spec.yaml`` (plus whatever files it
names) and ``EXPECT`` (first line: the code ``check`` must report, or ``clean``).

For each case the command line must stay robust (``hardening_support.assert_robust``) through
``check`` in every format and ``run --backend reference --json``; cases that check clean also
go through the code generators, which is where several crashes lived: ``compile --emit cu``
(plan and CUDA C, no GPU needed) and the numba renderer, whose Python must compile.
Add a case here for every crash fixed, with a line saying what it used to do.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hardening_support import CORPUS, assert_robust, codes, robust, run_cli

from cuvil_dsl.frontend import check_file
from cuvil_dsl.passes import plan_pipeline

PROGRAMS = sorted((CORPUS / "programs").glob("*.cuvil"))
SPECS = sorted(p for p in (CORPUS / "specs").iterdir() if p.is_dir())
LIMIT = 60.0


def _expected(text: str) -> str:
    for line in text.splitlines()[:3]:
        if line.startswith("# expect:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("corpus program without an `# expect:` line")


def _assert_codes(result, expected: str) -> None:
    found = codes(result)
    errors = [c for c in found if c.startswith("E")]
    if expected == "clean":
        assert not errors, result.describe()
    else:
        assert expected in found, result.describe()


def _through_codegen(prog: Path) -> None:
    """Plan and render a clean program for both backends (sizes N=4), as a run would."""
    from cuvil_dsl.codegen import render_cuda
    from cuvil_dsl.codegen.cpu import render_cpu

    checked = check_file(prog)
    assert checked.ok
    for pipeline in checked.module.pipelines:
        plan, diags = plan_pipeline(pipeline)
        assert not [d for d in diags if d.is_error]
        sizes = {s: 4 for s in pipeline.symbols()}
        render_cuda(plan, sizes, "sm_90")
        for module in render_cpu(plan, sizes):
            compile(module.source, getattr(module, "file_name", "<cpu module>"), "exec")


@pytest.mark.parametrize("prog", PROGRAMS, ids=lambda p: p.stem)
def test_corpus_program(prog, tmp_path):
    expected = _expected(prog.read_text(errors="replace"))
    first = robust(["check", prog, "--format", "json"], LIMIT)
    _assert_codes(first, expected)
    robust(["check", prog], LIMIT)
    robust(["check", prog, "--format", "sarif"], LIMIT)
    if expected != "clean":
        return
    shutil.copy(prog, tmp_path / "prog.cuvil")
    (tmp_path / "spec.yaml").write_text("pipeline: prog.cuvil\nshapes: {N: 4}\nrun: {warmup: 0, iterations: 1}\n")
    result = robust(["run", tmp_path / "spec.yaml", "--backend", "reference", "--json"], LIMIT)
    assert result.rc == 0, result.describe()
    emitted = robust(["compile", tmp_path / "spec.yaml", "--emit", "cu", "--arch", "sm_90"], LIMIT)
    assert emitted.rc == 0 and "__global__" in emitted.out, emitted.describe()
    _through_codegen(prog)


def _spec_expectations(case: Path) -> tuple[str, str]:
    """``EXPECT``'s first line: one code (or ``clean``) for both commands, or
    ``check:<code> run:<code>`` when ``check`` (which reads only .npy headers) sees less."""
    words = (case / "EXPECT").read_text().splitlines()[0].split()
    named = dict(w.split(":", 1) for w in words if ":" in w)
    return named.get("check", words[0]), named.get("run", words[0])


@pytest.mark.parametrize("case", SPECS, ids=lambda p: p.name)
def test_corpus_spec(case):
    for_check, expected = _spec_expectations(case)
    spec = case / "spec.yaml"
    first = robust(["check", spec, "--format", "json"], LIMIT)
    _assert_codes(first, for_check)
    robust(["check", spec], LIMIT)
    ran = run_cli(["run", spec, "--backend", "reference", "--json", "--iterations", "1"], LIMIT)
    assert_robust(ran)
    if expected == "clean":
        assert ran.rc == 0, ran.describe()
        emitted = robust(["compile", spec, "--emit", "cu", "--arch", "sm_90"], LIMIT)
        assert emitted.rc == 0, emitted.describe()
    else:
        assert ran.rc == 2 and expected in codes(ran), ran.describe()


def test_corpus_is_not_empty():
    assert len(PROGRAMS) >= 10 and len(SPECS) >= 20
