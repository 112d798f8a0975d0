"""The fusion planner, asserted on plans (no compiling): what shares a kernel, and why not."""

from __future__ import annotations

import pytest

from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes import GraphStep, HostStep, Launch, format_plan, plan_pipeline


def plan_of(text: str, overrides: dict | None = None, name: str = "plan_case.cuvil"):
    checked = check_source(text, name)
    assert checked.ok, [str(d) for d in checked.diagnostics]
    return plan_pipeline(checked.module.pipelines[0], overrides)


def kernels(text: str):
    plan, diags = plan_of(text)
    assert not diags, diags
    return plan.kernels


def test_elementwise_chain_before_softmax_is_one_row_kernel():
    (k,) = kernels("""pipeline f(x: f32[R, C]) -> y: f32[R, C] {
        a = x * 2
        b = a + 1
        y = softmax(b)
    }""")
    assert (k.name, k.kind) == ("main_k1", "row")
    assert [op.out for op in k.ops] == ["a", "b", "y"]
    assert k.inputs == ("x",) and k.outputs == ("y",)
    assert k.row_axis == 1


def test_gemm_then_row_softmax_is_one_kernel_and_transpose_is_a_view():
    (k,) = kernels("""pipeline f(q: f16[B, M, D], k: f16[B, N, D], scale: f32) -> p: f16[B, M, N] {
        s = (q @ k.T) * scale
        p = softmax(s, axis=-1)
    }""")
    assert k.kind == "matmul_softmax"
    assert set(k.inputs) == {"q", "k"}  # k is read in place through the view
    assert k.outputs == ("p",)
    assert [op.op for op in k.ops].count("transpose") == 1


def test_kernel_blocks_keep_their_names_and_generated_ones_count_per_graph():
    plan, diags = plan_of("""pipeline f(x: f32[N], y: f32[N]) -> (a: f32[N], b: f32[N], c: f32[N], d: f32[N]) {
        graph forward {
            a = exp(x)
            kernel mine { b = a * y }
            c = sum(b, axis=0, keepdims=true) + a
        }
        d = x + 1
    }""")
    assert not diags
    names = [k.name for k in plan.kernels]
    assert names == ["forward_k1", "mine", "forward_k2", "main_k1"]
    assert plan.kernel("mine").block_name == "mine"
    assert [type(s) for s in plan.steps] == [GraphStep, Launch]


def test_buffer_roles_and_registers():
    plan, _ = plan_of("""pipeline f(x: f32[M, K], w: f32[K, N]) -> (y: f32[M, N], z: f32[M, N]) {
        h = x @ w
        y = h * 2
        t = y + 1
        z = softmax(t, axis=0)
    }""")
    roles = {b.name: b.role for b in plan.buffers}
    assert roles == {"x": "input", "w": "input", "y": "result", "z": "result"}
    # h and t never leave registers; y is a result that also feeds the next kernel
    gemm, rows = plan.kernels
    assert gemm.kind == "matmul" and rows.kind == "row"
    assert gemm.outputs == ("y",) and rows.inputs == ("y",)


def test_value_read_by_a_host_statement_is_a_buffer_and_splits_the_work():
    plan, _ = plan_of("""pipeline f(x: f32[N]) -> y: f32[N] {
        h = x * 2
        print(h)
        y = h + 1
    }""")
    assert plan.buffer("h").role == "intermediate"
    assert [type(s).__name__ for s in plan.steps] == ["Launch", "HostStep", "Launch"]
    assert [k.name for k in plan.kernels] == ["main_k1", "main_k2"]


def test_graph_boundaries_are_never_crossed():
    plan, _ = plan_of("""pipeline f(x: f32[N]) -> y: f32[N] {
        graph one { a = x * 2 }
        graph two { y = a + 1 }
    }""")
    assert [(s.name, [l.kernel.name for l in s.launches]) for s in plan.steps] == [
        ("one", ["one_k1"]), ("two", ["two_k1"])]


def test_uniforms_are_evaluated_on_the_host():
    plan, _ = plan_of("""pipeline f(x: f16[N], alpha: f32 = 0.5) -> y: f16[N] {
        y = x * (alpha * 2 + 1) + cast(alpha, f16)
    }""")
    host = {op.op for op in plan.host_ops}
    assert {"const", "mul", "add", "to_tensor", "cast"} <= host
    (k,) = plan.kernels
    assert all(op.out not in {h.out for h in plan.host_ops} for op in k.ops)
    assert len(k.uniforms) == 2


def test_transpose_of_a_parameter_is_read_in_place():
    (k,) = kernels("""pipeline f(a: f32[K, M], b: f32[K, N]) -> y: f32[M, N] {
        y = a.T @ b
    }""")
    assert k.kind == "matmul" and k.inputs == ("a", "b")


def test_materialized_transpose_is_stored_by_its_producer():
    (k,) = kernels("""pipeline f(x: f32[M, N], v: f32[N]) -> s: f32[N, M] {
        s = (x + v).T * 2
    }""")
    assert k.kind == "elementwise" and k.outputs == ("s",)


def test_reductions_over_one_axis_share_a_kernel_and_other_axes_split():
    plan, _ = plan_of("""pipeline f(x: f32[R, C]) -> (s: f32[R], cm: f32[1, C], rr: f32[R, 1], sh: f32[R, C]) {
        s = sum(x, axis=1)
        cm = mean(x, axis=0, keepdims=true)
        mx = max(x, axis=-1, keepdims=true)
        rr = mx - min(x, axis=1, keepdims=true)
        sh = x - mx
    }""")
    rows, cols = plan.kernels
    assert rows.outputs == ("s", "rr", "sh") and rows.row_axis == 1
    assert cols.outputs == ("cm",) and cols.row_axis == 0
    assert any("another axis" in note for note in plan.notes)


def test_epilogue_temporary_moves_to_its_reader():
    plan, _ = plan_of("""pipeline f(x: bf16[T, D], wg: bf16[D, F], wu: bf16[D, F]) -> y: bf16[T, F] {
        gate = x @ wg
        up = x @ wu
        y = silu(gate) * up
    }""")
    first, second = plan.kernels
    # memory holds the named (rounded) `gate`, not the unnamed silu(gate)
    assert first.outputs == ("gate",) and "gate" in second.inputs



MASKED = """pipeline f(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], qpos: i32[M, 1],
           kpos: i32[1, N]) -> (o: f16[B, M, D]{extra_result}) {{
    graph forward {{
        causal = kpos <= qpos
        {body}
    }}
}}"""


@pytest.mark.parametrize("body", [
    "o = softmax(where(causal, (q @ k.T) * 0.125, -30000.0)) @ v",
    "kernel flash { o = softmax(where(causal, (q @ k.T) * 0.125, -30000.0)) @ v }",
], ids=["planned", "kernel_block"])
def test_mask_from_positions_is_computed_in_the_attention_kernel(body):
    # the [M, N] mask is never stored: the attention kernel compares the positions itself (an [M, N] bool
    # buffer, written by a kernel of its own and read back per element, made the causal benchmark 1.8x slower)
    (k,) = kernels(MASKED.format(extra_result="", body=body))
    assert k.kind == "attention"
    assert set(k.inputs) == {"q", "k", "v", "qpos", "kpos"}
    assert "causal" in [op.out for op in k.ops]


def test_mask_read_elsewhere_too_stays_in_memory():
    plan, diags = plan_of(MASKED.format(
        extra_result=", n: i32[M, N]",
        body="o = softmax(where(causal, (q @ k.T) * 0.125, -30000.0)) @ v\n        n = where(causal, 1, 0)"))
    assert not diags
    first, attention = plan.kernels  # `n` joins the kernel that computes the mask
    assert first.outputs == ("causal", "n")
    assert "causal" in attention.inputs


WINDOW = """pipeline f(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], qpos: i32[M, 1],
           kpos: i32[1, N]) -> (o: f16[B, M, D]{extra_result}) {{
    graph forward {{
        {body}
    }}
}}"""


@pytest.mark.parametrize("cond", ["kpos > qpos - 64", "(kpos <= qpos) & (kpos > qpos - 64)", "kpos - 64 < qpos * 2"])
def test_a_mask_computed_in_steps_is_computed_in_the_attention_kernel(cond):
    # a window's edge, `qpos - 64`, is a value of its own that only the comparison reads: it moves into the
    # attention kernel with the comparison, so no [M, N] mask is stored
    (k,) = kernels(WINDOW.format(extra_result="", body=f"o = softmax(where({cond}, (q @ k.T) * 0.125, -30000.0)) @ v"))
    assert k.kind == "attention" and set(k.inputs) == {"q", "k", "v", "qpos", "kpos"}


def test_a_step_of_the_mask_read_elsewhere_stays_in_memory():
    # `qpos - 64` is also a result, so it is stored anyway: the comparison moves alone and reads it from memory
    plan, diags = plan_of(WINDOW.format(extra_result=", e: i32[M, 1]", body=(
        "e = qpos - 64\n        o = softmax(where(kpos > e, (q @ k.T) * 0.125, -30000.0)) @ v")))
    assert not diags
    first, attention = plan.kernels
    assert first.outputs == ("e",) and attention.kind == "attention" and "e" in attention.inputs


E401_CASES = {
    "second_matmul": ("""pipeline f(x: f16[M, K], w: f16[K, N], v: f16[N, P]) -> b: f16[M, P] {
    kernel k {
        a = x @ w
        b = a @ v
    }
}""", (4, 9, 10), "a second `@` in one kernel"),
    "reduction_feeding_matmul": ("""pipeline f(x: f32[M, K], w: f32[1, N]) -> y: f32[M, N] {
    kernel k {
        s = sum(x, axis=1, keepdims=true)
        y = s @ w
    }
}""", (4, 9, 10), "a reduction or row operation feeding `@`"),
    "two_axes": ("""pipeline f(x: f32[M, N]) -> b: f32[M, N] {
    kernel k {
        a = softmax(x, axis=0)
        b = softmax(a, axis=1)
    }
}""", (4, 9, 10), "another axis"),
    "shapes": ("""pipeline f(x: f32[M], y: f32[N]) -> (a: f32[M], bb: f32[N]) {
    kernel k { a = x * 2; bb = y * 3 }
}""", (2, 27, 29), "cannot share the kernel's iteration space"),
    "prologue_into_matmul": ("""pipeline f(x: f16[M, K], w: f16[K, N]) -> y: f16[M, N] {
    kernel k {
        h = x * 2
        y = (h @ w) + 1
    }
}""", (4, 9, 10), "elementwise work feeding `@`"),
    "matmul_then_reduction": ("""pipeline f(x: f32[M, K], w: f32[K, N]) -> y: f32[M] {
    kernel k {
        h = x @ w
        y = sum(h,
                axis=1)
    }
}""", (4, 9, 10), "only a row softmax over the last axis"),
}


@pytest.mark.parametrize("case", sorted(E401_CASES))
def test_kernel_block_that_cannot_be_one_kernel_is_e401_at_the_statement(case):
    text, (line, col, end), reason = E401_CASES[case]
    plan, diags = plan_of(text, name=f"{case}.cuvil")
    (d,) = diags
    assert d.code == "E401" and reason in d.message and "kernel block `k`" in d.message
    assert (d.span.line, d.span.column, d.span.end_column) == (line, col, end)
    assert len(plan.kernels) == 2  # the plan stays complete: the rest is placed by the policy


def test_always_fusible_kernel_blocks():
    for body in ("a = exp(x) * 2; y = a - 1",
                 "m = max(x, axis=1, keepdims=true); y = exp(x - m) + 1",
                 "y = layernorm(x * 2) * 3",
                 "h = x @ w; y = gelu(h + 1)",
                 "h = x @ w; y = softmax(h * 0.5) * 2"):
        text = f"pipeline f(x: f32[N, N], w: f32[N, N]) -> y: f32[N, N] {{ kernel k {{ {body} }} }}"
        plan, diags = plan_of(text)
        assert not diags, (body, diags)
        assert [k.name for k in plan.kernels] == ["k"], body


def test_overrides_are_validated_per_kernel_kind():
    text = """pipeline f(a: f16[M, K], b: f16[K, N], x: f32[N]) -> (y: f16[M, N], z: f32[N]) {
        kernel g { y = a @ b }
        z = x * 2
    }"""
    plan, diags = plan_of(text, {"g": {"tile": {"m": 64, "n": 64, "k": 32}, "block": 128, "max_registers": 128},
                                 "main_k1": {"block": 512}})
    assert not diags
    g = plan.kernel("g").config
    assert (g.tile_m, g.tile_n, g.tile_k, g.block, g.max_registers) == (64, 64, 32, 128, 128)
    assert set(g.overridden) == {"tile", "block", "max_registers"}
    assert plan.kernel("main_k1").config.block == 512
    _, diags = plan_of(text, {"g": {"tile": {"m": 48, "n": 64, "k": 32}}, "main_k1": {"tile": {"m": 64}}})
    assert [d.code for d in diags] == ["E503", "E503"]
    assert "kernel `g`" in diags[0].message and "32, 64, 128, 256" in diags[0].message
    assert "matmul kernels only" in diags[1].message


def test_format_plan_is_readable():
    plan, _ = plan_of("""pipeline f(x: f32[R, C], w: f32[C]) -> y: f32[R, C] {
        graph g { y = rmsnorm(x, w) }
    }""")
    text = format_plan(plan)
    assert "graph g {" in text and "kernel g_k1 [row] (x, w) -> (y)" in text
    assert "domain [R, C] rows along axis 1" in text


def test_host_statements_become_steps():
    plan, _ = plan_of("""pipeline f(x: f32[N]) -> y: f32[N] {
        y = x * 2
        sync
        assert_finite(y)
    }""")
    assert [type(s) for s in plan.steps] == [Launch, HostStep, HostStep]


def test_row_operation_along_an_axis_of_one_is_planned():
    """A softmax of a keepdims sum runs along an axis of extent 1 (the hardening fuzzer's case):
    planned like any row operation, not refused with an internal error."""
    text = ("pipeline p(x: f32[N, N], v: f32[N]) -> y: f32[N, N] "
            "{ t0 = cast(softmax(sum(x, axis=1, keepdims=true)), f16); y = x * 2 }")
    plan, diags = plan_pipeline(check_source(text, "fuzz.cuvil").module.pipelines[0])
    assert not [d for d in diags if d.is_error] and plan.kernels
