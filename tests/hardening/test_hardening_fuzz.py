"""End-to-end fuzzing of the command line, in-process: nothing a user feeds ``check`` or
``run --backend reference`` may crash it, hang it, or make it print a traceback.

Each test writes generated files into a fresh folder and calls ``cuvil_dsl.cli.main`` as the
console script would; :func:`hardening_support.assert_robust` states the property. The
default run is sized for CI (tens of examples per test); ``CUVIL_FUZZ=1`` runs the same
properties as long campaigns (``CUVIL_FUZZ_EXAMPLES``, default 2000 per test). Every crash these
found was fixed and its input added to ``corpus/`` (``test_hardening_corpus.py``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from hardening_strategies import mutated, npy_bytes, programs, specs, yaml_text
from hardening_support import LONG_EXAMPLES, LONG_FUZZ, assert_robust, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CI = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=LONG_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
long_only = pytest.mark.skipif(not LONG_FUZZ, reason="long fuzz campaign: set CUVIL_FUZZ=1")

LIMIT = 60.0  # seconds per CLI call: generous for two busy cores; real calls take well under one


def _folder() -> Path:
    """A fresh folder per example (hypothesis runs many examples in one test function)."""
    return Path(tempfile.mkdtemp(prefix="cuvil-fuzz-"))


def _spec_for(n: int, extra: str = "") -> str:
    return f"pipeline: prog.cuvil\nshapes: {{N: {n}, M: {n}}}\nrun: {{warmup: 0, iterations: 1}}\n{extra}"


def check_program(text: str | bytes, n: int = 3) -> None:
    """``check`` in every format, then, if it is clean, ``run --backend reference`` on it."""
    folder = _folder()
    prog = folder / "prog.cuvil"
    prog.write_bytes(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    first = run_cli(["check", prog, "--format", "json"], LIMIT)
    assert_robust(first)
    for fmt in ("text", "sarif"):
        assert_robust(run_cli(["check", prog, "--format", fmt], LIMIT))
    if first.rc == 0:
        (folder / "spec.yaml").write_text(_spec_for(n))
        assert_robust(run_cli(["run", folder / "spec.yaml", "--backend", "reference", "--json"], LIMIT))
        assert_robust(run_cli(["check", folder / "spec.yaml", "--format", "json"], LIMIT))


def check_spec(raw: bytes, program: str | None = None, npy: bytes | None = None) -> None:
    """``check`` (json, text) and ``run --backend reference --json`` on a spec file."""
    folder = _folder()
    (folder / "prog.cuvil").write_text(program or PROGRAM)
    if npy is not None:
        (folder / "x.npy").write_bytes(npy)
    (folder / "sub").mkdir()
    spec = folder / "spec.yaml"
    spec.write_bytes(raw)
    assert_robust(run_cli(["check", spec, "--format", "json"], LIMIT))
    assert_robust(run_cli(["check", spec], LIMIT))
    assert_robust(run_cli(["run", spec, "--backend", "reference", "--json", "--iterations", "1"], LIMIT))


PROGRAM = """\
pipeline p(x: f32[N, N], v: f32[N], alpha: f32 = 0.5) -> y: f32[N, N] {
    graph g0 {
        kernel k0 {
            y = softmax(x * alpha + v, axis=-1)
        }
    }
    assert_finite(y)
}
"""


# ---------------------------------------------------------------------------- programs
@CI
@given(programs(), st.integers(1, 5))
def test_generated_programs(text, n):
    check_program(text, n)


@CI
@given(mutated())
def test_mutated_programs(text):
    check_program(text)


@CI
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin1"))))
def test_random_text_as_program(text):
    check_program(text)


@long_only
@pytest.mark.slow
@LONG
@given(st.one_of(programs(), mutated(), mutated(mutated())), st.integers(1, 5))
def test_long_programs(text, n):
    check_program(text, n)


# ---------------------------------------------------------------------------- specs
@CI
@given(yaml_text())
def test_generated_specs(raw):
    check_spec(raw)


@CI
@given(specs(), programs())
def test_generated_specs_against_generated_programs(spec, program):
    check_spec(yaml.safe_dump(spec).encode(), program)


@long_only
@pytest.mark.slow
@LONG
@given(yaml_text(), st.one_of(st.none(), programs()))
def test_long_specs(raw, program):
    check_spec(raw, program)


# ---------------------------------------------------------------------------- .npy inputs
NPY_SPEC = b"pipeline: prog.cuvil\nshapes: {N: 3}\ninputs:\n  x: {file: x.npy}\nrun: {warmup: 0, iterations: 1}\n"
NPY_SPEC_FREE = b"pipeline: prog.cuvil\ninputs:\n  x: {file: x.npy}\n  v: {init: ones}\nrun: {warmup: 0, iterations: 1}\n"


@CI
@given(npy_bytes(), st.sampled_from((NPY_SPEC, NPY_SPEC_FREE)))
def test_generated_npy_files(npy, spec):
    # With NPY_SPEC_FREE the file's header binds N, so huge declared shapes reach the size checks.
    check_spec(spec, npy=npy)


@long_only
@pytest.mark.slow
@LONG
@given(npy_bytes(), st.sampled_from((NPY_SPEC, NPY_SPEC_FREE)),
       st.sampled_from(("f32", "f64", "f16", "bf16", "i32", "bool")))
def test_long_npy(npy, spec, dtype):
    check_spec(spec, PROGRAM.replace("f32[N, N]", f"{dtype}[N, N]", 1).replace("softmax(x * alpha + v, axis=-1)",
                                                                                 "cast(x, f32) + v"), npy)


def test_npy_round_trip_is_accepted(tmp_path):
    """The fuzzers' baseline: a well-formed file of the right dtype runs (exit 0)."""
    import io

    buf = io.BytesIO()
    np.save(buf, np.ones((3, 3), np.float32))
    (tmp_path / "prog.cuvil").write_text(PROGRAM)
    (tmp_path / "x.npy").write_bytes(buf.getvalue())
    (tmp_path / "spec.yaml").write_bytes(NPY_SPEC_FREE)
    result = run_cli(["run", tmp_path / "spec.yaml", "--backend", "reference", "--json"])
    assert_robust(result)
    assert result.rc == 0, result.describe()


# ---------------------------------------------------------------------------- coverage-guided
@long_only
@pytest.mark.slow
def test_atheris_campaign(tmp_path):
    """fuzz_atheris.py for CUVIL_FUZZ_SECONDS (default 120), seeded with the regression corpus."""
    import os
    import subprocess
    import sys

    pytest.importorskip("atheris")
    harness = Path(__file__).with_name("fuzz_atheris.py")
    seeds, found = tmp_path / "seeds", tmp_path / "found"
    found.mkdir()
    subprocess.run([sys.executable, str(harness), "seeds", str(seeds)], check=True)
    seconds = os.environ.get("CUVIL_FUZZ_SECONDS", "120")
    done = subprocess.run([sys.executable, str(harness), f"-max_total_time={seconds}", "-timeout=60",
                           "-rss_limit_mb=4096", "-max_len=4096", f"-artifact_prefix={tmp_path}/", str(found), str(seeds)],
                          capture_output=True, text=True, timeout=int(seconds) + 600)
    crashes = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*"))
    assert done.returncode == 0 and not crashes, done.stderr[-6000:]
