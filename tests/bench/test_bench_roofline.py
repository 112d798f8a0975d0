"""Floors from plans and IR, and the ceilings' bookkeeping."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvil_dsl import driver
from cuvil_dsl.bench.roofline import Ceilings, floor_for, masked_share, matmul_flops, measure_host, traffic_bytes
from cuvil_dsl.bench.timing import HostTimer, Settings
from cuvil_dsl.passes import plan_pipeline

SPECS = Path(__file__).resolve().parents[2] / "specs"
GPU = Ceilings("gpu", 1e12, {"f16": 1e14}, {})  # 1 TB/s, 100 TFLOP/s


def planned(path):
    session = driver.open_spec(path, backend="reference")
    plan, _ = plan_pipeline(session.pipeline, driver.kernel_overrides(session.loaded), "sm_90")
    return session, plan


def test_gemm_floor_counts_inputs_and_results_once_and_2mnk_flops():
    session, plan = planned(SPECS / "gemm_bias_gelu.yaml")  # M=512 K=512 N=1024, f16
    M, K, N = 512, 512, 1024
    nbytes = (M * K + K * N + N + M * N) * 2
    assert traffic_bytes(plan, session.binding.sizes) == nbytes
    assert matmul_flops(session.pipeline, session.binding.sizes) == {"f16": 2 * M * N * K}
    floor = floor_for(plan, session.pipeline, session.binding.sizes, GPU)
    assert floor.memory_us == pytest.approx(nbytes / 1e12 * 1e6)
    assert floor.compute_us == pytest.approx(2 * M * N * K / 1e14 * 1e6)
    assert floor.floor_us == floor.compute_us and floor.bound == "compute"
    assert floor.to_json() == {"bytes": nbytes, "flops": 2 * M * N * K, "memory_us": round(floor.memory_us, 3),
                               "compute_us": round(floor.compute_us, 3), "floor_us": round(floor.compute_us, 3),
                               "bound": "compute"}


def test_batched_matmul_through_a_transpose_counts_every_batch():
    session, plan = planned(SPECS / "attention_scores.yaml")  # B=4 M=N=256 D=64: q @ k.T
    assert matmul_flops(session.pipeline, session.binding.sizes) == {"f16": 2 * 4 * 256 * 256 * 64}
    floor = floor_for(plan, session.pipeline, session.binding.sizes, GPU)
    assert floor.bytes == (2 * 4 * 256 * 64 + 4 * 256 * 256) * 2 and floor.bound == "memory"


def test_a_masked_softmax_counts_the_products_the_mask_keeps(tmp_path):
    """softmax(where(c, q k^T, fill)) v with c from the inputs: both products count the kept logits' share, a row
    masked whole counting whole; a mask computed from the scores, or a fill read from memory, keeps the dense
    count."""
    head = "pipeline p(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], qpos: i32[M, 1], kpos: i32[1, N]"

    def session(body: str, extra: str = ""):
        (tmp_path / "m.cuvil").write_text(f"{head}{extra}) -> o: f16[B, M, D] {{\n    o = {body}\n}}\n")
        (tmp_path / "m.yaml").write_text("pipeline: m.cuvil\nshapes: {B: 3, M: 8, N: 12, D: 16}\ninputs:\n"
                                         "  qpos: {init: arange}\n  kpos: {init: arange}\n")
        s = driver.open_spec(tmp_path / "m.yaml", backend="reference")
        return s, masked_share(s.pipeline, s.inputs, s.binding.params, s.binding.sizes)

    dense = 2 * 3 * 8 * 12 * 16
    s, kept = session("softmax(where(kpos <= qpos, q @ k.T, -30000.0)) @ v")
    share = sum(range(1, 9)) / (8 * 12)  # row i keeps keys 0..i
    assert sorted(kept.values()) == [share, share]
    assert matmul_flops(s.pipeline, s.binding.sizes, kept) == {"f16": 2 * round(dense * share)}
    s, kept = session("softmax(where(kpos <= qpos - 3, q @ k.T, -30000.0)) @ v")  # rows 0-2 masked whole
    assert list(kept.values())[0] == (3 * 12 + sum(range(1, 6))) / (8 * 12)
    assert session("softmax(where(q @ k.T > 0.0, q @ k.T, -30000.0)) @ v")[1] == {}
    assert session("softmax(where(kpos <= qpos, q @ k.T, f)) @ v", ", f: f16[M, N]")[1] == {}
    assert session("softmax(q @ k.T) @ v")[1] == {}


def test_elementwise_floor_is_memory_only_and_none_without_ceilings():
    session, plan = planned(SPECS / "elementwise_chain.yaml")  # f32[1048576] in and out
    floor = floor_for(plan, session.pipeline, session.binding.sizes, GPU)
    assert floor.bytes == 2 * 1048576 * 4 and floor.flops == {} and floor.compute_us is None
    assert floor.floor_us == floor.memory_us and floor.bound == "memory"
    bare = floor_for(plan, session.pipeline, session.binding.sizes, None)
    assert bare.floor_us is None and bare.bound is None and bare.bytes == floor.bytes


def test_rates_are_measured_on_first_need_and_bf16_shares_f16():
    asked = []
    ceilings = Ceilings("gpu", 1e12, {"f16": 5e14}, {}, measure_rate=lambda d: asked.append(d) or 6e13)
    assert ceilings.rate("bf16") == 5e14 and asked == []
    assert ceilings.rate("f32") == 6e13 and ceilings.rate("f32") == 6e13 and asked == ["f32"]
    host = Ceilings("host", 1e10, {"f32": 1e11}, {})
    assert host.rate("f16") == host.rate("f64") == 1e11  # one host rate for every dtype
    assert ceilings.to_json()["matmul_TFLOPs"] == {"f16": 500.0, "f32": 60.0}


def test_host_ceilings_are_measured():
    ceilings = measure_host(HostTimer(Settings(budget_s=0.001, warmup_s=0.0, host_min_samples=2)),
                            copy_bytes=1 << 16, n=32)
    data = ceilings.to_json()
    assert ceilings.where == "host" and ceilings.copy_bytes_per_s > 0 and ceilings.rate("f32") > 0
    assert data["copy_bytes"] == 1 << 16 and data["matmul_n"] == 32
