"""Command-line arguments and output locations: every way to point the tool at something
unusable ends with a message and exit status 2, never an internal error.

Each of these once escaped as an OSError (exit 3): a path argument longer than the file system
allows, ``--save-outputs`` naming a file or an unwritable place, ``compile --out`` with a
pipeline whose name makes a file name longer than 255 bytes.
"""

from __future__ import annotations

import json

import pytest
from hardening_support import codes, robust

PROGRAM = "pipeline p(x: f32[N]) -> y: f32[N] {\n    y = x * 2.0\n}\n"


@pytest.fixture
def spec(tmp_path):
    (tmp_path / "prog.cuvil").write_text(PROGRAM)
    path = tmp_path / "spec.yaml"
    path.write_text("pipeline: prog.cuvil\nshapes: {N: 4}\nrun: {warmup: 0, iterations: 1}\n")
    return path


@pytest.mark.parametrize("name", ["a" * 5000 + ".cuvil", "a" * 300 + ".yaml", "dir/" * 2000 + "x.cuvil"])
def test_path_arguments_too_long_for_the_file_system(name):
    result = robust(["check", name, "--format", "json"])
    assert result.rc == 2 and codes(result) == ["E505"], result.describe()


@pytest.mark.parametrize("args", [
    ["run"], ["check"], ["frobnicate"], ["run", "x.yaml", "--iterations", "abc"], ["run", "x.yaml", "--iterations", "-1"],
    ["run", "x.yaml", "--backend", "tpu"], ["check", "x.cuvil", "--format", "xml"], ["cache", "explode"],
])
def test_unusable_command_lines(args):
    result = robust(args)
    assert result.rc == 2, result.describe()


@pytest.mark.parametrize("where", ["a file", "under a file", "/proc/cuvil-cannot-write-here"])
def test_save_outputs_where_they_cannot_go(spec, tmp_path, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    target = {"a file": blocker, "under a file": blocker / "out", "/proc/cuvil-cannot-write-here": where}[where]
    result = robust(["run", spec, "--backend", "reference", "--json", "--save-outputs", target])
    assert result.rc == 2 and "cannot save outputs" in result.err, result.describe()
    assert json.loads(result.out)["pipeline"] == "p"  # the run's JSON is still the one object on stdout


def test_compile_output_names_too_long(tmp_path):
    """``ir`` and ``plan`` files are named after the pipeline, ``cu`` files after the kernels."""
    name = "p" * 300
    (tmp_path / "prog.cuvil").write_text(f"pipeline {name}(x: f32[N]) -> y: f32[N] {{\n"
                                         f"    kernel {'k' * 300} {{\n        y = x * 2.0\n    }}\n}}\n")
    (tmp_path / "spec.yaml").write_text("pipeline: prog.cuvil\nshapes: {N: 4}\n")
    for emit in ("ir", "plan", "cu"):
        result = robust(["compile", tmp_path / "spec.yaml", "--emit", emit, "--out", tmp_path / "out", "--arch", "sm_90"])
        assert result.rc == 2 and "cannot write" in result.err, result.describe()
    printed = robust(["compile", tmp_path / "spec.yaml", "--emit", "cu", "--arch", "sm_90"])
    assert printed.rc == 0 and "__global__" in printed.out  # to standard output it works


def test_compile_out_is_a_file(spec, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    result = robust(["compile", spec, "--emit", "ir", "--out", blocker])
    assert result.rc == 2, result.describe()
