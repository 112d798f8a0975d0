"""Record and replay end to end: the case format, atomic writes, exit statuses, JSON and HTML."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from harness_support import SPECS

from cuvil_dsl.cli import main
from cuvil_dsl.testing.case import CHECKS, load_case
from cuvil_dsl.testing.record import RecordRefused, record_case
from cuvil_dsl.testing.replay import replay_case


def test_round_trip_passes_every_check_under_the_exact_rule(case_dir):
    report = replay_case(case_dir)
    assert report.exit_code == 0, report.to_json()
    assert report.rule == "exact"
    assert [c.name for c in report.checks] == list(CHECKS)
    by_name = {c.name: c for c in report.checks}
    assert by_name["results"].passed and by_name["results"].rule == "exact"
    assert by_name["time"].passed is None and "not judged" in by_name["time"].message  # no regress_pct
    assert by_name["budget"].passed is None  # no limit is set, so nothing is judged


def test_case_is_self_contained_and_readable(case_dir):
    manifest = yaml.safe_load((case_dir / "case.yaml").read_text())
    assert manifest["format"] == 1 and manifest["created"].endswith("Z")
    assert manifest["spec"]["file"] == "spec/small_softmax.yaml"
    assert manifest["pipeline"] == "softmax_rows" and manifest["backend"] == "reference"
    assert manifest["checks"] == list(CHECKS)
    assert manifest["results"]["y"] == {"file": "results/y.npy", "dtype": "f16", "shape": [16, 32],
                                        "rtol": 1e-3, "atol": 1e-3}
    assert {"cuvil_dsl", "python", "numpy"} <= set(manifest["identity"]["toolchain"])
    assert {"median_us", "p99_us", "mean_us", "std_us", "spread", "samples"} <= set(manifest["timing"])
    assert manifest["budget"]["backend"] == "reference"
    for name in ("spec/softmax.cuvil", "inputs/x.npy", "results/y.npy", "snapshot.json", "pipeline.ir"):
        assert name in manifest["files"], name
    assert "softmax" in (case_dir / "pipeline.ir").read_text()
    assert json.loads((case_dir / "snapshot.json").read_text())["buffers"][0]["name"] == "x"
    # the spec copy keeps its leading comment and runs from the copies in the case
    spec_text = (case_dir / "spec" / "small_softmax.yaml").read_text()
    assert spec_text.startswith("# small_softmax.yaml") and "pipeline: softmax.cuvil" in spec_text


def test_npy_inputs_are_copied_and_the_spec_rewritten(tmp_path):
    out = tmp_path / "case"
    record_case(SPECS / "layernorm_from_file.yaml", out, backend="reference", shapes={"T": 8})
    spec = yaml.safe_load((out / "spec" / "layernorm_from_file.yaml").read_text())
    assert spec["inputs"]["w"] == {"file": "files/w.npy"} and spec["shapes"]["T"] == 8
    assert np.array_equal(np.load(out / "spec" / "files" / "w.npy"), np.load(SPECS / "data" / "layernorm_w.npy"))
    assert replay_case(out).exit_code == 0


def test_bf16_is_stored_as_uint16_bit_patterns(tmp_path):
    out = tmp_path / "case"
    record_case(SPECS / "rmsnorm.yaml", out, backend="reference", shapes={"T": 8, "H": 16})
    case = load_case(out)
    assert case.result_entries["y"].dtype.value == "bf16"
    raw = np.load(out / "results" / "y.npy", allow_pickle=False)
    assert raw.dtype == np.uint16
    assert case.arrays(case.result_entries)["y"].dtype.name == "bfloat16"
    assert replay_case(out).exit_code == 0


def test_refuses_to_overwrite_unless_forced(case_dir, spec_path, capsys):
    before = (case_dir / "case.yaml").read_text()
    assert main(["record", str(spec_path), "--out", str(case_dir), "--backend", "reference"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (case_dir / "case.yaml").read_text() == before
    assert main(["record", str(spec_path), "--out", str(case_dir), "--backend", "reference", "--force"]) == 0
    assert load_case(case_dir).manifest["created"]


def test_a_failing_run_is_not_recorded_and_leaves_nothing_behind(tmp_path, capsys):
    (tmp_path / "logs.cuvil").write_text(
        "pipeline logs(x: f32[N]) -> y: f32[N] {\n    y = log(x)\n    assert_finite(y)\n}\n")
    spec = tmp_path / "logs.yaml"
    spec.write_text("pipeline: logs.cuvil\nshapes: {N: 8}\ninputs:\n  x: {init: zeros}\n"
                    "run: {warmup: 0, iterations: 2}\n")
    out = tmp_path / "cases" / "logs"
    with pytest.raises(RecordRefused, match="assert_finite"):
        record_case(spec, out, backend="reference")
    assert main(["record", str(spec), "--out", str(out), "--backend", "reference"]) == 1
    assert "not recorded" in capsys.readouterr().err
    assert not out.exists() and list((tmp_path / "cases").iterdir()) == []


def test_record_json_and_bad_shape_option(spec_path, tmp_path, capsys):
    out = tmp_path / "c"
    assert main(["record", str(spec_path), "--out", str(out), "--backend", "reference", "--shape", "R=8",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["case"] == str(out) and data["run"]["outputs"]["y"]["shape"] == [8, 32]
    assert main(["record", str(spec_path), "--out", str(tmp_path / "d"), "--shape", "R=zero"]) == 2
    assert "SYMBOL=SIZE" in capsys.readouterr().err


def test_replay_exit_codes(case_dir, tmp_path, capsys):
    assert main(["replay", str(case_dir)]) == 0
    assert "replay passed" in capsys.readouterr().out
    assert main(["replay", str(tmp_path / "nowhere")]) == 2
    assert "no case.yaml" in capsys.readouterr().err
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "case.yaml").write_text("format: [unclosed\n")
    assert main(["replay", str(broken)]) == 2
    (broken / "case.yaml").write_text("format: 99\n")
    assert main(["replay", str(broken)]) == 2
    assert "lacks" in capsys.readouterr().err


def test_replay_json_shape(case_dir, capsys):
    assert main(["replay", str(case_dir), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["case"] == str(case_dir) and data["passed"] is True
    assert {"case", "checks", "passed"} <= set(data)
    for check in data["checks"]:
        assert set(check) == {"name", "rule", "passed", "message"}
        assert check["rule"] in ("exact", "tolerance", "noise", "budget", "skipped")
    assert [c["name"] for c in data["checks"]] == list(CHECKS)


def test_replay_json_for_an_unusable_case(tmp_path, capsys):
    assert main(["replay", str(tmp_path), "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] is False and data["checks"] == [] and "no case.yaml" in data["unusable"]


def test_html_report_names_the_case_and_embeds_plots(case_dir, tmp_path):
    page = tmp_path / "report.html"
    assert main(["replay", str(case_dir), "--html", str(page)]) == 0
    html = page.read_text()
    assert str(case_dir) in html and "data:image/png;base64," in html
    assert "<style>" in html and "http" not in html.split("<body>")[1].split("data:image")[0]


def test_update_re_records_in_place_keeping_checks_and_provenance(case_dir, capsys):
    manifest_path = case_dir / "case.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    manifest["checks"] = [c for c in CHECKS if c != "time"]
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))  # case.yaml itself is not checksummed
    assert main(["replay", str(case_dir), "--update"]) == 0
    assert "re-recorded" in capsys.readouterr().err
    updated = load_case(case_dir)
    assert "time" not in updated.checks
    assert updated.manifest["spec"]["recorded_from"] == manifest["spec"]["recorded_from"]
    spec_copy = (case_dir / "spec" / "small_softmax.yaml").read_text()
    assert spec_copy.count("# Recorded copy of ") == 1 and manifest["spec"]["recorded_from"] in spec_copy
    assert not list(Path(case_dir).parent.glob("*.tmp-*")) and not list(Path(case_dir).parent.glob("*.old-*"))
    assert replay_case(case_dir).exit_code == 0


def test_the_manifest_checks_list_selects_checks_and_rejects_unknown_ones(case_dir, capsys):
    manifest_path = case_dir / "case.yaml"
    manifest = yaml.safe_load(manifest_path.read_text())
    manifest["checks"] = ["results", "snapshot"]
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert [c.name for c in replay_case(case_dir).checks] == ["checksums", "results", "snapshot"]
    manifest["checks"] = ["results", "determinsm"]
    manifest_path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    assert main(["replay", str(case_dir)]) == 2
    assert "unknown check(s) determinsm" in capsys.readouterr().err


def test_update_refuses_a_tampered_case(case_dir, capsys):
    (case_dir / "inputs" / "x.npy").write_bytes(b"not an array")
    assert main(["replay", str(case_dir), "--update"]) == 2
    assert "refusing to re-record" in capsys.readouterr().err
