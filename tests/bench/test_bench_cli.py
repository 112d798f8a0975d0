"""``cuvil-dsl bench`` as a user runs it: host backends, the NumPy baseline, exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuvil_dsl.bench import runner
from cuvil_dsl.cli import main

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def gpu_here() -> bool:
    from cuvil_dsl.runtime.device import gpu_available

    return gpu_available()


def test_cpu_backend_with_numpy_json_and_plot(tmp_path, capsys):
    plot = tmp_path / "bench.png"
    rc = main(["bench", str(ROOT / "specs" / "elementwise_chain.yaml"), "--backend", "cpu", "--quick", "--json",
               "--plot", str(plot)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)  # stdout holds exactly the document; progress went to stderr
    assert "bench: " in err and doc["backend"] == "cpu" and doc["ceilings"]["where"] == "host"
    (bench,) = doc["benchmarks"]
    assert bench["name"] == "elementwise_chain" and bench["kind"] == "elementwise_chain"
    assert bench["check"]["passed"] is True
    ours, numpy = bench["contenders"]["ours"], bench["contenders"]["numpy"]
    assert ours["status"] == numpy["status"] == "ok" and numpy["check"]["passed"] is True
    assert ours["label"] == "cuvil-dsl (cpu)" and ours["clock"] == "host" and ours["samples"] >= 3
    assert bench["floor"]["bytes"] == 2 * 1048576 * 4 and bench["floor"]["floor_us"] > 0
    assert bench["ours_over_floor"] > 0 and bench["best_baseline"] == "numpy"
    assert plot.read_bytes()[:8] == PNG


def test_reference_backend_table_over_several_specs(small_benchmarks, capsys):
    specs = [str(small_benchmarks / f"{stem}.yaml") for stem in ("softmax_f16", "gemm_gelu_f16", "small_graph")]
    rc = main(["bench", *specs, "--backend", "reference", "--quick"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "| benchmark | ours us | NumPy us | floor us | ours/floor | best baseline/ours |" in out
    for stem in ("softmax_f16", "gemm_gelu_f16", "small_graph"):
        assert f"| {stem} |" in out
    assert "no baseline known for `small_graph`" in out


def test_baselines_none_benchmarks_ours_only(small_benchmarks, capsys):
    rc = main(["bench", str(small_benchmarks / "softmax_f32.yaml"), "--backend", "reference", "--quick", "--json",
               "--baselines", "none"])
    assert rc == 0
    assert list(json.loads(capsys.readouterr().out)["benchmarks"][0]["contenders"]) == ["ours"]


def test_bad_spec_exits_2_before_running_anything(small_benchmarks, tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(runner.Bench, "run", lambda self, session: ran.append(session))
    rc = main(["bench", str(small_benchmarks / "softmax_f32.yaml"), str(tmp_path / "missing.yaml"),
               "--backend", "reference", "--json"])
    out, err = capsys.readouterr()
    assert rc == 2 and ran == []
    doc = json.loads(out)
    assert doc["exit_code"] == 2 and doc["diagnostics"] and doc["benchmarks"] == []


def test_unknown_baseline_exits_2(small_benchmarks, capsys):
    rc = main(["bench", str(small_benchmarks / "softmax_f32.yaml"), "--backend", "reference", "--baselines", "jax"])
    assert rc == 2 and "unknown baseline `jax`" in capsys.readouterr().err


@pytest.mark.skipif(gpu_here(), reason="a GPU is present")
def test_cuda_without_a_gpu_exits_2(small_benchmarks, capsys):
    rc = main(["bench", str(small_benchmarks / "softmax_f32.yaml"), "--backend", "cuda"])
    assert rc == 2 and "E601" in capsys.readouterr().err


def test_our_wrong_result_exits_1(small_benchmarks, capsys, monkeypatch):
    real = runner.reference_execute
    monkeypatch.setattr(runner, "reference_execute",
                        lambda *a: {k: (v * 2 + 1).astype(v.dtype) for k, v in real(*a).items()})
    rc = main(["bench", str(small_benchmarks / "elementwise_f32.yaml"), "--backend", "cpu", "--quick", "--json"])
    out, err = capsys.readouterr()
    assert rc == 1 and "our result is wrong" in err
    doc = json.loads(out)
    assert doc["exit_code"] == 1 and doc["benchmarks"][0]["check"]["passed"] is False


def test_rounds_are_a_setting_of_the_run(small_benchmarks, capsys):
    rc = main(["bench", str(small_benchmarks / "softmax_f32.yaml"), "--backend", "reference", "--quick", "--json",
               "--baselines", "none", "--rounds", "5"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["method"]["settings"]["rounds"] == 5
    with pytest.raises(SystemExit):
        main(["bench", str(small_benchmarks / "softmax_f32.yaml"), "--rounds", "0"])
    assert "--rounds" in capsys.readouterr().err
