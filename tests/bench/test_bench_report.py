"""The JSON document, the table and the plot, all drawn from one run."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from bench_support import FakeClock, FakeFamily, fake_gpu_contender

from cuvil_dsl import driver
from cuvil_dsl.bench import report
from cuvil_dsl.bench.baselines import FAMILIES
from cuvil_dsl.bench.roofline import Ceilings
from cuvil_dsl.bench.runner import Bench
from cuvil_dsl.bench.timing import Settings
from cuvil_dsl.reference import execute as reference_execute

FAST = Settings(budget_s=0.002, min_samples=5, max_samples=50, warmup_s=0.0, host_min_samples=2, e2e_samples=3)
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def doc(small_benchmarks) -> dict:
    """softmax_f32 with ours, NumPy, a fake GPU baseline and a wrong one; small_graph with ours only."""
    softmax = driver.open_spec(small_benchmarks / "softmax_f32.yaml", backend="reference")
    expected = reference_execute(softmax.pipeline, softmax.inputs, softmax.binding.params)["y"]
    clock = FakeClock()
    families = [f for f in FAMILIES if f.name in ("numpy", "triton")]  # triton: not installed or no GPU here
    families += [FakeFamily("torch", lambda p: fake_gpu_contender(clock, "torch", itertools.repeat(3.0), expected)),
                 FakeFamily("cupy", lambda p: fake_gpu_contender(clock, "cupy", itertools.repeat(1.0), expected + 1))]
    bench = Bench("reference", FAST, families, clock_factory=lambda: clock)
    bench.ceilings = Ceilings("host", 1e10, {"f32": 1e11}, {"copy_bytes": 1 << 20})
    results = [bench.run(softmax), bench.run(driver.open_spec(small_benchmarks / "small_graph.yaml",
                                                               backend="reference"))]
    return json.loads(json.dumps(report.document(results, bench, 0, [{"name": "broken", "spec": "b.yaml",
                                                                       "error": "E602: no compiler"}])))


def test_document_shape(doc):
    assert set(doc) == {"date", "backend", "device", "versions", "method", "ceilings", "benchmarks", "exit_code"}
    assert doc["backend"] == "reference" and doc["exit_code"] == 0
    assert {"numpy", "cupy", "torch", "triton", "cuvil-dsl", "python"} <= set(doc["versions"])
    assert doc["ceilings"]["copy_GBps"] == 10.0 and doc["ceilings"]["matmul_TFLOPs"] == {"f32": 0.1}
    assert doc["method"]["settings"]["budget_s"] == FAST.budget_s
    softmax, graph, broken = doc["benchmarks"]
    assert softmax["name"] == "softmax_f32" and softmax["kind"] == "softmax"
    assert list(softmax["contenders"]) == ["ours", "triton", "numpy", "torch", "cupy"]
    ours = softmax["contenders"]["ours"]
    for key in ("median_us", "iqm_us", "iqr_us", "spread", "samples", "e2e_p50_us", "e2e_samples", "step_us",
                "rounds_us", "clock", "status"):
        assert key in ours
    assert ours["rounds_us"] == []  # a host contender: timed once, not in rounds
    torch = softmax["contenders"]["torch"]
    assert torch["status"] == "ok" and torch["median_us"] == 3.0 and torch["clock"] == "fake-events"
    assert torch["rounds_us"] == [3.0, 3.0, 3.0] and torch["iqm_us"] == 3.0 and torch["step_us"] is None
    assert softmax["best_baseline_over_ours_rounds"] == []  # ours has no rounds to pair with
    assert torch["check"]["passed"] is True
    assert softmax["contenders"]["cupy"]["status"] == "wrong" and "median_us" not in softmax["contenders"]["cupy"]
    assert softmax["contenders"]["triton"]["status"] == "unavailable"
    assert softmax["floor"]["bytes"] == 2 * 32 * 128 * 4 and softmax["floor"]["bound"] == "memory"
    assert softmax["best_baseline"] == "torch"
    assert softmax["best_baseline_over_ours"] == pytest.approx(3.0 / ours["median_us"], rel=1e-2)
    assert softmax["ours_over_floor"] == pytest.approx(ours["median_us"] / softmax["floor"]["floor_us"], rel=1e-2)
    assert list(graph["contenders"]) == ["ours"] and graph["best_baseline"] is None and "baseline_note" in graph
    assert broken == {"name": "broken", "spec": "b.yaml", "error": "E602: no compiler"}


def test_table_has_a_column_per_baseline_and_a_row_per_benchmark(doc):
    text = report.format_table(doc)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| benchmark | ours us"))
    # numpy and the fakes have results; triton is unavailable everywhere: named in the notes, no column
    assert header == ("| benchmark | ours us | Cupy us | Torch us | NumPy us | floor us | ours/floor | "
                      "best baseline/ours |")
    softmax_row = next(line for line in lines if line.startswith("| softmax_f32 |"))
    cells = [c.strip() for c in softmax_row.strip("|").split("|")]
    assert cells[2] == "wrong" and cells[3] == "3.0" and cells[-1].endswith("(Torch)")
    assert any(line.startswith("| small_graph |") for line in lines)
    assert any(line.startswith("| broken | not run |") for line in lines)
    assert "ceilings measured in this run: copy 10 GB/s" in lines[0]
    assert any(line.startswith("- unavailable (Triton):") for line in lines)
    assert any(line.startswith("- wrong (Cupy): computes something else") for line in lines)
    # median, interquartile mean, each interleaved round's median, the spread
    assert any("| softmax_f32 | Torch | 3.0 | 3.00 | 3.0 / 3.0 / 3.0 | 0.0% |" in line for line in lines)


def test_plot_is_a_png(doc, tmp_path):
    import matplotlib.image

    path = tmp_path / "bench.png"
    report.plot(doc, str(path))
    assert path.read_bytes()[:8] == PNG
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 500


def test_a_panel_axis_is_set_by_the_contenders_near_the_fastest_not_by_a_slow_eager_baseline():
    # ours 100, a hand kernel 102, an eager baseline 50x slower: the axis shows the first two apart
    assert report._panel_limit([100.0, 102.0, 5000.0], 67.0) == pytest.approx(1.3 * 102.0)
    # the floor is always on the axis, even past every bar
    assert report._panel_limit([10.0, 11.0], 12.0) == pytest.approx(1.3 * 12.0)
    # everything within CLIP x the fastest is shown whole
    assert report._panel_limit([100.0, 290.0], None) == pytest.approx(1.3 * 290.0)


def test_a_ratio_near_level_keeps_the_digit_that_says_who_is_ahead():
    assert report._times_ours(130.7 / 131.3) == "0.995" and report._times_ours(1.004) == "1.004"
    assert report._times_ours(2.3396) == "2.34" and report._times_ours(0.92) == "0.92"


def test_plot_without_any_timing_still_writes_a_png(tmp_path):
    empty = {"backend": "cpu", "device": {}, "benchmarks": [{"name": "x", "spec": "x.yaml", "error": "E602"}]}
    report.plot(empty, str(tmp_path / "empty.png"))
    assert (tmp_path / "empty.png").read_bytes()[:8] == PNG


def test_versions_are_read_without_importing():
    data = report.versions()
    assert data["numpy"] == np.__version__ and "cuvil-dsl" in data


def test_non_finite_numbers_become_null():
    assert report._finite({"a": [float("inf"), 1.5], "b": {"c": float("nan")}}) == {"a": [None, 1.5], "b": {"c": None}}


def test_the_best_baseline_is_compared_with_ours_round_by_round():
    def entry(rounds):
        return {"label": "x", "device": "gpu", "status": "ok", "median_us": sorted(rounds)[1], "rounds_us": rounds}

    doc = {"backend": "cuda", "device": {"gpu": "G"}, "ceilings": None, "benchmarks": [{
        "name": "b", "contenders": {"ours": entry([10.0, 10.2, 10.1]), "torch": {**entry([10.1, 10.0, 10.3]),
                                                                                   "label": "Torch"}},
        "floor": None, "best_baseline": "torch", "best_baseline_over_ours": 1.0,
        "best_baseline_over_ours_rounds": [1.01, 0.9804, 1.02], "ours_over_floor": None}]}
    row = next(line for line in report.format_table(doc).splitlines() if line.startswith("| b |"))
    # the order of the two changes between rounds: the table says so
    assert row.endswith("| 1.00 (Torch); rounds 0.980-1.020 |")


def test_a_floor_far_below_ours_is_called_out_as_launch_bound():
    def bench(name, ours, floor):
        return {"name": name, "floor": {"floor_us": floor}, "ours_over_floor": ours / floor,
                "contenders": {"ours": {"label": "cuvil-dsl", "status": "ok", "median_us": ours}}}

    doc = {"backend": "cuda", "device": {"gpu": "GPU"}, "ceilings": None,
           "benchmarks": [bench("small_graph", 21.0, 0.011), bench("softmax_f16", 131.0, 126.0)]}
    notes = [line for line in report.format_table(doc).splitlines() if line.startswith("- floor:")]
    assert len(notes) == 1 and notes[0].endswith("[small_graph]") and "launches" in notes[0]
