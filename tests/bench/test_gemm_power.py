"""benchmarks/gemm_power.py without a GPU: it says so and exits 2; its nvidia-smi query asks for the three
fields its report reads, in that order."""

from __future__ import annotations

from bench_support import exits_2_without_gpu, load_script


def test_the_query_matches_the_columns_read():
    s = load_script("gemm_power")
    assert s.QUERY.split(",") == ["clocks.sm", "power.draw", "temperature.gpu"]


def test_without_a_gpu_it_exits_2(capsys):
    exits_2_without_gpu(load_script("gemm_power"), "gemm_power", capsys, argv=[])
