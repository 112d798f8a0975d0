"""The driver bindings that rewrite graph kernel nodes in place, checked against ``cuda.h``.

Getting a ctypes struct wrong would pass garbage to the driver, so the layout is compared,
field by field, with the header shipped in the NVIDIA wheel (present without a GPU); the GPU
tests (tests/gpu/test_runtime_gpu.py) check that rebinding really goes through this path.
"""

from __future__ import annotations

import ctypes
import re

import pytest

from cuvil_dsl.runtime import graph_nodes
from cuvil_dsl.runtime.graph_nodes import KernelNodeParams, kernel_nodes



def test_kernel_node_params_match_the_header_field_by_field(cuda_h):
    body = re.search(r"typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st \{(.*?)\} CUDA_KERNEL_NODE_PARAMS_v2;",
                     cuda_h, re.S).group(1)
    fields = re.findall(r"^\s*([\w\s\*]+?)\s*\b(\w+);", body, re.M)
    assert [name for _, name in fields] == [name for name, _ in KernelNodeParams._fields_]
    pointer_like = {"CUfunction", "void **", "CUkernel", "CUcontext"}
    for (ctype, name), (_, ours) in zip(fields, KernelNodeParams._fields_):
        if ctype.strip() in pointer_like:
            assert ctypes.sizeof(ours) == ctypes.sizeof(ctypes.c_void_p), name
        else:
            assert ctype.strip() == "unsigned int" and ours is ctypes.c_uint, name
    assert ctypes.sizeof(KernelNodeParams) == 72  # 8 + 7*4 + 4 padding + 4*8 on x86-64


@pytest.mark.parametrize(("entry", "arity"), [("cuGraphGetNodes", 3), ("cuGraphNodeGetType", 2),
                                               ("cuGraphKernelNodeGetParams_v2", 2),
                                               ("cuGraphExecKernelNodeSetParams_v2", 3)])
def test_bound_entry_points_are_the_headers_current_ones(cuda_h, entry, arity):
    """A ``_v2`` name is what cuda.h maps the plain name to (so it takes the v2 struct)."""
    plain = entry.removesuffix("_v2")
    if plain != entry:
        assert re.search(rf"#define {plain}\s+{entry}\b", cuda_h), entry
    declared = re.search(rf"CUresult CUDAAPI {plain}\(([^)]*)\);", cuda_h)
    assert declared, entry
    assert declared.group(1).count(",") + 1 == arity
    if plain != entry:
        assert "CUDA_KERNEL_NODE_PARAMS *" in declared.group(1)


def test_kernel_node_type_constant_matches_the_header(cuda_h):
    assert re.search(r"CU_GRAPH_NODE_TYPE_KERNEL\s*=\s*0\b", cuda_h)


def test_without_a_driver_there_are_no_nodes_to_rewrite(monkeypatch):
    monkeypatch.setattr(graph_nodes, "driver", lambda: None)
    assert kernel_nodes(1234, [object()]) is None  # the runner then re-captures
