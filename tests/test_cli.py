"""The command line as LANGUAGE.md section 8 describes it: outputs, JSON shapes, exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cuvil_dsl.cli import main

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "specs"
ERRORS = SPECS / "errors"


def test_check_clean_file_exits_0(capsys):
    assert main(["check", str(SPECS / "softmax.cuvil"), str(SPECS / "softmax.yaml")]) == 0
    assert capsys.readouterr().out == ""


def test_check_errors_exit_1_and_warnings_0_unless_werror(capsys):
    assert main(["check", str(ERRORS / "E204_broadcast.cuvil")]) == 1
    assert main(["check", str(ERRORS / "W602_unused_value.cuvil")]) == 0
    assert main(["check", "--werror", str(ERRORS / "W602_unused_value.cuvil")]) == 1


def test_check_unusable_invocation_exits_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "missing.cuvil")]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["check"])
    assert exc.value.code == 2


def test_check_worst_status_over_several_paths(tmp_path):
    assert main(["check", str(SPECS / "softmax.cuvil"), str(ERRORS / "E201_undefined_name.cuvil")]) == 1


def test_check_json_format(capsys):
    main(["check", "--format", "json", str(ERRORS / "E201_undefined_name.cuvil")])
    (item,) = json.loads(capsys.readouterr().out)
    assert set(item) >= {"code", "severity", "message", "file", "line", "column", "end_line", "end_column"}
    assert item["code"] == "E201" and item["severity"] == "error"
    main(["check", "--format", "json", str(SPECS / "softmax.cuvil")])
    assert json.loads(capsys.readouterr().out) == []


def test_check_sarif_format(capsys):
    main(["check", "--format", "sarif", str(ERRORS / "several_problems.cuvil")])
    doc = json.loads(capsys.readouterr().out)
    assert doc["version"] == "2.1.0"
    results = doc["runs"][0]["results"]
    assert results and all(r["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1 for r in results)
    rules = {r["id"] for r in doc["runs"][0]["tool"]["driver"]["rules"]}
    assert {r["ruleId"] for r in results} <= rules


def test_run_reference_json_is_one_object(capsys, tmp_path):
    rc = main(["run", str(SPECS / "softmax.yaml"), "--backend", "reference", "--json", "--iterations", "2",
               "--save-outputs", str(tmp_path)])
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert rc == 0
    assert data["backend"] == "reference" and data["pipeline"] == "softmax_rows"
    assert set(data) >= {"pipeline", "backend", "outputs", "check", "timing", "budget", "kernels", "diagnostics"}
    assert data["timing"]["iterations"] == 2
    (name,) = data["outputs"]
    saved = np.load(tmp_path / f"{name}.npy", allow_pickle=False)
    assert list(saved.shape) == data["outputs"][name]["shape"]


def test_run_bad_spec_exits_2_with_json_on_failure_too(capsys):
    rc = main(["run", str(ERRORS / "E501_misspelled_key.yaml"), "--backend", "reference", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert rc == 2 and data["diagnostics"][0]["code"] == "E501"


def test_run_cuda_without_gpu_exits_2(capsys):
    from cuvil_dsl.runtime.device import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    assert main(["run", str(SPECS / "softmax.yaml"), "--backend", "cuda"]) == 2
    assert "E601" in capsys.readouterr().err


def test_assert_finite_failure_exits_1(tmp_path, capsys):
    (tmp_path / "p.cuvil").write_text(
        "pipeline p(x: f32[N]) -> y: f32[N] {\n    h = log(x)\n    assert_finite(h)\n    y = h\n}\n")
    (tmp_path / "p.yaml").write_text("pipeline: p.cuvil\nshapes: {N: 8}\ninputs:\n  x: {init: normal, seed: 0}\n")
    assert main(["run", str(tmp_path / "p.yaml"), "--backend", "reference"]) == 1
    out = capsys.readouterr()
    assert "assert_finite(h)" in out.out + out.err


def test_print_goes_to_stderr(tmp_path, capsys):
    (tmp_path / "p.cuvil").write_text(
        "pipeline p(x: f32[N]) -> y: f32[N] {\n    h = x * 2\n    print(h)\n    y = h\n}\n")
    (tmp_path / "p.yaml").write_text("pipeline: p.cuvil\nshapes: {N: 8}\n")
    assert main(["run", str(tmp_path / "p.yaml"), "--backend", "reference", "--json"]) == 0
    out = capsys.readouterr()
    json.loads(out.out)
    assert "h: f32[8] min=" in out.err


def test_compile_emits_ir_and_cuda_without_a_gpu(capsys):
    assert main(["compile", str(SPECS / "softmax.yaml"), "--arch", "sm_90", "--emit", "ir,plan,cu"]) == 0
    text = capsys.readouterr().out
    assert "pipeline softmax" in text and "__global__" in text


def test_compile_auto_arch_without_gpu_is_e504(capsys):
    from cuvil_dsl.runtime.device import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    assert main(["compile", str(SPECS / "softmax.yaml"), "--emit", "cu"]) == 2
    assert "E504" in capsys.readouterr().err


def test_internal_errors_ask_for_a_report_without_a_traceback(monkeypatch, capsys):
    import cuvil_dsl.cli as cli

    def boom(args):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(cli, "cmd_check", boom)
    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with(parser(), boom))
    assert main(["check", "x.cuvil"]) == 3
    err = capsys.readouterr().err
    assert "internal error" in err and "Traceback" not in err and "report" in err


def _with(parser, func):
    parser._subparsers._group_actions[0].choices["check"].set_defaults(func=func)
    return parser


def test_python_dash_m_works():
    proc = subprocess.run([sys.executable, "-m", "cuvil_dsl", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("cuvil-dsl ")
