"""benchmarks/cluster_placement.py without a GPU: its probe has the resources of the attention benchmark's
cluster kernel (so what it finds on the GPU holds for that kernel), builds for sm_90, counts the
multiprocessors by the CTAs of the first wave, and the script exits 2 without a GPU."""

from __future__ import annotations

from bench_support import ROOT, build_for_sm_90, exits_2_without_gpu, load_script

from cuvil_dsl.codegen import render_cuda
from cuvil_dsl.frontend import check_file
from cuvil_dsl.passes import plan_pipeline
from cuvil_dsl.spec.binding import bind, select_pipeline
from cuvil_dsl.spec.loader import load_spec


def test_the_probe_has_the_attention_kernels_resources(tmp_path):
    s = load_script("cluster_placement")
    loaded = load_spec(ROOT / "benchmarks" / "attention_f16.yaml")
    checked = check_file(loaded.pipeline_path)
    pipeline = select_pipeline(loaded, checked.module)
    binding = bind(loaded, pipeline)
    plan, _ = plan_pipeline(pipeline, dict(loaded.spec.kernels), "sm_90")
    (kernel,) = render_cuda(plan, binding.sizes, "sm_90", tf32=loaded.spec.target.tf32)
    assert kernel.persistent_cluster == s.CLUSTER and f"__cluster_dims__({s.CLUSTER}, 1, 1)" in kernel.source
    assert kernel.block == (s.THREADS, 1, 1) and kernel.shared_bytes == s.DYNAMIC_SHARED
    unit = build_for_sm_90(kernel.source, (kernel.entry,), tmp_path / "attention", kernel.options)
    assert unit.resources[kernel.entry].shared_bytes == s.STATIC_SHARED
    probe = build_for_sm_90(s.source(), ("probe",), tmp_path / "probe")
    assert probe.resources["probe"].shared_bytes == s.STATIC_SHARED


def test_placement_counts_the_first_wave():
    s = load_script("cluster_placement")
    # SMs 0-2: 3, 2 and 1 CTAs of the first wave; CTA 6 starts 200 us later (a second wave); SM 3 none
    sms = [0, 0, 0, 1, 1, 2, 2]
    started = [1_000, 2_000, 3_000, 1_500, 4_000, 2_500, 201_000]
    assert s.placement(sms, started, 4) == (6, {0: 1, 1: 1, 2: 1, 3: 1})


def test_without_a_gpu_it_exits_2(capsys):
    exits_2_without_gpu(load_script("cluster_placement"), "cluster_placement", capsys, [])
