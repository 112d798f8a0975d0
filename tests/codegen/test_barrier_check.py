"""check_barriers_uniform: flags barriers that some threads of a block could skip."""

from __future__ import annotations

import pytest

from cuvil_dsl.codegen import check_barriers_uniform

GOOD = """
__device__ int helper(int x) { if (threadIdx.x < 4) return x; return 0; }
extern "C" __global__ void k(float* p) {
    const int tid = threadIdx.x;
    __shared__ float s[256];
    s[tid] = p[tid];
    if (tid == 0) s[0] = 1.0f;   // per-thread work with no barrier inside is fine
    __syncthreads();
    for (int step = 0; step < 8; ++step) {
        if (step + 1 < 8) { p[tid] += s[step]; }
        __syncthreads();
    }
    if (blockIdx.x > 2) { __syncthreads(); }  // uniform across the block
}
"""

BAD = {
    "if_threadIdx": "__global__ void k() { if (threadIdx.x < 16) __syncthreads(); }",
    "braced_derived": "__global__ void k() { int lane = threadIdx.x % 32; int w = lane * 2; "
                      "if (w > 3) { int a = 0; __syncthreads(); } }",
    "else_branch": "__global__ void k() { int t = threadIdx.x; if (t == 0) { t = 1; } else { __syncthreads(); } }",
    "thread_loop": "__global__ void k() { for (int i = threadIdx.x; i < 100; i += 32) { __syncthreads(); } }",
    "early_return": "__global__ void k(int n) { int i = blockIdx.x * 32 + threadIdx.x; if (i >= n) return; "
                    "__syncthreads(); }",
    "asm_barrier": '__global__ void k() { if (threadIdx.y) { asm volatile("bar.sync 0;"); } }',
    "nested_uniform_outer": "__global__ void k() { for (int s = 0; s < 4; ++s) { if (threadIdx.x & 1) { "
                            "__syncthreads(); } } }",
}


def test_uniform_barriers_pass():
    assert check_barriers_uniform(GOOD) == []


@pytest.mark.parametrize("name", sorted(BAD))
def test_divergent_barriers_are_flagged(name):
    problems = check_barriers_uniform(BAD[name])
    assert len(problems) == 1, problems
    assert problems[0].startswith("line 1: barrier")


def test_comments_and_strings_do_not_count():
    text = '__global__ void k() { if (threadIdx.x) { /* __syncthreads(); */ const char* s = "__syncthreads()"; } }'
    assert check_barriers_uniform(text) == []


def test_report_names_the_condition_and_the_variables():
    (problem,) = check_barriers_uniform("__global__ void k() {\n int lane = threadIdx.x % 32;\n"
                                        " if (lane < 16) {\n  __syncthreads();\n }\n}")
    assert problem.startswith("line 4:") and "if (lane < 16)" in problem and "lane" in problem


def test_member_names_are_not_variables():
    """A per-thread local named ``x`` does not make ``blockIdx.x`` (or a loop over bands built from it)
    per-thread; a member written from a per-thread value taints its object."""
    persistent = ("__global__ void k() { const float x = threadIdx.x * 2.0f; int band = blockIdx.x / 8;"
                  " for (; band < 64; band += gridDim.x / 8) { __syncthreads(); } }")
    assert check_barriers_uniform(persistent) == []
    for member in ("float2 v; v.x = threadIdx.x; if (v.x > 1) __syncthreads();",
                   "S* p; p->a = lane; if (p->a) __syncthreads();"):
        assert len(check_barriers_uniform("__global__ void k() { " + member + " }")) == 1, member
