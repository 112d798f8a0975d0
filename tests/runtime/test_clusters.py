"""Persistent cluster kernels: the launch grid fitted to the device (runtime/clusters.py).

The ``CUlaunchConfig`` layout is compared with the NVIDIA wheel's ``cuda.h`` (no GPU needed); the
fitting rule is checked with the driver's answer replaced. tests/gpu/test_runtime_gpu.py asks the
real driver on the H200.
"""

from __future__ import annotations

import ctypes
import re

import pytest

from cuvil_dsl.codegen.artifact import RenderedKernel
from cuvil_dsl.diagnostics import Span
from cuvil_dsl.runtime import clusters



def test_launch_config_matches_the_header_field_by_field(cuda_h):
    body = re.search(r"typedef struct CUlaunchConfig_st \{(.*?)\} CUlaunchConfig;", cuda_h, re.S).group(1)
    fields = re.findall(r"^\s*([\w\s\*]+?)\s*\b(\w+);", body, re.M)
    assert [name for _, name in fields] == [name for name, _ in clusters.LaunchConfig._fields_]
    for (ctype, name), (_, ours) in zip(fields, clusters.LaunchConfig._fields_):
        if ctype.strip() in ("CUstream", "CUlaunchAttribute *"):
            assert ours is ctypes.c_void_p, name
        else:
            assert ctype.strip() == "unsigned int" and ours is ctypes.c_uint, name
    declared = re.search(r"CUresult CUDAAPI cuOccupancyMaxActiveClusters\(([^)]*)\);", cuda_h)
    assert declared and declared.group(1).count(",") == 2 and "const CUlaunchConfig *" in declared.group(1)


def test_non_portable_cluster_attribute_is_the_headers(cuda_h):
    """A persistent kernel of more than 8 CTAs a cluster opts in to non-portable sizes before it is loaded."""
    from cuvil_dsl.runtime import modules

    value = modules.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED
    assert re.search(rf"CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED\s*=\s*{value}\b", cuda_h)


def _kernel(grid: int, cluster: int) -> RenderedKernel:
    return RenderedKernel("k", "cvl_k", "", (grid, 1, 1), (128, 1, 1), 1024, (), (), None, Span("k.cuvil", 1, 1, 1, 2),
                          persistent_cluster=cluster)


@pytest.mark.parametrize(("grid", "cluster", "fit", "want"), [
    (352, 8, 44, 352),  # the H200: the rendered grid fits
    (352, 8, 40, 320),  # a part with fewer multiprocessors: 40 clusters of 8
    (352, 8, None, 352),  # the driver cannot say: as rendered
    (24, 2, 1, 2),  # at least one cluster
    (352, 0, 10, 352),  # not persistent: never changed
])
def test_fitted_grid_launches_no_more_clusters_than_run_at_once(monkeypatch, grid, cluster, fit, want):
    monkeypatch.setattr(clusters, "max_active_clusters", lambda kernel, function: fit)
    assert clusters.fitted_grid(_kernel(grid, cluster), 0) == (want, 1, 1)


def test_only_the_lagged_band_is_persistent():
    from cuvil_dsl.codegen import render_cuda
    from cuvil_dsl.frontend import check_source
    from cuvil_dsl.passes import plan_pipeline

    text = """pipeline a(q: f16[B, M, D], k: f16[B, N, D]) -> p: f16[B, M, N] {
        kernel s { p = softmax((q @ k.T) * 0.125, axis=-1) }
    }"""
    plan, _ = plan_pipeline(check_source(text, "a.cuvil").module.pipelines[0])
    (lagged,) = render_cuda(plan, {"B": 32, "M": 2048, "N": 2048, "D": 64}, "sm_90")
    # every cluster 3 CTAs a multiprocessor would hold on 132 SMs (the loader launches those that run at once)
    assert lagged.persistent_cluster == 8 and lagged.grid == (132 * 3 // 8 * 8, 1, 1)
    (small,) = render_cuda(plan, {"B": 4, "M": 256, "N": 256, "D": 64}, "sm_90")
    assert small.persistent_cluster == 0
