"""Fused attention (``softmax(q @ k.T * c) @ v`` in one kernel): when the planner fuses it and why
not, the launch settings it takes, and what the CUDA kernel compiles to. The GPU runs the programs
``attention_fused*`` of ``programs/`` against the reference (tests/gpu); the CPU backend's run is
in tests/cpu/test_cpu_attention.py."""

from __future__ import annotations

import re

import pytest
from codegen_cases import ROOT, load_case

from cuvil_dsl.codegen import render_cuda
from cuvil_dsl.diagnostics import UserError
from cuvil_dsl.frontend import check_source
from cuvil_dsl.passes import plan_pipeline

BENCH = ROOT / "benchmarks" / "attention_full_f16.yaml"
HEAD = "pipeline f(q: {dt}[B, M, D], k: {dt}[B, N, D], v: {dt}[B, N, E]) -> o: {dt}[B, M, E] {{"


def plan_of(body: str, dt: str = "f16", head: str | None = None, overrides: dict | None = None):
    text = (head or HEAD.format(dt=dt)) + "\n" + body + "\n}"
    checked = check_source(text, "attention_case.cuvil")
    assert checked.ok, [str(d) for d in checked.diagnostics]
    return plan_pipeline(checked.module.pipelines[0], overrides, "sm_90")


def test_softmax_times_v_is_one_attention_kernel():
    plan, diags = plan_of("o = softmax(q @ k.T * 0.125) @ v")
    assert not diags
    (k,) = plan.kernels
    assert k.kind == "attention" and k.outputs == ("o",) and set(k.inputs) == {"q", "k", "v"}
    assert [op.op for op in k.ops][-2:] == ["softmax", "matmul"]
    # elementwise work on the scores (a mask, a bias) joins it, as in the GEMM + softmax kernel
    head = ("pipeline f(q: bf16[B, M, D], k: bf16[B, N, D], v: bf16[N, E], bias: bf16[M, N], keep: bool[M, N]) "
            "-> o: bf16[B, M, E] {")
    plan, diags = plan_of("o = softmax(where(keep, q @ k.T * 0.1 + bias, -30000.0)) @ v", head=head)
    assert not diags and [k.kind for k in plan.kernels] == ["attention"]


HEAD_VT = "pipeline f(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, E, N]) -> o: f16[B, M, E] {"
HEAD_TWICE = "pipeline f(q: f16[M, D], k: f16[N, D], v: f16[N, N]) -> (o: f16[M, N], s: f16[M, N]) {"
# case -> (kernel block body, operand dtype, pipeline head (None: HEAD), the reason E401 gives)
REFUSED = {
    "named_probabilities": ("p = softmax(q @ k.T * 0.125)\n o = p @ v", "f16", None,
                            "the softmax is bound to a name"),
    "log_softmax": ("o = log_softmax(q @ k.T) @ v", "f16", None, "only as `softmax(...) @ v`"),
    "f32": ("o = softmax(q @ k.T) @ v", "f32", None, "16-bit operands on tensor cores"),
    "v_transposed": ("o = softmax(q @ k.T) @ v.T", "f16", HEAD_VT, "(no `.T`)"),
    "scores_kept": ("s = q @ k.T\n o = softmax(s) @ v", "f16", HEAD_TWICE, "`s` is read outside `softmax(...) @ v`"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_stays_two_kernels_says_why(case):
    body, dt, head, reason = REFUSED[case]
    plan, diags = plan_of(f"kernel one {{ {body} }}", dt=dt, head=head)
    (d,) = diags
    assert d.code == "E401" and reason in d.message, d.message
    assert "attention" not in [k.kind for k in plan.kernels]


def test_deep_heads_and_extra_batch_axes_are_not_fused():
    head = "pipeline f(q: f16[M, 320], k: f16[N, 320], v: f16[N, E]) -> o: f16[M, E] {"
    plan, diags = plan_of("kernel one { o = softmax(q @ k.T) @ v }", head=head)
    assert "head dimensions up to 256, not 320" in diags[0].message
    head = "pipeline f(q: f16[M, D], k: f16[N, D], v: f16[B, N, E]) -> o: f16[B, M, E] {"
    plan, diags = plan_of("kernel one { o = softmax(q @ k.T) @ v }", head=head)
    assert "adds batch axes" in diags[0].message


def test_launch_settings():
    plan, diags = plan_of("kernel a { o = softmax(q @ k.T) @ v }", overrides={"a": {"block": 256}})
    assert not diags and plan.kernel("a").config.block == 256
    (k,) = render_cuda(plan, {"B": 2, "M": 300, "N": 100, "D": 64, "E": 64}, "sm_90")
    assert k.block == (256, 1, 1) and k.grid == (2 * 3, 1, 1)  # 128 rows a block: 8 warps of 16
    _, diags = plan_of("kernel a { o = softmax(q @ k.T) @ v }", overrides={"a": {"block": 96}})
    assert diags[0].code == "E503" and "64, 128, 256 threads" in diags[0].message
    _, diags = plan_of("kernel a { o = softmax(q @ k.T) @ v }", overrides={"a": {"tile": {"m": 64}}})
    assert diags[0].code == "E503" and "`tile` does not apply to attention kernel `a`" in diags[0].message


def test_a_symbolic_head_bound_too_deep_is_e509_at_the_kernel():
    plan, diags = plan_of("kernel a { o = softmax(q @ k.T) @ v }")
    assert not diags
    with pytest.raises(UserError) as info:
        render_cuda(plan, {"B": 1, "M": 64, "N": 64, "D": 512, "E": 64}, "sm_90")
    (d,) = info.value.diagnostics
    assert d.code == "E509" and "head dimension of 512" in d.message and d.span is not None


def test_wide_values_run_in_chunks_of_128_columns():
    plan, _ = plan_of("o = softmax(q @ k.T) @ v")
    (k,) = render_cuda(plan, {"B": 2, "M": 64, "N": 64, "D": 64, "E": 300}, "sm_90")
    assert "wgmma" not in k.source  # Dv over 128: the mma.sync kernel, in chunks
    assert k.grid == (2 * 3 * 1, 1, 1) and "float o[1][16][4];" in k.source  # 3 chunks of 128 columns
    assert "if (d < 300)" in k.source


def test_hopper_takes_the_wgmma_kernel_where_the_operands_suit_it():
    plan, _ = plan_of("o = softmax(q @ k.T * 0.125) @ v")
    sizes = {"B": 2, "M": 256, "N": 256, "D": 64, "E": 64}
    (k90,) = render_cuda(plan, sizes, "sm_90")
    (k80,) = render_cuda(plan, sizes, "sm_80")
    # warp-specialised: a producer warpgroup loading by TMA and consumer warpgroups, here (8 blocks of 64 rows
    # in one wave) one a block
    assert "wgmma.mma_async" in k90.source and "-arch=sm_90a" in k90.options and k90.block == (256, 1, 1)
    assert "cp.async.bulk.tensor.3d" in k90.source and "setmaxnreg.inc.sync.aligned.u32 240" in k90.source
    assert "wgmma" not in k80.source and "mma.sync" in k80.source
    # the benchmark's size (256 blocks of 4 consumers in two waves) takes 4 on 64-key tiles; a head dimension of
    # 128, 2 on 128-key tiles (240 registers each)
    (big,) = render_cuda(plan, {**sizes, "B": 32, "M": 2048, "N": 2048}, "sm_90")
    assert big.block == (640, 1, 1) and "setmaxnreg.inc.sync.aligned.u32 112" in big.source
    # 256 blocks of rows on 132 multiprocessors: a persistent grid walks them; 8 (one wave) a block each
    assert big.grid == (132, 1, 1) and "it += gridDim.x" in big.source
    assert k90.grid == (8, 1, 1) and "gridDim.x" not in k90.source
    assert "m64n64k16" in big.source and "m64n128k16" not in big.source
    (deep,) = render_cuda(plan, {**sizes, "B": 16, "M": 2048, "N": 2048, "D": 128}, "sm_90")
    assert "m64n128k16" in deep.source and deep.block == (384, 1, 1)
    assert "setmaxnreg.inc.sync.aligned.u32 240" in deep.source
    # a K stored N-contiguous stays on mma.sync
    head = "pipeline f(q: f16[B, M, D], kt: f16[B, D, N], v: f16[B, N, E]) -> o: f16[B, M, E] {"
    plan, _ = plan_of("o = softmax(q @ kt) @ v", head=head)
    (k,) = render_cuda(plan, sizes, "sm_90")
    assert "wgmma" not in k.source and "cvl_ldsm_x4_trans(r, tk" in k.source
    # 64 threads a block (a spec's choice) is the mma.sync kernel's; 256 the wgmma kernel's without a producer
    plan, _ = plan_of("kernel a { o = softmax(q @ k.T) @ v }", overrides={"a": {"block": 64}})
    (k,) = render_cuda(plan, sizes, "sm_90")
    assert "wgmma" not in k.source and k.block == (64, 1, 1)
    plan, _ = plan_of("kernel a { o = softmax(q @ k.T) @ v }", overrides={"a": {"block": 256}})
    (k,) = render_cuda(plan, sizes, "sm_90")
    assert "wgmma.mma_async" in k.source and "setmaxnreg" not in k.source and k.block == (256, 1, 1)
    # launch bounds from the spec: setmaxnreg's counts assume one block of the kernel's own threads, so the
    # kernel without a producer takes them
    plan, _ = plan_of("kernel a { o = softmax(q @ k.T) @ v }", overrides={"a": {"launch_bounds": {"max_threads": 256, "min_blocks": 2}}})
    (k,) = render_cuda(plan, sizes, "sm_90")
    assert "wgmma.mma_async" in k.source and "setmaxnreg" not in k.source and "__launch_bounds__(256, 2)" in k.source


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_benchmark_kernel_resources(arch, tmp_path, monkeypatch):
    """The benchmark's kernel: no spills within its launch bounds' registers. A warp's work per 64-key
    tile: on sm_80 mma.sync, 4 x 8 for the scores and 4 x 8 for the product, one exp an element plus two a
    row; on sm_90 the warp-specialised kernel's 64-key tiles, 4 m64n64k16 for the scores and 4 for the
    product, written out for the first tile, the loop unrolled by its two K and V slots ("unroll": two copies of the
    body), the tile left after the last whole round and the last tile's product (32), 32 exps a thread and tile plus
    two a row, and setmaxnreg moving registers to the consumers."""
    from cuvil_dsl.compile import CompileUnit, SassUnavailable, compile_units, count_instructions, disassemble

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    case = load_case(BENCH)
    (k,) = render_cuda(case.plan(arch), case.binding.sizes, arch)
    assert "(attention)" in k.source.splitlines()[0]
    (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], arch)
    r = unit.resources[k.entry]
    threads, per_sm = map(int, re.search(r"__launch_bounds__\((\d+), (\d+)\)", k.source).groups())
    assert r.spill_bytes == 0 and r.stack_bytes == 0 and r.registers <= 65536 // (threads * per_sm), r
    assert arch == "sm_80" or threads == 640  # 4 consumer warpgroups and the producer
    assert per_sm * k.shared_bytes <= 227 * 1024
    try:
        sass = disassemble(unit.cubin)
    except SassUnavailable as exc:
        pytest.skip(str(exc))
    if arch == "sm_80":
        assert count_instructions(sass, "HMMA") == 64
        assert count_instructions(sass, r"LDSM\.16\.MT88\.4") == 16  # V's fragments, transposed
        assert 34 <= count_instructions(sass, r"MUFU\.EX2") <= 40
    else:
        assert count_instructions(sass, "HGMMA") == 4 + 2 * 8 + 8 + 4
        assert 4 * 32 <= count_instructions(sass, r"MUFU\.EX2") <= 4 * 32 + 8  # the first tile rescales nothing
        assert count_instructions(sass, r"USETMAXREG\.DEALLOC") == 1 and count_instructions(sass, r"USETMAXREG\.TRY_ALLOC") == 1
        assert count_instructions(sass, "UTMALDG") == 3  # Q, K and V: one box each (D 64)


def test_warp_specialised_consumers_get_the_registers_setmaxnreg_gives(tmp_path, monkeypatch):
    """Head dimension 128 on sm_90: S (64 x 128), O (64 x 128) and P live at once in each consumer thread, more
    than the 168 registers a thread of 384 has at entry. setmaxnreg gives the consumers 240, and ptxas uses
    them: no spills and no serialised wgmma. (An inlined ``__trap()`` in the barrier wait capped every thread
    at the entry count; the trap now sits in a function of its own.)"""
    from cuvil_dsl.compile import CompileUnit, SassUnavailable, compile_units, disassemble

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    case = load_case(ROOT / "benchmarks" / "shapes" / "attention_full_f16-d128.yaml")
    (k,) = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
    assert k.block == (384, 1, 1) and "setmaxnreg.inc.sync.aligned.u32 240" in k.source
    (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], "sm_90")
    r = unit.resources[k.entry]
    assert r.spill_bytes == 0 and r.stack_bytes == 0, r
    assert "serializ" not in unit.log.lower(), unit.log
    try:
        sass = disassemble(unit.cubin)
    except SassUnavailable as exc:
        pytest.skip(str(exc))
    used = max(int(x) for x in re.findall(r"\bR(\d+)\b", sass))
    assert used >= 168, used  # registers past the entry count: the consumers' share


def test_barrier_protocol_model_runs_the_skipped_tiles(monkeypatch):
    """The masked program's skipping loop (off by default; "skip" asks for it): the model draws the votes, so a skipped tile's path runs; leaving its
    V slot unreleased deadlocks the producer, which the model reports."""
    from ws_protocol import simulate

    from cuvil_dsl.codegen import cuda_attention

    path = ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml"
    sizes = {"N": 500}  # 8 key tiles: the votes (the first at the end of tile 0, on tile 3) reach tiles 3 to 7
    k = _ws_kernel(monkeypatch, path, {"persistent": 2, "skip": True}, sizes)
    assert k.masked is not None and "cvl_wg_all" in "\n".join(k.consumer())
    assert simulate(k, 0) > 0
    release = cuda_attention._WsAttention.release
    monkeypatch.setattr(cuda_attention._WsAttention, "release",
                        lambda self, which, tile: "" if (which, tile) == ("v", "t") else release(self, which, tile))
    with pytest.raises(AssertionError, match="deadlock"):
        for seed in range(8):
            simulate(k, seed)


def test_barrier_protocol_model_checks_the_unloaded_tiles(monkeypatch):
    """With "skip" the producer leaves a key tile unloaded when every consumer warpgroup voted it out (it reads the
    votes once the slot's tile before is released). The model fails a producer that skips on one warpgroup's vote
    (another warpgroup reads a slot never filled with its tile), and a vote never published."""
    from ws_protocol import simulate

    from cuvil_dsl.codegen import cuda_attention

    path = ROOT / "benchmarks" / "shapes" / "attention_full_f16-causal.yaml"
    tuning, sizes = {"skip": True, "persistent": 2, "groups": 2}, {"B": 1, "M": 512, "N": 1024}
    k = _ws_kernel(monkeypatch, path, tuning, sizes)
    producer = "\n".join(k.producer())
    assert "cvl_all_voted(cvl_votes" in producer and "if (cvl_gone) {" in producer
    for seed in range(4):
        assert simulate(k, seed) > 0
    producer_lines = cuda_attention._WsAttention.producer
    monkeypatch.setattr(cuda_attention._WsAttention, "producer", lambda self: [
        ln.replace(f", {self.groups});", ", 1);") if "cvl_all_voted(" in ln else ln for ln in producer_lines(self)])
    with pytest.raises(AssertionError, match="read from slot"):
        for seed in range(8):
            simulate(k, seed)
    monkeypatch.setattr(cuda_attention._WsAttention, "producer", producer_lines)
    vote = cuda_attention._WsAttention.skip_vote
    monkeypatch.setattr(cuda_attention._WsAttention, "skip_vote",
                        lambda self, tile: [ln for ln in vote(self, tile) if "cvl_votes[" not in ln])
    with pytest.raises(AssertionError, match="not yet written"):
        simulate(k, 0)


CAUSAL = ROOT / "benchmarks" / "shapes" / "attention_full_f16-causal.yaml"


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_barrier_protocol_model_runs_the_listed_tiles(groups, monkeypatch):
    """"skip": "list": the producer loads the block's listed key tiles, waits for the consumers' verdict and, if some
    skip was inexact, every tile again; the consumers run the listed tiles, publish the verdict and run every tile
    again, their uses of the slots counted on from the first pass's. The model draws the list (perhaps empty) and the
    verdict, and each consumer warpgroup runs as its four warps."""
    from ws_protocol import simulate

    k = _ws_kernel(monkeypatch, CAUSAL, {"skip": "list", "groups": groups}, {"B": 1, "M": 512, "N": 700})
    assert k.listed and not k.persistent and k.groups == groups
    for seed in range(MODEL_SEEDS):
        assert simulate(k, seed) > 0


@pytest.mark.parametrize("fault, message", [
    ("no verdict wait", "verdict read before"),
    ("last V kept", "deadlock"),
    ("second pass counted from 0", "deadlock|read from slot"),
    ("trimmed tiles kept", "deadlock"),
])
def test_barrier_protocol_model_checks_the_listed_passes(fault, message, monkeypatch):
    """The model fails a producer that reads the verdict without waiting for it, a first pass that keeps its last V
    slot (the second pass's producer waits for it for ever), a second pass whose uses of the slots count from 0
    (its barriers' phases are not where the first pass left them) and, with "trim", a warpgroup that keeps the slots
    of the listed tiles after its own last."""
    from ws_protocol import simulate

    from cuvil_dsl.codegen import cuda_attention

    cls = cuda_attention._WsAttention
    if fault == "no verdict wait":
        producer = cls.producer
        monkeypatch.setattr(cls, "producer", lambda self: [ln for ln in producer(self) if "the consumers' verdict" not in ln])
    elif fault == "last V kept":
        overlapped = cls.overlapped_pass
        monkeypatch.setattr(cls, "overlapped_pass", lambda self, listed=False: [
            ln for ln in overlapped(self, listed) if not (listed and ln == self.release("v", "cvl_own - 1"))])
    elif fault == "trimmed tiles kept":  # (skip_slot: with "list", the trimmed tiles' alone)
        monkeypatch.setattr(cls, "skip_slot", lambda self, which, tile: [
            f"if (threadIdx.x % 128 == 0) {self.wait_full(which, tile)}"])
    else:
        listed_loop = cls.listed_loop

        def from_zero(self):
            lines = listed_loop(self)
            i = next(i for i, ln in enumerate(lines) if ln.startswith("if (cvl_again) {"))
            return lines[:i] + [ln.replace("cvl_cnt + ", "") for ln in lines[i:]]

        monkeypatch.setattr(cls, "listed_loop", from_zero)
    k = _ws_kernel(monkeypatch, CAUSAL, {"skip": "list", "groups": 4}, {"B": 1, "M": 512, "N": 700})
    with pytest.raises(AssertionError, match=message):
        for seed in range(4 * MODEL_SEEDS):
            simulate(k, seed)


def test_listed_bare_tiles_fold_the_scale_where_keys_fill_their_tiles(monkeypatch):
    """With the list, a "bare" tile (every element passes the mask) of ``where(c, GEMM * u, f)`` skips its pass over
    the elements where ``u`` is not negative: its maximum over the raw accumulators scaled once, its exponent
    ``acc * (u log2 e) - base`` (the factors chosen per tile at run time; a tile with the where keeps 1 and log2 e).
    Only where no key is past N (keys past it must read -inf, which the pass writes), and not with "fold" off. The
    list takes three K and V slots unless asked otherwise; the unmasked kernel keeps two."""
    k = _ws_kernel(monkeypatch, CAUSAL, {}, {"B": 2, "M": 333, "N": 768})
    source = "\n".join(k.render("f").lines)
    assert k.listed and k.bare_fold == "u0" and k.stages == 3
    assert "const bool cvl_fold = cvl_bare && !fold_flip;" in source and "fmaf(s[mi][ni][e], cvl_fc, -base[r])" in source
    assert "top[r] *= cvl_fs;" in source and "const float fold_c = u0 * " in source
    k = _ws_kernel(monkeypatch, CAUSAL, {}, {"B": 2, "M": 333, "N": 700})  # a ragged last tile
    assert k.listed and k.bare_fold is None and "cvl_fold" not in "\n".join(k.render("f").lines)
    k = _ws_kernel(monkeypatch, CAUSAL, {"fold": False, "stages": 2}, {"B": 2, "M": 333, "N": 768})
    assert k.listed and k.bare_fold is None and k.stages == 2
    assert _ws_kernel(monkeypatch, BENCH).stages == 2


def test_listed_tiles_take_a_separable_mask_on_a_grid_of_blocks_of_rows(tmp_path, monkeypatch):
    """"skip": "list" (the default) lists the key tiles before the loop where the mask compares a key's value with a
    row's, or is a conjunction of such comparisons (the list needs the rows' extremes), and each block has one block
    of rows; elsewhere (a bool mask, a disjunction, a persistent grid) the plain loop runs every tile (the vote does
    not pay). Its source: the list in shared memory, one barrier of the consumers' verdict, no votes."""
    k = _ws_kernel(monkeypatch, CAUSAL, {}, {"B": 2, "M": 333, "N": 700})
    source = "\n".join(k.render("f").lines)
    assert k.listed and "cvl_tiles[" in source and "cvl_consumers_any(" in source and "cvl_votes" not in source
    assert "cvl_chunks[22]" in source  # a byte for every 32 of the 700 keys
    k = _ws_kernel(monkeypatch, CAUSAL, {"skip": "list", "persistent": 2}, {"B": 2, "M": 333, "N": 700})
    assert not k.listed and k.masked is None and "cvl_votes" not in "\n".join(k.render("f").lines)
    (tmp_path / "m.cuvil").write_text(
        "pipeline m(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], mask: bool[M, N]) -> o: f16[B, M, D] {\n"
        "    o = softmax(where(mask, (q @ k.T) * 0.125, -30000.0)) @ v\n}\n")
    (tmp_path / "m.yaml").write_text("pipeline: m.cuvil\nshapes: {B: 2, M: 333, N: 700, D: 64}\n")
    k = _ws_kernel(monkeypatch, tmp_path / "m.yaml", {"skip": "list"})
    assert not k.listed and k.masked is None
    for cond, listed in (("(kpos <= qpos) & (kpos > qpos - 256)", True), ("(kpos <= qpos) | (kpos > qpos - 256)", False)):
        (tmp_path / "w.cuvil").write_text(
            "pipeline w(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], qpos: i32[M, 1], kpos: i32[1, N]) -> "
            f"o: f16[B, M, D] {{\n    o = softmax(where({cond}, (q @ k.T) * 0.125, -30000.0)) @ v\n}}\n")
        (tmp_path / "w.yaml").write_text("pipeline: w.cuvil\nshapes: {B: 2, M: 333, N: 700, D: 64}\n")
        k = _ws_kernel(monkeypatch, tmp_path / "w.yaml", {"skip": "list"})
        assert k.listed is listed and (k.listed_terms is not None) is listed, cond  # a sliding window: two terms
        assert listed is False or [t[0] for t in k.listed_terms] == ["le", "gt"]
    with pytest.raises(ValueError, match="skip 'all'"):
        _ws_kernel(monkeypatch, CAUSAL, {"skip": "all"})


def _decoded(k, index: int) -> tuple[int, int]:
    """(mt, bz) of grid index ``index``, by evaluating the kernel's rendered decode lines (C integer arithmetic on
    non-negative values, so ``/`` is Python's ``//``)."""
    env: dict[str, int] = {}
    for line in k.decode(str(index)):
        m = re.match(r"const int (\w+) = (.+);$", line)
        if m:
            env[m.group(1)] = eval(m.group(2).replace("/", "//"), {}, dict(env))
    return env["mt"], env["bz"]


def test_skip_starts_the_longest_blocks_of_rows_first(monkeypatch):
    """With "skip" the grid is one block a block of rows (not persistent), the last block of rows of every batch
    first: under a causal mask those see the most keys, so the GPU's block scheduler, giving each multiprocessor the
    next block as its last ends, runs a longest-first list schedule. Every (block of rows, batch) is in the grid
    once, and in the causal benchmark's shape the busiest multiprocessor's key tiles come within 5% of the mean,
    where the ascending order leaves it 1.3x the mean (2 consumers: 16 blocks of rows a batch, 512 on 132
    multiprocessors)."""
    import heapq

    path = ROOT / "benchmarks" / "shapes" / "attention_full_f16-causal.yaml"
    spans = {}
    for order in ("descending", "ascending"):
        k = _ws_kernel(monkeypatch, path, {"skip": True, "groups": 2, **({"order": order} if order == "ascending" else {})},
                       {"B": 32, "M": 2048, "N": 2048})
        assert k.order == order and not k.persistent and (k.items, k.mt) == (512, 16)
        grid = [_decoded(k, i) for i in range(k.items)]
        assert sorted(grid) == sorted((mt, bz) for mt in range(k.mt) for bz in range(k.batch))
        ends = [0] * 132
        for mt, _ in grid:  # each block to the multiprocessor that frees first; a block of rows mt needs mt + 1 tiles
            heapq.heappush(ends, heapq.heappop(ends) + mt + 1)
        spans[order] = max(ends) / (sum(ends) / len(ends))
    assert spans["descending"] < 1.05 < 1.25 < spans["ascending"], spans
    k = _ws_kernel(monkeypatch, path, {"groups": 2, "skip": False}, {"B": 32, "M": 2048, "N": 2048})
    assert (k.order, k.persistent) == ("ascending", True)  # without "skip" the blocks are equal: as before


ELEMENT_TEST = "const int n_ = n0 + ni * 8 + lane % 4 * 2 + q;"  # the mask check's element by element loop


@pytest.mark.parametrize("cond, want", [
    ("kpos <= qpos", "max(cvl_rows"),
    ("qpos >= kpos", "max(cvl_rows"),  # written the other way round: the key's side first, the operator swapped
    ("kpos > qpos", "min(cvl_rows"),
    ("fk < fq", "fmaxf(cvl_rows"),  # f32 positions
    ("fk >= fq", "fminf(cvl_rows"),
    ("kpos > qpos - 64", "min(cvl_rows"),  # the row side computed (a window's far edge), in the kernel too
    ("kpos <= qpos + kpos", None),  # the "row" side reads the key too
    ("kpos == qpos", None),  # no order to take an extreme by
    ("mask", None),  # a bool [M, N] input: each element tested
])
def test_skip_tests_a_mask_of_positions_by_the_rows_extreme(cond, want, tmp_path, monkeypatch):
    """With "skip", a mask that compares a key's value with a row's (``kpos <= qpos``) is tested a tile at a time by
    each key against its warp's extreme row value (for ``<=`` the largest), a load a key and lane, instead of element
    by element; other masks keep the element test. Both give the vote the same answer: some element of the tile is
    unmasked (the GPU test of the skip checks the bits)."""
    (tmp_path / "m.cuvil").write_text(
        "pipeline m(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], qpos: i32[M, 1], kpos: i32[1, N],\n"
        "           fq: f32[M, 1], fk: f32[1, N], mask: bool[M, N]) -> o: f16[B, M, D] {\n"
        f"    o = softmax(where({cond}, (q @ k.T) * 0.125, -30000.0)) @ v\n}}\n")
    (tmp_path / "m.yaml").write_text("pipeline: m.cuvil\nshapes: {B: 2, M: 333, N: 700, D: 64}\n")
    k = _ws_kernel(monkeypatch, tmp_path / "m.yaml", {"skip": True})
    assert k.masked is not None
    sep = k.separable_mask
    source = "\n".join(k.consumer())
    if want is None:
        assert sep is None and "cvl_rows" not in source and ELEMENT_TEST in source
        return
    key_side = {b for b, _ in k.k.leaves([sep[1]])}
    assert len(key_side) == 1 and "cvl_rows" in source and want in source, (key_side, want)
    assert "__shfl_xor_sync(0xffffffffu, cvl_rows, o)" in source and ELEMENT_TEST not in source


def test_the_rows_extreme_decides_as_every_element_would():
    """The separable test's rule (SEPARABLE: for < and <= the rows' largest value, for > and >= their smallest, NaN
    left out as fmaxf and fminf leave it): "some key passes against the extreme" is "some (row, key) passes", on
    random integer and float positions with NaNs."""
    import numpy as np

    from cuvil_dsl.codegen.cuda_attention import _WsAttention

    rng = np.random.default_rng(7)
    compare = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
    for trial in range(400):
        keys = rng.integers(-20, 20, size=rng.integers(1, 9)).astype(np.float64)
        rows = rng.integers(-20, 20, size=rng.integers(1, 9)).astype(np.float64)
        if trial % 2:
            keys[rng.random(keys.size) < 0.2] = np.nan
            rows[rng.random(rows.size) < 0.2] = np.nan
        for op, f in compare.items():
            pick = _WsAttention.SEPARABLE[op][0]
            extreme = (np.fmax if pick == "max" else np.fmin).reduce(rows)  # NaN only when every row is NaN
            assert bool(f(keys, extreme).any()) == bool(f(keys[:, None], rows[None, :]).any()), (op, keys, rows)
            swapped = _WsAttention.SEPARABLE[op][1]  # `rows op keys`, element for element, is `keys swapped rows`
            assert np.array_equal(compare[swapped](keys[:, None], rows[None, :]), f(rows[:, None], keys[None, :]).T)


MODEL_SEEDS = 6  # interleavings a case of test_barrier_protocol_model_runs_each_warp


def test_barrier_protocol_model_runs_each_warp(monkeypatch):
    """The model runs a consumer warpgroup as its four warps, which meet only at a wgmma or a vote, so it finds the
    hang the GPU found with 4 consumers (sessions 24-27): a skipped tile's slots waited for by every warp and released
    by warp 0 at once, which lets the producer refill a slot before a lagging warp has waited for its first fill;
    that warp's parity then aliases and it waits for ever. The skipping loop leaves such a tile's waits to the
    releasing thread (`skip_slot`); as one actor a warpgroup cannot show the difference."""
    from ws_protocol import simulate

    from cuvil_dsl.codegen import cuda_attention

    path = ROOT / "benchmarks" / "shapes" / "attention_full_f16-causal.yaml"  # 4 consumers
    tuning, sizes = {"skip": True, "persistent": 2, "groups": 4}, {"B": 1, "M": 1024, "N": 1024}
    k = _ws_kernel(monkeypatch, path, tuning, sizes)
    assert k.groups == 4
    for seed in range(MODEL_SEEDS):
        assert simulate(k, seed) > 0
    monkeypatch.setattr(cuda_attention._WsAttention, "skip_slot",
                        lambda self, which, tile: [self.wait_full(which, tile), self.release(which, tile)])
    k = _ws_kernel(monkeypatch, path, tuning, sizes)
    for seed in range(MODEL_SEEDS):
        assert simulate(k, seed, warps=1) > 0
    hung = 0
    for seed in range(MODEL_SEEDS):
        try:
            simulate(k, seed)
        except AssertionError as exc:
            assert "deadlock" in str(exc)
            hung += 1
    assert hung


def test_one_consumer_takes_its_row_maxima_in_four_chains(monkeypatch):
    """ATTENTION_TUNING "chains": a lone consumer warpgroup (the example's small grid) takes each row's tile maximum
    in 4 independent FMNMX chains over every fourth column group, combined after (the same bits: fmaxf is
    associative), and its sums in one; with 2 or 4 consumers (the benchmarks) one chain each, as before. An asked
    split applies to any kernel, sums too."""
    from cuvil_dsl.codegen import cuda_attention

    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", {})
    example = load_case(ROOT / "specs" / "attention.yaml")
    flash = next(k for k in render_cuda(example.plan("sm_90"), example.binding.sizes, "sm_90") if "setmaxnreg" in k.source)
    assert flash.block == (256, 1, 1)  # one consumer
    assert "part[mi * 2 + e / 2][ni % 4] = fmaxf(part[mi * 2 + e / 2][ni % 4], s[mi][ni][e]);" in flash.source
    assert "for (int c = 1; c < 4; ++c) top[r] = fmaxf(top[r], part[r][c]);" in flash.source
    assert "row_sum[r] += s[mi][ni][e];" in flash.source and "sums[" not in flash.source
    case = load_case(BENCH)
    (k,) = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
    assert k.block == (640, 1, 1) and "part[" not in k.source  # four consumers: one chain
    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", {"chains": (2, 4)})
    (k,) = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
    assert "part[mi * 2 + e / 2][ni % 2]" in k.source and "sums[r][ni % 4] += s[mi][ni][e];" in k.source


def test_warp_specialised_tunings_compile_within_their_resources(tmp_path, monkeypatch):
    """The warp-specialised kernel's switches (benchmarks/ab_attention_full.py times them; the GPU tests run
    them): each compiles for sm_90a without spills; 176-key tiles leave a ragged last tile (2048 keys)."""
    from cuvil_dsl.codegen import cuda_attention
    from cuvil_dsl.compile import CompileUnit, compile_units

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    case = load_case(BENCH)
    for tuning in ({"pingpong": True, "groups": 2}, {"overlap": False}, {"bn": 176, "groups": 2}, {"stages": 1},
                   {"chains": (4, 4)}, {"chains": (4, 4), "groups": 2},
                   {"groups": 1}, {"groups": 3}, {"persistent": True}, {"persistent": True, "overlap": False}):
        monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", dict(tuning))
        (k,) = render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
        assert "setmaxnreg" in k.source, tuning
        (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], "sm_90")
        r = unit.resources[k.entry]
        assert r.spill_bytes == 0 and r.stack_bytes == 0, (tuning, r)
        if tuning.get("persistent"):  # one block a multiprocessor walking the 256 blocks of rows
            assert k.grid == (132, 1, 1) and "it += gridDim.x" in k.source, tuning
    # a wgmma's accumulators past the registers a thread of 5 warpgroups has: E509, not a ptxas failure
    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", {"groups": 4, "bn": 176})
    with pytest.raises(UserError, match="E509.*more registers"):
        render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90")
    # more slots than shared memory holds: E509, not a kernel that fails to launch
    deep = load_case(ROOT / "benchmarks" / "shapes" / "attention_full_f16-d128.yaml")
    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", {"stages": 3, "bn": 176})
    with pytest.raises(UserError, match="E509"):
        render_cuda(deep.plan("sm_90"), deep.binding.sizes, "sm_90")


@pytest.mark.parametrize("cond, tuning, n", [
    ("kpos <= qpos", {}, 2047),  # 4 consumers, "bare" and "trim"
    ("kpos <= qpos", {}, 2048),  # the causal benchmark's shape: bare tiles folded, in rounds
    ("kpos <= qpos", {"unroll": False}, 2048),  # ... with the list's loop rolled (session 32's kernel)
    ("kpos <= qpos", {"groups": 2, "unroll": True}, 2048),
    ("kpos <= qpos", {"groups": 2}, 2047),
    ("kpos <= qpos", {"groups": 1}, 2047),
    ("kpos <= qpos", {"bare": False, "trim": False}, 2047),
    ("(kpos <= qpos) & (kpos > qpos - 256)", {}, 2047),  # a sliding window: two terms
    ("(kpos <= qpos) & (kpos > qpos - 1024)", {"unroll": True}, 2048),  # a wide one: rounds between its edges
    ("fk > fq", {"groups": 2}, 2047),  # f32 positions (a NaN row fails "bare")
])
def test_listed_kernels_compile_within_their_resources(cond, tuning, n, tmp_path, monkeypatch):
    """Masked attention with its key tiles listed ("skip": "list", the default) compiles for sm_90a with no wgmma
    serialised (ptxas warns when a branch it cannot prove uniform holds one: the list's count is a shuffle of lane
    0's for that), and with two named barriers (the block's, and the consumers' verdict). Spills: none with up to 3
    consumers, nor with 4 at the causal benchmark's shape (also with bare tiles in rounds); with 4 on a ragged one, at
    setmaxnreg's share, the plain kernel spills 96 bytes and the list up to 222 here (a ragged sliding window with
    the list's three K and V slots: 184 with two), a bound this keeps."""
    from cuvil_dsl.codegen import cuda_attention
    from cuvil_dsl.compile import CompileUnit, compile_units

    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "m.cuvil").write_text(
        "pipeline m(q: f16[B, M, D], k: f16[B, N, D], v: f16[B, N, D], qpos: i32[M, 1], kpos: i32[1, N],\n"
        "           fq: f32[M, 1], fk: f32[1, N]) -> o: f16[B, M, D] {\n"
        f"    o = softmax(where({cond}, (q @ k.T) * 0.125, -30000.0)) @ v\n}}\n")
    m = 2048 if n == 2048 else 2000  # (the benchmark's shape; a ragged M spills with 4 consumers, rounds or not)
    (tmp_path / "m.yaml").write_text(f"pipeline: m.cuvil\nshapes: {{B: 32, M: {m}, N: {n}, D: 64}}\n")
    seen = _ws_kernel(monkeypatch, tmp_path / "m.yaml", tuning)
    assert seen.listed and seen.bare is tuning.get("bare", True) and seen.trim is (seen.groups > 1 and tuning.get("trim", True))
    assert seen.bare_rounds is (n % 64 == 0 and seen.bare and tuning.get("unroll", "auto") is not False)
    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", dict(tuning))
    case = load_case(tmp_path / "m.yaml")
    (k,) = [k for k in render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90") if "cvl_tiles" in k.source]
    (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], "sm_90")
    r = unit.resources[k.entry]
    assert "serializ" not in unit.log.lower(), unit.log
    assert r.spill_bytes <= (256 if seen.groups == 4 and not seen.bare_rounds else 0), (tuning, r)
    assert "used 2 barriers" in unit.log, unit.log


@pytest.mark.parametrize("sizes, groups", [
    ({"B": 32, "M": 2048, "D": 64}, 4),  # 256 blocks: 2 waves of the most rows a block
    ({"B": 4, "M": 256, "D": 64}, 1),  # everything fits one wave: the smallest blocks are the fastest
    ({"B": 16, "M": 2048, "D": 128}, 2),  # 3 and 4 consumers have too few registers for 128 columns
    ({"B": 8, "M": 2048, "D": 64}, 2),  # one wave of 128 blocks of 2 beats two of 256 blocks of 1
])
def test_warp_specialised_consumers_by_waves(sizes, groups):
    """cuda_attention.WS_BLOCK_US: the consumer warpgroups a block that give the fewest waves times a block's
    measured time on the target's multiprocessors (132 on sm_90)."""
    plan, _ = plan_of("o = softmax(q @ k.T * 0.125) @ v")
    (k,) = render_cuda(plan, {"N": sizes["M"], "E": sizes["D"], **sizes}, "sm_90")
    assert k.block == (128 * (groups + 1), 1, 1)


def _ws_kernel(monkeypatch, path, tuning: dict | None = None, sizes: dict | None = None):
    """The _WsAttention instance that renders ``path``'s attention kernel on sm_90 (with ``tuning``)."""
    from cuvil_dsl.codegen import cuda_attention

    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", dict(tuning or {}))
    seen = []
    original = cuda_attention._WsAttention.render

    def spy(self, entry):
        seen.append(self)
        return original(self, entry)

    monkeypatch.setattr(cuda_attention._WsAttention, "render", spy)
    case = load_case(path)
    render_cuda(case.plan("sm_90"), {**case.binding.sizes, **(sizes or {})}, "sm_90")
    assert seen, "the warp-specialised kernel was not taken"
    return seen[-1]


PROTOCOL_CASES = [
    ("benchmark", BENCH, {}, None),  # 4 consumers, 32 tiles, a persistent grid (blocks of 2 work items and of 1)
    ("d128", ROOT / "benchmarks" / "shapes" / "attention_full_f16-d128.yaml", {}, None),
    ("ragged", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml", {"persistent": 2}, None),
    ("ragged, 3 slots", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": 3, "stages": 3, "groups": 2, "bn": 64}, None),
    ("one slot", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml", {"persistent": 2, "stages": 1}, None),
    ("no overlap", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml", {"persistent": 2, "overlap": False}, None),
    ("ping-pong", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": 2, "pingpong": True, "groups": 2}, None),
    ("one tile", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml", {"persistent": 2}, {"N": 40}),
    ("not persistent", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml", {"persistent": False, "groups": 3}, None),
    # the skipping loop ("skip", a masked program's tiles left out on a vote the model draws at random; the votes
    # reach tiles past the number of slots, so N spans 8 to 16 key tiles here)
    ("skip", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml", {"persistent": 2, "skip": True}, {"N": 1000}),
    ("skip, 3 slots", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": 3, "stages": 3, "groups": 2, "bn": 64, "skip": True}, {"N": 1000}),
    ("skip, one slot", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": 2, "stages": 1, "skip": True}, {"N": 1000}),
    ("skip, not persistent", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": False, "groups": 3, "skip": True}, {"N": 1000}),
    ("skip, 4 consumers", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": 3, "groups": 4, "skip": True}, {"M": 700, "N": 1000}),
    ("skip, causal benchmark", ROOT / "benchmarks" / "shapes" / "attention_full_f16-causal.yaml", {"skip": True}, None),
    # "unroll" (the benchmark and d128 above, persistent, 2 slots): rounds of 3 tiles, with and without a tile left
    # after them, on a grid of one block an item and on a persistent one (each item from slot 0, phase 0)
    ("rounds of 3", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": False, "stages": 3, "groups": 2, "bn": 64, "skip": False, "unroll": True}, {"N": 7 * 64}),
    ("rounds of 3 and a tile", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": False, "stages": 3, "groups": 2, "bn": 64, "skip": False, "unroll": True}, {"N": 8 * 64 - 5}),
    ("rounds of 3, persistent", ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml",
     {"persistent": 2, "stages": 3, "groups": 2, "bn": 64, "skip": False, "unroll": True}, {"N": 12 * 64}),
]


@pytest.mark.parametrize("label, path, tuning, sizes", PROTOCOL_CASES, ids=[c[0] for c in PROTOCOL_CASES])
def test_warp_specialised_barrier_protocol(label, path, tuning, sizes, monkeypatch):
    """The warp-specialised kernel's generated producer and consumer lines, run by a model of the GPU's
    barriers in random interleavings (tests/codegen/ws_protocol.py): no deadlock, every product reads the
    tile it should, no copy overwrites a tile still being read. The GPU tests run the same kernels; this
    finds a protocol mistake without one (both of session 22's persistent-walk bugs were of this kind)."""
    from ws_protocol import simulate

    k = _ws_kernel(monkeypatch, path, tuning, sizes)
    grid = min(k.items, k.blocks) if k.persistent else k.items
    for seed in range(3):
        for block in sorted({0, grid - 1}):
            assert simulate(k, seed, block) > 0


def test_unroll_takes_the_loops_whose_copies_fit(tmp_path, monkeypatch):
    """ATTENTION_TUNING "unroll", "auto" by default: the benchmark's loop (its scale folds into the exponent: no pass
    over the scores' elements) runs in rounds; a masked loop ("skip" off: a where over every element) stays rolled,
    since its copies spill at 4 consumers, unless asked (True); the list's loop never unrolls. The masked kernel
    compiles without spills."""
    from cuvil_dsl.codegen import cuda_attention
    from cuvil_dsl.compile import CompileUnit, compile_units

    causal = ROOT / "benchmarks" / "shapes" / "attention_full_f16-causal.yaml"
    bench = _ws_kernel(monkeypatch, BENCH)
    assert bench.unroll and "cvl_ph" in "\n".join(bench.consumer())
    masked = _ws_kernel(monkeypatch, causal, {"skip": False})
    assert masked.fold is None and not masked.unroll and "cvl_ph" not in "\n".join(masked.consumer())
    assert _ws_kernel(monkeypatch, causal, {"skip": False, "unroll": True}).unroll
    assert not _ws_kernel(monkeypatch, causal, {"unroll": True}).unroll  # the list
    with pytest.raises(ValueError, match="unroll"):
        _ws_kernel(monkeypatch, causal, {"unroll": "always"})
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda_attention, "ATTENTION_TUNING", {"skip": False})
    case = load_case(causal)
    (k,) = [k for k in render_cuda(case.plan("sm_90"), case.binding.sizes, "sm_90") if "wgmma" in k.source]
    (unit,) = compile_units([CompileUnit(k.entry, k.source, (k.entry,), k.options)], "sm_90")
    assert unit.resources[k.entry].spill_bytes == 0, unit.resources[k.entry]


@pytest.mark.parametrize("fault", ["phase", "slot"])
def test_barrier_protocol_model_checks_the_unrolled_rounds(fault, monkeypatch):
    """"unroll": the model runs the rounds' constant slots and phase, and fails when the last copy of a round waits
    for its K slot in the round's phase instead of the next (a wait that passes on the slot's last phase: the tile
    before's K), or when a copy reads its K from the slot the tile before used."""
    from ws_protocol import simulate

    path = ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml"
    tuning = {"persistent": 2, "stages": 3, "groups": 2, "bn": 64, "skip": False, "unroll": True}
    k = _ws_kernel(monkeypatch, path, tuning, {"N": 12 * 64})
    assert k.unroll and k.base is None and "cvl_ph ^ 1" in "\n".join(k.consumer())
    assert simulate(k, 0) > 0
    _break_round_copy(monkeypatch, fault)
    with pytest.raises(AssertionError, match="read from slot|deadlock"):
        for seed in range(3):
            simulate(k, seed)


def _break_round_copy(monkeypatch, fault: str) -> None:
    """Every round (:meth:`_WsAttention.round`) rendered with its last copy (of 3) waiting in the round's phase instead
    of the next (``fault`` "phase"), or reading the slot of the copy before ("slot")."""
    from cuvil_dsl.codegen import cuda_attention

    step_round = cuda_attention._WsAttention.round

    def faulty(self, step, bare=False):
        def broken(t, bare=False):
            if t == "t + 2":
                slot, phase = self.fixed[t]
                self.fixed[t] = (slot, "cvl_ph") if fault == "phase" else ("1", phase)
            return step(t, bare)
        return step_round(self, broken, bare)

    monkeypatch.setattr(cuda_attention._WsAttention, "round", faulty)


@pytest.mark.parametrize("fault", [None, "phase", "slot"])
@pytest.mark.parametrize("groups", [1, 4])
def test_barrier_protocol_model_checks_the_listed_rounds(fault, groups, monkeypatch):
    """"unroll" with "skip": "list": where S listed tiles in a row are bare (and follow no left-out tiles) from a use
    t = 1 + S r, the consumers run them as one round of folded copies with constant slots, else tile by tile. The
    model draws the entries' bare bits and runs the kernel's own test, so rounds and single tiles mix; it passes the
    kernel as rendered, and fails it when the round's last copy waits in the round's phase instead of the next, or
    reads the slot of the copy before (so rounds do run in the model)."""
    from ws_protocol import simulate

    k = _ws_kernel(monkeypatch, CAUSAL, {"skip": "list", "groups": groups, "unroll": True}, {"B": 1, "M": 512, "N": 768})
    assert k.listed and k.bare_rounds and k.bare_fold is not None and k.stages == 3
    consumer = "\n".join(k.consumer())
    assert "const bool cvl_round = (t - 1) % 3 == 0" in consumer and "cvl_ph ^ 1" in consumer
    if fault:
        _break_round_copy(monkeypatch, fault)
        with pytest.raises(AssertionError, match="read from slot|deadlock"):
            for seed in range(4 * MODEL_SEEDS):
                simulate(k, seed)
    else:
        for seed in range(MODEL_SEEDS):
            assert simulate(k, seed) > 0


def test_listed_rounds_take_bare_folded_tiles_and_fit_the_registers(monkeypatch):
    """By default ("unroll": "auto", as with True) the causal benchmark's kernel (4 consumers, "list", bare tiles
    folded) runs runs of bare tiles in rounds: each copy of the body is the folded tile's alone (no entry read, no
    where, no check), and its second pass is "serial" so the kernel fits the consumers' registers (the CI compile
    test: no spill; the overlapped second pass beside the rounds spilled 3 KB). With "unroll": False the list's loop
    stays rolled; "again": "overlap" overlaps its second pass's products as the first pass's (session 32's kernel with
    both, 1.03x slower on an H100 in session 34)."""
    for tuning in ({"unroll": True}, {}):  # (the default's consumer read below)
        k = _ws_kernel(monkeypatch, CAUSAL, tuning)
        assert k.listed and k.bare_rounds and k.serial_again and k.groups == 4
    lines = k.consumer()
    start = next(i for i, ln in enumerate(lines) if "if (cvl_round) {" in ln)
    end = next(i for i in range(start, len(lines)) if lines[i].strip() == "} else {")
    copies = "\n".join(lines[start:end])
    assert copies.count("cvl_wgmma_commit();") == 2 * 3 and "cvl_tiles" not in copies and "b2[" not in copies
    assert "cvl_ok" not in copies and "fold_c" in copies and "cvl_fc" not in copies
    for tuning, serial in (({"unroll": False}, True), ({"unroll": False, "again": "overlap"}, False)):
        rolled = _ws_kernel(monkeypatch, CAUSAL, tuning)
        assert not rolled.bare_rounds and rolled.serial_again is serial and "cvl_round" not in "\n".join(rolled.consumer())
    with pytest.raises(ValueError, match="again"):
        _ws_kernel(monkeypatch, CAUSAL, {"again": "sometimes"})


def test_barrier_protocol_model_finds_the_mistakes_it_is_for(monkeypatch):
    """The model fails on the two mistakes the persistent walk first had: the first tile's scores read
    from slot 0 whatever the work item, and the last tile's V slot never released."""
    from ws_protocol import simulate

    from cuvil_dsl.codegen import cuda_attention

    path = ROOT / "tests" / "codegen" / "programs" / "attention_fused.yaml"
    k = _ws_kernel(monkeypatch, path, {"persistent": 2})
    assert simulate(k, 0) > 0
    issue = cuda_attention._WsAttention.issue_scores
    monkeypatch.setattr(cuda_attention._WsAttention, "issue_scores",
                        lambda self, stage: issue(self, "0" if "g + 0" in stage else stage))
    with pytest.raises(AssertionError, match="read from slot"):
        simulate(k, 0)
    monkeypatch.setattr(cuda_attention._WsAttention, "issue_scores", issue)
    release = cuda_attention._WsAttention.release
    last = str(k.nt - 1)
    monkeypatch.setattr(cuda_attention._WsAttention, "release",
                        lambda self, which, tile: "" if (which, tile) == ("v", last) else release(self, which, tile))
    with pytest.raises(AssertionError, match="deadlock"):
        simulate(k, 0)
