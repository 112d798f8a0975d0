"""The GPU paths for real: CUDA events, the L2 flush, every GPU baseline checked and timed.

Skipped without a GPU. Shapes are small but GPU-friendly (multiples of the usual tiles).
"""

from __future__ import annotations

import json

import pytest
from bench_support import copy_benchmarks

from cuvil_dsl.bench.timing import CudaClock, GpuTimer, Settings
from cuvil_dsl.cli import main

pytestmark = pytest.mark.gpu

GPU_SHAPES = {
    "elementwise_f32": {"N": 1 << 20},
    "softmax_f16": {"M": 256, "N": 1024},
    "softmax_f32": {"M": 256, "N": 1024},
    "layernorm_f16": {"M": 256, "N": 1024},
    "gemm_gelu_f16": {"M": 256, "N": 256, "K": 256},
    "attention_f16": {"B": 2, "M": 128, "N": 128, "D": 64},
}


@pytest.fixture(scope="module")
def gpu_benchmarks(tmp_path_factory):
    return copy_benchmarks(tmp_path_factory.mktemp("gpu-benchmarks"), GPU_SHAPES)


def test_the_flush_buffer_is_twice_the_l2():
    from cuvil_dsl.runtime.device import device_info

    assert CudaClock().flush_bytes == 2 * device_info(0).l2_bytes


def test_events_time_the_work_and_not_the_flush():
    import cupy

    clock = CudaClock()
    stream = cupy.cuda.Stream(non_blocking=True)
    small = cupy.empty(4, dtype=cupy.uint8)
    big = cupy.empty(1 << 28, dtype=cupy.uint8)

    def tiny():
        cupy.cuda.runtime.memsetAsync(small.data.ptr, 1, 4, stream.ptr)

    def large():
        cupy.cuda.runtime.memsetAsync(big.data.ptr, 1, big.nbytes, stream.ptr)

    timer = GpuTimer(clock, Settings.quick())
    tiny_time, large_time = timer.measure(tiny, stream), timer.measure(large, stream)
    # the flush clears 2x L2 (~126 MB on an H200, tens of microseconds) before every sample
    assert tiny_time.median_us < 20 and tiny_time.samples >= 5
    assert large_time.median_us > 10 * tiny_time.median_us
    assert tiny_time.e2e_p50_us > tiny_time.median_us  # the host's share shows end to end only


def run_bench(capsys, specs, baselines):
    rc = main(["bench", *map(str, specs), "--backend", "cuda", "--quick", "--json", "--baselines", baselines])
    out, err = capsys.readouterr()
    assert rc == 0, err[-3000:]
    return json.loads(out)


def assert_all_timed(doc):
    problems = []
    for bench in doc["benchmarks"]:
        for name, entry in bench["contenders"].items():
            if entry["status"] not in ("ok", "unavailable"):
                problems.append(f"{bench['name']} / {name}: {entry['status']}: {entry.get('reason')}")
    assert not problems, "\n".join(problems)


def test_every_benchmark_against_the_eager_and_triton_baselines(gpu_benchmarks, capsys):
    doc = run_bench(capsys, sorted(gpu_benchmarks.glob("*.yaml")), "cupy,torch,triton,numpy")
    assert doc["ceilings"]["where"] == "gpu" and doc["ceilings"]["copy_GBps"] > 100
    assert doc["ceilings"]["matmul_TFLOPs"]["f16"] > 10
    for bench in doc["benchmarks"]:
        ours = bench["contenders"]["ours"]
        assert ours["status"] == "ok" and ours["clock"] == "cuda-events" and ours["e2e_p50_us"] > 0
        assert "Python API" in ours["note"]
        assert len(ours["rounds_us"]) == 3 and ours["iqm_us"] > 0 and ours["step_us"] < 1  # interleaved rounds
        if bench["best_baseline"] not in (None, "numpy"):  # a GPU baseline: paired with ours round by round
            assert len(bench["best_baseline_over_ours_rounds"]) == 3
        assert bench["floor"]["floor_us"] > 0
        if bench["kind"] == "gemm_bias_gelu":
            assert bench["floor"]["flops"] == 2 * 256**3
    assert_all_timed(doc)


def test_torch_compile_baseline(gpu_benchmarks, capsys):
    doc = run_bench(capsys, [gpu_benchmarks / "softmax_f32.yaml", gpu_benchmarks / "elementwise_f32.yaml"],
                    "torch_compile")
    assert_all_timed(doc)
