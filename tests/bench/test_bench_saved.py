"""Saved bench runs: read back (``--from``), merged, and compared with an earlier run (``--compare``)."""

from __future__ import annotations

import copy
import json

import pytest

from cuvil_dsl.bench import runner, saved
from cuvil_dsl.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def contender(median: float, iqr: float = 0.5, label: str = "cuvil-dsl") -> dict:
    return {"label": label, "device": "gpu", "status": "ok", "median_us": median, "iqr_us": iqr,
            "spread": iqr / median, "rounds_us": [median] * 3, "samples": 60}


def run_doc(times: dict[str, tuple[float, float]], gpu: str = "NVIDIA H200", date: str = "2026-12-01T10:00:00+00:00",
            iqr: float = 0.5) -> dict:
    """A saved document: ``times`` maps a benchmark to (ours, PyTorch) medians in us."""
    benchmarks = []
    for name, (ours, torch) in times.items():
        benchmarks.append({"name": name, "spec": f"benchmarks/{name}.yaml", "backend": "cuda",
                           "floor": {"floor_us": ours / 2},
                           "contenders": {"ours": contender(ours, iqr), "torch": contender(torch, iqr, "PyTorch")},
                           "best_baseline": "torch", "best_baseline_over_ours": round(torch / ours, 4)})
    return {"date": date, "backend": "cuda", "device": {"gpu": gpu, "arch": "sm_90"}, "versions": {},
            "method": {}, "ceilings": {"where": "gpu", "copy_GBps": 4200.0, "matmul_TFLOPs": {"f16": 760.0}},
            "benchmarks": benchmarks, "exit_code": 0}


def save(tmp_path, name: str, doc: dict):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def row(comparison: dict, name: str) -> dict:
    return next(r for r in comparison["benchmarks"] if r["name"] == name)


# ---------------------------------------------------------------------------- load
def test_a_file_that_is_not_json_is_named_with_the_place_it_breaks(tmp_path):
    path = tmp_path / "run.json"
    path.write_text('{"benchmarks": [\n  {"name": 1,}\n]}')
    with pytest.raises(saved.SavedError, match=r"run\.json:2:\d+: not JSON .*--json > FILE\.json"):
        saved.load(path)


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "not a `cuvil-dsl bench --json` document"),
    ('{"benchmarks": [{"contenders": {}}], "backend": "cuda", "device": {}}', "benchmark 0 has no name"),
    ('{"benchmarks": [{"name": "x"}], "backend": "cuda", "device": {}}', "'x' has no contenders"),
    ('{"benchmarks": [], "device": {}}', "no 'backend'"),
    ('{"error": "E601: no GPU", "benchmarks": [], "exit_code": 2}', "benchmarked nothing: E601"),
])
def test_a_document_of_the_wrong_shape_says_what_is_missing(tmp_path, text, message):
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(saved.SavedError, match=message):
        saved.load(path)


def test_a_missing_file_is_an_error_not_a_traceback(tmp_path):
    with pytest.raises(saved.SavedError, match="cannot read it"):
        saved.load(tmp_path / "nope.json")


# ---------------------------------------------------------------------------- merge
def test_merging_runs_keeps_every_benchmark_and_the_last_run_of_one_run_twice():
    first = run_doc({"softmax_f16": (131.0, 420.0), "attention_f16": (103.0, 500.0)})
    second = run_doc({"attention_f16": (101.0, 505.0), "gemm_gelu_f16": (203.0, 205.0)},
                     date="2026-12-01T11:00:00+00:00")
    second["exit_code"] = 1
    merged = saved.merge([first, second], names=["a.json", "b.json"])
    assert [b["name"] for b in merged["benchmarks"]] == ["softmax_f16", "attention_f16", "gemm_gelu_f16"]
    assert merged["benchmarks"][1]["contenders"]["ours"]["median_us"] == 101.0  # the later run's
    assert merged["date"] == second["date"] and merged["exit_code"] == 1
    assert [r["from"] for r in merged["runs"]] == ["a.json", "b.json"]
    assert merged["runs"][1]["benchmarks"] == ["attention_f16", "gemm_gelu_f16"]
    assert first["benchmarks"][1]["contenders"]["ours"]["median_us"] == 103.0  # the inputs are left alone


def test_runs_on_different_devices_are_not_merged_into_one_table():
    with pytest.raises(saved.SavedError, match="h100.json: backend cuda on NVIDIA H100.*one device"):
        saved.merge([run_doc({"a": (1.0, 2.0)}), run_doc({"b": (1.0, 2.0)}, gpu="NVIDIA H100")],
                    names=["h200.json", "h100.json"])


# ---------------------------------------------------------------------------- compare
def test_the_same_device_compares_times_and_each_verdict_passes_the_runs_spread():
    base = run_doc({"faster": (110.0, 200.0), "slower": (100.0, 200.0), "noise": (100.0, 200.0),
                    "gone": (5.0, 6.0)})
    now = run_doc({"faster": (100.0, 200.0), "slower": (104.0, 200.0), "noise": (100.4, 200.0),
                   "added": (1.0, 2.0)})
    now["benchmarks"].append({"name": "broken", "spec": "b.yaml", "error": "E602: no compiler"})
    c = saved.compare(now, base, base_name="base.json")
    assert c["same_device"] and c["judged_by"] == "time" and c["failed"] == []
    faster = row(c, "faster")
    assert faster["then_us"] == 110.0 and faster["now_us"] == 100.0 and faster["speedup"] == 1.1
    assert faster["baseline"] == "torch" and faster["baseline_then_us"] == faster["baseline_now_us"] == 200.0
    assert faster["against_baseline"] == pytest.approx(100 / 110, rel=1e-3)
    assert faster["verdict"] == "faster" and faster["change_pct"] == pytest.approx(-9.09, abs=0.01)
    assert row(c, "slower")["verdict"] == "slower"
    assert row(c, "noise")["verdict"] == "level"  # 0.4% against interquartile ranges of 0.5%
    assert row(c, "added")["verdict"] == "new" and row(c, "broken")["verdict"] == "not run"
    assert c["missing"] == ["gone"]


def test_fail_slower_fails_a_slowdown_past_the_threshold_and_past_the_noise():
    base = run_doc({"a": (100.0, 200.0), "b": (100.0, 200.0), "c": (100.0, 200.0)})
    now = run_doc({"a": (103.0, 200.0), "b": (101.5, 200.0), "c": (102.5, 200.0)})
    now["benchmarks"][2]["contenders"]["ours"]["iqr_us"] = 6.0  # a noisy run: 2.5% is inside its spread
    c = saved.compare(now, base, fail_slower_pct=2.0)
    assert c["failed"] == ["a"] and row(c, "a")["verdict"] == "SLOWER"
    assert row(c, "b")["verdict"] == "slower" and row(c, "c")["verdict"] == "level"


def test_on_different_devices_ours_is_judged_against_the_same_baseline():
    base = run_doc({"attention": (100.0, 95.0), "gemm": (200.0, 200.0)}, gpu="NVIDIA H100 80GB HBM3")
    # the H200 runs everything faster; ours gained on PyTorch in attention and lost in gemm
    now = run_doc({"attention": (90.0, 95.0 * 0.95), "gemm": (190.0, 200.0 * 0.90)})
    c = saved.compare(now, base, fail_slower_pct=3.0)
    assert not c["same_device"] and c["judged_by"] == "against_baseline"
    attention, gemm = row(c, "attention"), row(c, "gemm")
    assert attention["against_baseline"] == pytest.approx((90 / 90.25) / (100 / 95), rel=1e-3)
    assert attention["verdict"] == "faster"
    assert gemm["against_baseline"] == pytest.approx((190 / 180) / 1.0, rel=1e-3)
    assert gemm["verdict"] == "SLOWER" and c["failed"] == ["gemm"]
    text = saved.format_comparison(c)
    assert "different devices" in text and "fails past 3% slower" in text


def test_a_benchmark_without_a_common_baseline_on_another_device_is_not_judged():
    base = run_doc({"small_graph": (18.0, 1.0)}, gpu="NVIDIA H100")
    now = run_doc({"small_graph": (17.0, 1.0)})
    for doc in (base, now):
        del doc["benchmarks"][0]["contenders"]["torch"]
    c = saved.compare(now, base, fail_slower_pct=1.0)
    assert row(c, "small_graph")["verdict"] == "not judged" and c["failed"] == []


# ---------------------------------------------------------------------------- the command line
def test_from_redraws_a_saved_run_and_merges_several(tmp_path, capsys):
    a = save(tmp_path, "a.json", run_doc({"softmax_f16": (131.0, 420.0)}))
    b = save(tmp_path, "b.json", run_doc({"attention_f16": (102.0, 508.0)}, date="2026-12-01T12:00:00+00:00"))
    plot = tmp_path / "merged.png"
    rc = main(["bench", "--from", str(a), "--from", str(b), "--plot", str(plot)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "| softmax_f16 | 131.0 | 420.0 |" in out and "| attention_f16 | 102.0 | 508.0 |" in out
    assert plot.read_bytes()[:8] == PNG
    rc = main(["bench", "--from", str(a), "--from", str(b), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["from"] for r in doc["runs"]] == [str(a), str(b)]


def test_a_saved_failed_run_keeps_its_exit_status(tmp_path, capsys):
    doc = run_doc({"softmax_f16": (131.0, 420.0)})
    doc["exit_code"] = 1
    assert main(["bench", "--from", str(save(tmp_path, "run.json", doc))]) == 1


def test_compare_prints_the_comparison_and_fail_slower_sets_the_exit_status(tmp_path, capsys):
    base = save(tmp_path, "base.json", run_doc({"softmax_f16": (130.0, 420.0), "gemm_gelu_f16": (200.0, 205.0)}))
    now = save(tmp_path, "now.json", run_doc({"softmax_f16": (130.2, 420.0), "gemm_gelu_f16": (210.0, 205.0)},
                                             date="2026-12-02T10:00:00+00:00"))
    plot = tmp_path / "compared.png"
    rc = main(["bench", "--from", str(now), "--compare", str(base), "--plot", str(plot)])
    out, _ = capsys.readouterr()
    assert rc == 0  # no threshold: a report, not a gate
    assert f"Compared with {base}" in out
    assert "| gemm_gelu_f16 | 200.0 | 210.0 | 0.952 | PyTorch | 205.0 | 205.0 | 1.050 | slower |" in out
    softmax = next(line for line in out.splitlines() if line.startswith("| softmax_f16 | 130.0 | 130.2 |"))
    assert softmax.endswith("| level |")
    assert plot.read_bytes()[:8] == PNG
    rc = main(["bench", "--from", str(now), "--compare", str(base), "--fail-slower", "3%", "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert rc == 1 and doc["exit_code"] == 1 and doc["comparison"]["failed"] == ["gemm_gelu_f16"]
    assert "slower than" in captured.err and "gemm_gelu_f16" in captured.err
    assert main(["bench", "--from", str(now), "--compare", str(base), "--fail-slower", "6"]) == 0


def test_compare_after_a_run(small_benchmarks, tmp_path, capsys):
    spec = str(small_benchmarks / "softmax_f32.yaml")
    assert main(["bench", spec, "--backend", "reference", "--quick", "--json"]) == 0
    base = tmp_path / "base.json"
    base.write_text(capsys.readouterr().out)
    rc = main(["bench", spec, "--backend", "reference", "--quick", "--compare", str(base), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["comparison"]["same_device"]
    (compared,) = doc["comparison"]["benchmarks"]
    assert compared["name"] == "softmax_f32" and compared["then_us"] > 0 and compared["now_us"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--from", "{run}", "{spec}"], "not both"),
    (["--from", "{run}", "--quick"], "--quick: options of a run"),
    (["--from", "{run}", "--backend", "cpu", "--rounds", "2"], "--backend, --rounds: options of a run"),
    (["{spec}", "--fail-slower", "5"], "--fail-slower needs --compare"),
    ([], "give at least one SPEC"),
    (["{spec}", "--compare", "{bad}"], "bad.json:1:1: not JSON"),
])
def test_unusable_combinations_exit_2_before_anything_runs(small_benchmarks, tmp_path, capsys, monkeypatch, argv,
                                                           message):
    ran = []
    monkeypatch.setattr(runner.Bench, "run", lambda self, session: ran.append(session))
    run = save(tmp_path, "run.json", run_doc({"softmax_f32": (1.0, 2.0)}))
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    paths = {"run": run, "spec": small_benchmarks / "softmax_f32.yaml", "bad": bad}
    rc = main(["bench", *[a.format(**paths) for a in argv]])
    assert rc == 2 and ran == []
    assert message in capsys.readouterr().err


def test_a_wrong_result_now_is_named_not_compared():
    now = run_doc({"a": (90.0, 200.0)})
    now["benchmarks"][0]["contenders"]["ours"]["status"] = "wrong"
    c = saved.compare(now, run_doc({"a": (100.0, 200.0)}), fail_slower_pct=1.0)
    assert row(c, "a")["verdict"] == "WRONG" and c["failed"] == []


def test_the_comparison_leaves_the_base_document_alone(tmp_path):
    base = run_doc({"a": (100.0, 200.0)})
    kept = copy.deepcopy(base)
    saved.compare(run_doc({"a": (90.0, 200.0)}), base)
    assert base == kept
